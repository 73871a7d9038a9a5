"""Throughput model for jobs that take turns on the same devices.

Each job i is summarised by two per-iteration times:

* ``c_i`` - time it occupies the devices: data loading + forward + backward (+ update);
* ``m_i`` - exposed communication: from the end of its backward pass until its
  gradients are all-reduced and it could start the next iteration.

Pipelined model (what xover's runtime does)
-------------------------------------------
xover passes a token round-robin over the jobs of a group: only the token holder
computes. After computing, a job starts its all-reduce and hands the token on; it
waits for that all-reduce only right before its *next* turn. Communication is
therefore not aligned to any stage: a long all-reduce of one job can overlap the
compute of several other jobs. In steady state the period of a group G is set by
the busiest shared resource or by one job's own critical path::

    P(G) = max( sum_i c_i,          # the devices are time-shared for compute
                sum_i m_i,          # the network link is shared for all-reduces
                max_i (c_i + m_i) ) # no job beats its own solo iteration

For a single job P = c + m. This closed form equals the long-run period of an
event simulation of "round-robin token on the devices, FIFO on the link" (the
tests check that on random instances).

Lock-step model (Muri, SIGCOMM'22)
----------------------------------
Muri interleaves jobs in stages that act as barriers: in each stage one job's
compute is paired with another job's communication, and no job moves on until
the stage is over. For two jobs the period is ``T = max(c1, m2) + max(m1, c2)``;
for k jobs in a ring (stage s: job s computes while job s-1 communicates)
``T = sum_s max(c_s, m_{s-1})`` (see ``lockstep_period``).

When each applies: the lock-step formula describes runtimes that synchronise all
jobs at every stage boundary; the pipelined one describes xover, where only a
job's own all-reduce gates its next turn. Lock-step is never below pipelined
(every stage term dominates the c or m it contains, and the two terms around a
job cover c_i + m_i). For two jobs they coincide exactly:
``max(c1, m2) + max(m1, c2) = max(c1 + c2, m1 + m2, c1 + m1, c2 + m2)``.
They differ from three jobs on. Example: c = (50, 50, 50), m = (100, 10, 10).
Pipelined: max(150, 120, 150) = 150 ms, because job 1's 100 ms all-reduce
overlaps the compute of jobs 2 and 3. Lock-step: max(50, 10) + max(50, 100)
+ max(50, 10) = 200 ms, because the stage holding job 1's all-reduce can only
hide one 50 ms compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class JobProfile:
    """Measured per-iteration behaviour of one data-parallel training job.

    ``memory_gb`` is what one replica needs on each of its devices; all jobs of a
    group live on the same devices at once, so their memory adds up.
    """

    name: str
    devices: int
    compute_ms: float
    comm_ms: float
    memory_gb: float
    data_ms: float = 0.0
    iterations: int = 100

    def __post_init__(self) -> None:
        problem = _profile_problem(self)
        if problem is not None:
            raise InvalidJobProfile(self.name, problem)

    @property
    def device_ms(self) -> float:
        """Time per iteration the job holds the devices (c): data loading counts too."""
        return self.data_ms + self.compute_ms

    @property
    def solo_ms(self) -> float:
        """Iteration time when the job runs alone: c + m."""
        return self.device_ms + self.comm_ms

    @property
    def compute_fraction(self) -> float:
        """c / (c + m): close to 1 for compute-bound jobs, close to 0 for communication-bound."""
        return self.device_ms / self.solo_ms


class InvalidJobProfile(ValueError):
    """Numbers that no job can have; ``problem`` says which field and why."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"job {name!r}: {problem}")
        self.problem = problem


def _profile_problem(job: JobProfile) -> str | None:
    """Why ``job``'s numbers are unusable, or None if they are fine."""
    if not job.name:
        return "name is empty"
    if isinstance(job.devices, bool) or not isinstance(job.devices, int) or job.devices < 1:
        return f"devices must be a whole number >= 1, got {job.devices!r}"
    if isinstance(job.iterations, bool) or not isinstance(job.iterations, int) or job.iterations < 1:
        return f"iterations must be a whole number >= 1, got {job.iterations!r}"
    for field_name in ("compute_ms", "comm_ms", "memory_gb", "data_ms"):
        value = getattr(job, field_name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{field_name} must be a finite number, got {value!r}"
        if value < 0:
            return f"{field_name} must be >= 0, got {value!r}"
    # A job with no compute never needs the devices; it would also make gains divide by zero.
    if job.compute_ms <= 0:
        return f"compute_ms must be > 0, got {job.compute_ms!r}"
    return None


def predicted_period(jobs: Sequence[JobProfile]) -> float:
    """Steady-state time (ms) for every job of the group to finish one iteration."""
    if not jobs:
        return 0.0
    return max(
        sum(job.device_ms for job in jobs),
        sum(job.comm_ms for job in jobs),
        max(job.solo_ms for job in jobs),
    )


def lockstep_period(jobs: Sequence[JobProfile]) -> float:
    """Muri-style lock-step period: stage s pairs job s's compute with job s-1's all-reduce.

    Only for comparison with ``predicted_period``; the planner does not use it.
    """
    if not jobs:
        return 0.0
    if len(jobs) == 1:
        return jobs[0].solo_ms
    return sum(max(jobs[s].device_ms, jobs[s - 1].comm_ms) for s in range(len(jobs)))


def group_gain(jobs: Sequence[JobProfile]) -> float:
    """Throughput of the group relative to running its jobs one after another (1.0 = no better)."""
    return sum(job.solo_ms for job in jobs) / predicted_period(jobs)


def time_saved_ms(jobs: Sequence[JobProfile]) -> float:
    """Time per period saved by sharing instead of taking turns job by job (>= 0)."""
    return sum(job.solo_ms for job in jobs) - predicted_period(jobs)


def predicted_slowdown(job: JobProfile, group: Sequence[JobProfile]) -> float:
    """How much longer each iteration of ``job`` takes inside ``group`` than alone."""
    return predicted_period(group) / job.solo_ms


def group_duration_ms(jobs: Sequence[JobProfile]) -> float:
    """Time until the last job of the group finishes all its iterations.

    The group runs at P(G) until the job with the fewest iterations is done; the
    rest continue as a smaller group at its own period, and so on.
    """
    remaining = sorted(jobs, key=lambda job: job.iterations)
    duration = 0.0
    done_iterations = 0
    while remaining:
        next_finish = remaining[0].iterations
        duration += (next_finish - done_iterations) * predicted_period(remaining)
        done_iterations = next_finish
        remaining = [job for job in remaining if job.iterations > next_finish]
    return duration


def sequential_duration_ms(jobs: Sequence[JobProfile]) -> float:
    """Time to run the jobs one after another, each alone on its devices."""
    return sum(job.iterations * job.solo_ms for job in jobs)
