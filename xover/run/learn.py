"""Plans that learn from what ran: after a comparison, each group's measured aggregate in each way of sharing
(crossover per turn policy, concurrent - mps where its runs had an MPS daemon - and adaptive) is kept in the
store with what makes it hold (plan/measured.py: each job's workload, ranks, engine and hosts, the link,
the hardware, the settings that change sharing), for the next `xover plan` of the same jobs.

A way's aggregate is its jobs' speeds over the window in which every one of them was past its warm-up and not
yet done (analysis.compare). It is kept where that window held enough of the slowest job's iterations to say
something: it covered at least half of the way's run, or it was at least LEAST_WINDOW_ITERATIONS of the slowest
job's iterations long. A job with a long start-up beside a quick one (a script that loads its data for ten
seconds) runs together with it for a third of the run, yet for twenty iterations and more of steady pace: that
figure is kept, and weighs by its window's length in the mean the plan reads (store/measured.py). A way whose
jobs never ran together past warm-up, or whose jobs' alone runs are missing, is not kept; nor is any way of a group
in which a job ran faster next to others than alone (results.faster_than_alone): its run alone was slowed, so
every figure of the group relative to it reads high (the run warns of it), and one such comparison would
steer every later plan of those jobs."""

from __future__ import annotations

from collections.abc import Sequence

from ..links import Link
from ..plan.measured import JobIdentity, in_key_order, jobs_key
from ..results import GroupComparison, RunResult, faster_than_alone
from ..sharing import ADAPTIVE, CONCURRENT, CROSSOVER, MPS
from ..store.measured import add_measurement, taken_here
from ..store.session import Store
from .jobs import GroupToRun, JobSpec

LEAST_OVERLAP = 0.5  # of a way's run that its jobs ran together, for its figure to be kept
LEAST_WINDOW_ITERATIONS = 20  # ... or of the slowest job's iterations in that window (a few percent of noise)


def identity_of(job: JobSpec) -> JobIdentity:
    """What a measurement of this job holds for: its workload, ranks, engine and hosts."""
    return JobIdentity(job.recipe.workload, job.np, job.engine, len(job.devices))


def legacy_identity_of(job: JobSpec) -> JobIdentity:
    """Its identity as measurements were keyed before 2026-12-02 (its name in its workload: still read)."""
    return JobIdentity(job.recipe.legacy_workload, job.np, job.engine, len(job.devices))


def learn_measurements(
    store: Store,
    experiment_id: str,
    groups: Sequence[GroupToRun],
    jobs: Sequence[RunResult],
    comparisons: Sequence[GroupComparison],
    link: Link,
) -> int:
    """Keep every way measured on every group of the comparison; how many were kept."""
    hardware, tuning = taken_here()
    by_index = {comparison.group: comparison for comparison in comparisons}
    kept = 0
    with store.session() as session, session.begin():
        for group in groups:
            comparison = by_index.get(group.index)
            if comparison is None or len(group.jobs) < 2 or comparison.sequential != 1.0:
                continue
            if any(job.group == group.index and faster_than_alone(job.speed) for job in jobs):
                continue  # its run alone was slowed: every way of it reads high
            identities = {job.name: identity_of(job) for job in group.jobs}
            names = in_key_order(list(identities), identities)
            described = [{"name": name, **identities[name].to_json()} for name in names]
            key = jobs_key([identities[name] for name in names])
            for way, policy, gain, overlap, window_s, mode in _ways(comparison, jobs, group.index):
                runs = _runs(jobs, group.index, mode, policy)
                speeds = _speeds(runs, names)
                if gain is None or speeds is None or not long_enough(overlap, window_s, runs):
                    continue
                add_measurement(
                    session,
                    experiment_id=experiment_id,
                    group_index=group.index,
                    jobs_key=key,
                    jobs=described,
                    link=link.key,
                    hardware=hardware,
                    tuning=tuning,
                    way=way,
                    policy=policy,
                    gain=gain,
                    speeds=speeds,
                    window_s=window_s,
                )
                kept += 1
    return kept


def long_enough(overlap: float | None, window_s: float | None, runs: Sequence[RunResult]) -> bool:
    """Whether a way's figure rests on enough of its jobs running together to be kept (the module's rule)."""
    if overlap is None or overlap >= LEAST_OVERLAP:
        return True
    slowest_ms = max((run.iteration_ms or 0.0 for run in runs), default=0.0)
    return window_s is not None and slowest_ms > 0 and window_s * 1000 >= LEAST_WINDOW_ITERATIONS * slowest_ms


def _ways(comparison: GroupComparison, jobs: Sequence[RunResult], group: int):
    """(way, policy, gain, overlap, window, the runs' mode) of each way the comparison measured."""
    for policy, entry in comparison.policies.items():
        yield CROSSOVER.name, policy, entry.aggregate, entry.overlap, entry.window_s, CROSSOVER.mode.value
    under_mps = any(job.gpu_sharing == MPS.name for job in jobs if job.group == group and job.mode == CONCURRENT.name)
    for way in (CONCURRENT.name, ADAPTIVE.name):
        if comparison.measured.get(way) is not None:
            stored = MPS.name if way == CONCURRENT.name and under_mps else way
            yield stored, None, comparison.measured[way], comparison.overlaps.get(way), comparison.windows.get(way), way


def _runs(jobs: Sequence[RunResult], group: int, mode: str, policy: str | None) -> list[RunResult]:
    """The group's runs in that mode (and crossover's policy)."""
    return [job for job in jobs if job.group == group and job.mode == mode and (policy is None or job.policy == policy)]


def _speeds(runs: Sequence[RunResult], names: list[str]) -> list[float] | None:
    """Each job's speed in that way, in key order; None where one is unknown."""
    found = {run.name: run.speed for run in runs}
    speeds = [found.get(name) for name in names]
    return [float(speed) for speed in speeds if speed is not None] if all(s is not None for s in speeds) else None
