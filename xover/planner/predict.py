"""What a group should do under a turn policy: each job's speed (from the simulation of the runtime,
`simulate.py`), the fluid bound, and how long until its last job finishes.

Speeds are relative to alone: 0.8 means the job does 80% of the iterations per second it does on
its devices alone. A group's gain is the sum of its jobs' speeds (1.0: no better than one after
another). Simulations are memoised: a plan of many copies of a few jobs simulates each kind once.
Every function takes the model's `Calibration` (default: the shipped one, `calibration.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ..turns.policies import DEFAULT_POLICY
from .calibration import SHIPPED, Calibration
from .model import JobProfile, fluid_gain, interference_next_to
from .simulate import SimJob, simulate


@dataclass(frozen=True)
class GroupPrediction:
    policy: str
    speeds: dict[str, float]  # job name -> speed relative to alone
    iteration_ms: dict[str, float]
    gain: float  # sum of speeds
    fluid_bound: float  # the best any schedule could do
    duration_ms: float  # until the last job has done its iterations

    @property
    def slowdowns(self) -> dict[str, float]:
        return {name: 1.0 / speed if speed > 0 else float("inf") for name, speed in self.speeds.items()}


def sim_job(job: JobProfile) -> SimJob:
    return SimJob(name=job.name, compute_ms=job.device_ms, comm_ms=job.comm_ms, link_ms=job.link_busy_ms,
                  checkpoint_ms=job.checkpoint_ms, max_slowdown=job.max_slowdown,
                  interference=job.interference)


def group_speeds(jobs: Sequence[JobProfile], policy: str = DEFAULT_POLICY,
                 calibration: Calibration = SHIPPED) -> list[float]:
    """Each job's simulated speed in the group, in the order given."""
    if len(jobs) == 1:
        return [1.0]
    key = tuple(_key(job, interference_next_to(job, [*jobs[:i], *jobs[i + 1:]], calibration))
                for i, job in enumerate(jobs))
    return list(_simulated_speeds(key, policy, calibration))


def _key(job: JobProfile, interference: float) -> tuple:
    # rounded, so that copies of a job measured apart share one simulation; to significant digits,
    # not to 0.1 ms, which turned a job of sub-millisecond times into one of none
    return (_rounded(job.device_ms), _rounded(job.comm_ms), _rounded(job.link_busy_ms),
            _rounded(job.checkpoint_ms), job.max_slowdown, round(interference, 3))


def _rounded(ms: float) -> float:
    return float(f"{ms:.4g}")


@functools.lru_cache(maxsize=4096)
def _simulated_speeds(key: tuple, policy: str, calibration: Calibration) -> tuple[float, ...]:
    jobs = [SimJob(f"j{i}", *values) for i, values in enumerate(key)]
    result = simulate(jobs, "crossover", policy, calibration=calibration)
    return tuple(outcome.speed for outcome in result.jobs)


def predict_group(jobs: Sequence[JobProfile], policy: str = DEFAULT_POLICY,
                  calibration: Calibration = SHIPPED) -> GroupPrediction:
    speeds = group_speeds(jobs, policy, calibration)
    return GroupPrediction(
        policy=policy,
        speeds={job.name: speed for job, speed in zip(jobs, speeds)},
        iteration_ms={job.name: job.solo_ms / speed if speed > 0 else float("inf") for job, speed in zip(jobs, speeds)},
        gain=sum(speeds),
        fluid_bound=fluid_gain(jobs),
        duration_ms=group_duration_ms(jobs, policy, calibration),
    )


def group_duration_ms(jobs: Sequence[JobProfile], policy: str = DEFAULT_POLICY,
                      calibration: Calibration = SHIPPED) -> float:
    """Time until the last job has done its iterations: the group runs at its simulated speeds
    until a job finishes, then the others go on as a smaller group, and so on."""
    remaining = {job.name: float(job.iterations) for job in jobs}
    live = list(jobs)
    elapsed = max((job.startup_ms for job in jobs), default=0.0)  # launched together
    while live:
        speeds = group_speeds(live, policy, calibration)
        iteration = {job.name: job.solo_ms / max(speed, 1e-9) for job, speed in zip(live, speeds)}
        finish = min(remaining[job.name] * iteration[job.name] for job in live)
        elapsed += finish
        for job in live:
            remaining[job.name] -= finish / iteration[job.name]
        live = [job for job in live if remaining[job.name] > 1e-6]
    return elapsed


def sequential_duration_ms(jobs: Sequence[JobProfile]) -> float:
    """Time to run the jobs one after another, each alone on its devices, each launched on its own."""
    return sum(job.startup_ms + job.iterations * job.solo_ms for job in jobs)
