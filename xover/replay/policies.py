"""The policies a replay compares: who goes first, whether a waiting job may take a running one's devices,
and whether jobs share devices. Each is one small object behind one interface (`Policy`), looked up by
name in `POLICIES`.

No sharing:
* `fifo`     - first come, first served; the first job that does not fit holds every later one back.
* `srtf`     - shortest remaining time first (time alone), preemptive; a job that does not fit lets
               later ones start.
* `srsf`     - shortest remaining service first (time alone x devices), preemptive.
* `tiresias` - Tiresias' discretised two-dimensional least-attained-service: a job's queue is set by the
               GPU time it has had (GPU-seconds; Muri's simulator's thresholds 3,250 and 7,200 by
               default), jobs of a higher queue go first and preempt those of lower queues; within a
               queue first come, first served, running jobs ahead of waiting ones (never preempted by
               their own queue). Durations are not known to it.

Sharing:
* `xover`     - xover's grouping over `srsf`'s order (durations known, as Muri-S): the jobs next in line
                are grouped by xover's matching where the model predicts a gain, placed as one, and a
                group is kept only while it is predicted to gain.
* `xover-las` - the same over `tiresias`' order (durations not known, as Muri-L).

A job's key is a float that is lower for the job to go first: `key0 - slope x (t - t0)` at time t for
the keys that fall as a job runs (remaining time or service), a constant for the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Muri's simulator's Tiresias (`simulator/run_sim.py`, dlas-gpu): queue limits in GPU-seconds of service.
TIRESIAS_LIMITS = (3250.0, 7200.0)
QUEUE_SPAN = 1e12  # keys of one Tiresias queue: queue x QUEUE_SPAN + the order of entry in it


@dataclass(frozen=True)
class Policy:
    """How a policy orders and shares (see the module's list).

    * `order`: fifo | remaining-time | remaining-service | attained-service;
    * `preemptive`: a waiting job that goes first takes a running job's devices;
    * `backfill`: a job that does not fit lets later ones start;
    * `groups`: jobs share devices (xover's grouping).
    """

    name: str
    order: str
    preemptive: bool = True
    backfill: bool = True
    groups: bool = False
    description: str = ""

    @property
    def falling(self) -> bool:
        """Whether a job's key falls as it runs (its remaining time or service)."""
        return self.order in ("remaining-time", "remaining-service")

    @property
    def knows_durations(self) -> bool:
        """Whether it reads how long jobs run (FIFO and least-attained-service do not)."""
        return self.falling

    def key_of(self, remaining_s: float, gpus: int, level: int, entry: int, arrival_index: int) -> float:
        """A job's key now: `remaining_s` its remaining time alone, `level` its Tiresias queue, `entry` the
        order in which it entered that queue, `arrival_index` its place in the trace."""
        if self.order == "fifo":
            return float(arrival_index)
        if self.order == "remaining-time":
            return remaining_s
        if self.order == "remaining-service":
            return remaining_s * gpus
        return level * QUEUE_SPAN + entry

    def slope(self, gpus: int) -> float:
        """How fast its key falls per second of remaining time alone it works off."""
        if self.order == "remaining-time":
            return 1.0
        if self.order == "remaining-service":
            return float(gpus)
        return 0.0

    def preempts_above(self, waiting_key: float) -> float:
        """The running keys a waiting job with `waiting_key` preempts are those above this (inf: none)."""
        if not self.preemptive:
            return math.inf
        if self.order == "attained-service":
            return (math.floor(waiting_key / QUEUE_SPAN) + 1) * QUEUE_SPAN - 0.5
        return waiting_key

    def preempts(self, waiting_key: float, running_key: float) -> bool:
        """Whether a waiting job with `waiting_key` takes the devices of a running one with `running_key`:
        it goes first; under least-attained-service only from a higher queue (running jobs keep their
        place ahead of their own queue's waiting ones)."""
        if not self.preemptive:
            return False
        if self.order == "attained-service":
            return math.floor(waiting_key / QUEUE_SPAN) < math.floor(running_key / QUEUE_SPAN)
        return waiting_key < running_key


POLICIES: dict[str, Policy] = {
    policy.name: policy
    for policy in (
        Policy("fifo", "fifo", preemptive=False, backfill=False, description="first come, first served"),
        Policy("srtf", "remaining-time", description="shortest remaining time first, preemptive"),
        Policy("srsf", "remaining-service", description="shortest remaining GPU time first, preemptive"),
        Policy("tiresias", "attained-service", description="Tiresias' discretised 2D least-attained-service"),
        Policy("xover", "remaining-service", groups=True, description="xover's grouping over srsf's order"),
        Policy("xover-las", "attained-service", groups=True, description="xover's grouping over tiresias' order"),
    )
}
DEFAULT_POLICIES = ("fifo", "srtf", "tiresias", "xover")


def queue_of(attained_gpu_s: float, limits: tuple[float, ...] = TIRESIAS_LIMITS) -> int:
    """The Tiresias queue of a job that has had `attained_gpu_s` GPU-seconds of service."""
    level = 0
    while level < len(limits) and attained_gpu_s >= limits[level]:
        level += 1
    return level
