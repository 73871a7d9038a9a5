"""Communication threads give way to a partner's compute (CPU jobs under crossover).

On a CPU the engines communicate from threads of every rank (Horovod's background loop, Gloo's I/O
loops), on the cores that compute. While an all-reduce is in flight they wake thousands of times a
second, and Linux's scheduler lets a waking thread preempt the one running: the partner computing on
that core is interrupted at every wake-up, and its compute slows far beyond the CPU the
communication itself uses (docs/measurements.md, *Figures behind the design*: *The engines' threads*).

SCHED_BATCH threads never preempt on wake-up; they run when the running thread's slice ends (a tick
at most). Their all-reduces lose little: the kernel keeps the link busy from the socket buffers
without them. So, under crossover on a CPU, every thread of a rank but the main one runs as
SCHED_BATCH, once the engine has started them and again after the first iterations (some backends
start threads on first use). The main thread keeps the default: a turn granted must run at once, and
so must its poll for the end of its all-reduces (making it SCHED_BATCH while it waits did not help,
and it delays the job whose communication is its critical path).

It also changes a job alone: its own threads stop preempting its compute, faster for some jobs and a
little slower for one whose exposed all-reduce is its critical path. So part of what crossover gains over
the baselines on some pairs is this policy rather than the turns; `bench/thread_policy.py` measures how
much.

Not applied where torch computes on several threads per rank (`XOVER_THREADS_PER_RANK` > 1, the user's
`OMP_NUM_THREADS` > 1, or a script's own set_num_threads): its compute threads could not be told from the
engine's.
`XOVER_COMM_THREADS=normal` leaves every thread at the default policy; `always` applies SCHED_BATCH in
every mode (alone and co-located without turns too), for such comparisons. No privilege is needed:
SCHED_BATCH and SCHED_OTHER are ordinary time-sharing policies.
"""

from __future__ import annotations

import os
import threading

from ..settings import settings

APPLY_AFTER_ITERATIONS = 2


def _set_policy(tid: int, policy: int) -> bool:
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(0))
        return True
    except (OSError, AttributeError):  # the thread has ended, or a platform without sched_setscheduler
        return False


def batch_other_threads() -> int:
    """SCHED_BATCH for every thread of this process but the main one; returns how many run so."""
    main = threading.main_thread().native_id
    try:
        tids = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return 0
    return sum(_set_policy(tid, os.SCHED_BATCH) for tid in tids if tid != main)


def _intra_op_threads() -> int:
    import torch  # loaded already in every rank

    return torch.get_num_threads()


class CommThreads:
    """The policy of a rank's threads: SCHED_BATCH on a CPU device under crossover (in every mode
    with `always`)."""

    def __init__(self, crossover: bool, cpu: bool) -> None:
        policy = settings().comm_threads
        wanted = policy == "always" or (policy == "batch" and crossover)
        self.active = wanted and cpu and hasattr(os, "SCHED_BATCH")
        self.threads = 0

    def apply(self, iteration: int | None = None) -> None:
        """Put the engine's threads under SCHED_BATCH: at the start, then each of the first iterations (threads
        start late); not where torch computes on several threads of its own, which would slow the job."""
        if not self.active or (iteration is not None and iteration >= APPLY_AFTER_ITERATIONS):
            return
        if _intra_op_threads() > 1:
            # torch's own compute threads (XOVER_THREADS_PER_RANK, OMP_NUM_THREADS, a script's set_num_threads) are
            # not told apart from the engine's here: demoting them would slow the job's own compute
            self.active = False
            return
        self.threads = max(self.threads, batch_other_threads())

    def start_fields(self) -> dict:
        """For the `start` record: how the communication threads were scheduled."""
        return {"comm_threads": "batch" if self.active else "normal"}
