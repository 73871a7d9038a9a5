"""How a rank waits for its step's all-reduces: without spinning, and mostly asleep.

A blocking wait in Horovod spins a core (FACTS 2), so the rank polls with a growing sleep (0.2 ms up
to 2 ms). Each poll wakes the rank's main thread, which does not run as SCHED_BATCH (a turn granted
must run at once; `thread_policy.py`) and so preempts whatever computes on its core: under crossover,
the partner holding the turn. A job whose all-reduce is long (mlp-synthetic: 125 ms exposed per
iteration) woke about 63 times per iteration (475 voluntary context switches a second).

So the rank first sleeps through most of the all-reduce it expects - three quarters of what is left
of the shortest of its last five transfers (from the first gradient to all-reduced) - and polls only
after that: 152 switches a second on the same job, its speed alone unchanged (121.0 and 120.9
samples/s). A transfer shorter than the shortest recent one (a partner's traffic gone) is noticed late,
by up to three quarters of the difference; each late step records a shorter span than the last, so the
expectation comes down geometrically (a transfer 81 ms shorter than before costs about a quarter of a
second in all, once).

Its gain over polling from the start is small, within a single run's noise (`bench/ablation.py --off
XOVER_WAIT=poll`; docs/measurements.md, *Figures behind the design*: *Waiting for the gradients*).

`XOVER_WAIT=poll` turns the expectation off (poll from the start, as before). Only the built-in
worker's engines know when their transfer started; the script shims (`script_shim.py`,
`ddp_shim.py`) poll from the start.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from ..settings import settings

EXPECTED_FRACTION = 0.75  # of the expected rest of the transfer slept through before polling
RECENT_TRANSFERS = 5
MIN_REST_S = 0.001  # with less of the transfer expected to be left, polling costs no more than a sleep


def wait_without_spinning(done: Callable[[], bool], first_sleep_s: float = 0.0002, max_sleep_s: float = 0.002) -> None:
    """Poll `done()` with a growing sleep."""
    sleep = first_sleep_s
    while not done():
        time.sleep(sleep)
        sleep = min(sleep * 1.5, max_sleep_s)


def meet_without_spinning(hvd) -> None:
    """Return once every rank of the Horovod job got here, having slept while waiting. Horovod's blocking
    collectives spin while they wait (FACTS 2): a rank that reaches its first broadcast before its job's
    other ranks have started (torch's import, the data) would spin through their start, on the cores
    they start on. Met first, the broadcasts that follow wait for nobody."""
    import torch

    handle = hvd.allreduce_async(torch.zeros(1), name="xover.meet")
    wait_without_spinning(lambda: hvd.poll(handle), max_sleep_s=0.02)  # a start: 20 ms late is nothing
    hvd.synchronize(handle)


class LinkClock:
    """Start of a step's communication (its first gradient), its measured span (`link_s`: the time the
    job keeps the link busy), and the sleep before polling that the recent spans allow."""

    def __init__(self) -> None:
        self.first_gradient_at: float | None = None
        self.link_s: float | None = None
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_TRANSFERS)
        self.expect = settings().wait == "expect"

    def on_gradient(self, _parameter=None) -> None:
        """A gradient is ready: the step's communication starts at its first."""
        if self.first_gradient_at is None:
            self.first_gradient_at = time.perf_counter()

    def watch(self, model) -> None:
        """Hook every trainable parameter of `model`, so that its gradient marks the start."""
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.register_post_accumulate_grad_hook(self.on_gradient)

    def expected_rest_s(self) -> float:
        """What is left of this step's transfer if it takes as long as the shortest recent one."""
        if not self.recent or self.first_gradient_at is None:
            return 0.0
        return max(0.0, min(self.recent) - (time.perf_counter() - self.first_gradient_at))

    def sleep_through_expected(self) -> None:
        """Called when the wait begins: sleep through most of the transfer expected to be left."""
        rest = self.expected_rest_s() if self.expect else 0.0
        if rest > MIN_REST_S:
            time.sleep(rest * EXPECTED_FRACTION)

    def done(self) -> None:
        """The step's all-reduces are done: its span becomes `link_s` and one of the recent spans."""
        if self.first_gradient_at is not None:
            self.link_s = time.perf_counter() - self.first_gradient_at
            self.recent.append(self.link_s)
        self.first_gradient_at = None
