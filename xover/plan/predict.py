"""What a group should do under each way of sharing its devices: each job's speed (from the simulation
of the runtime, `simulate.py`), the fluid bound, and how long until its last job finishes.

A way of sharing (`SHARINGS`) is crossover under the plan's turn policy, concurrent (no coordination:
Linux's scheduler on a CPU, time-slicing on a GPU) or, on a GPU whose jobs measured it, CUDA MPS.
`best_sharing` picks the best of them; `pick_sharing` the way a plan runs a group under: adaptive where
the best way with turns and the best without are closer than the model's measured error (a coin toss for
the model), else the better one (or adaptive, where it ran on these jobs and measured clearly ahead of the
better), and says why. A way measured on the same jobs before (measured.py) is
predicted by its measurement instead of the simulation (`predict_considered`).

Speeds are relative to alone: 0.8 means the job does 80% of the iterations per second it does on
its devices alone. A group's gain is the sum of its jobs' speeds (1.0: no better than one after
another). Simulations are memoised: a plan of many copies of a few jobs simulates each kind once.
Every function takes the model's `Calibration` (default: the shipped one, `calibration.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..sharing import ADAPTIVE, CROSSOVER, DEFAULT_WAY, WAYS
from ..turns.policies import DEFAULT_POLICY
from .calibration import SHIPPED, Calibration
from .measured import NONE, Measurements
from .model import JobProfile, fluid_gain, interference_next_to
from .simulate import SHARING_MODES, SimJob, simulate

SHARINGS = SHARING_MODES  # crossover, concurrent, mps
# Turns are chosen over sharing without them only when predicted this much better: the predictions
# miss by a few percent either way (docs/measurements.md), and concurrent is what a user has without xover.
CROSSOVER_EDGE = 0.02


@dataclass(frozen=True)
class GroupPrediction:
    """What the planner predicts for a group under one way of sharing: each job's speed and iteration, the
    gain, and how close it comes to the fluid bound."""

    policy: str
    speeds: dict[str, float]  # job name -> speed relative to alone
    iteration_ms: dict[str, float]
    gain: float  # sum of speeds
    # the jobs, and how to work out the group's duration: the fluid bound (a linear program) and the duration
    # (one simulation per job's end) are worked out when first read, which a replay, looking at a group's
    # speeds again whenever its jobs change, never does
    jobs: tuple[JobProfile, ...] = field(repr=False, compare=False)
    duration: Callable[[], float] = field(repr=False, compare=False)
    sharing: str = DEFAULT_WAY.name  # the way of sharing predicted (crossover under `policy`, concurrent, mps)
    measurements: int = 0  # how many comparisons on these jobs its figures are the mean of (0: simulated)

    @functools.cached_property
    def fluid_bound(self) -> float:
        """The best any schedule could do."""
        return fluid_gain(self.jobs)

    @functools.cached_property
    def duration_ms(self) -> float:
        """Until the last job has done its iterations."""
        return self.duration()

    @property
    def slowdowns(self) -> dict[str, float]:
        """Each job's slowdown: its iteration shared over alone (inf for a job that never runs)."""
        return {name: 1.0 / speed if speed > 0 else float("inf") for name, speed in self.speeds.items()}


def sim_job(job: JobProfile) -> SimJob:
    """A job profile as the simulation takes it (stretches below 1 read as 1)."""
    return SimJob(
        name=job.name,
        compute_ms=job.device_ms,
        comm_ms=job.comm_ms,
        link_ms=job.link_busy_ms,
        checkpoint_ms=job.checkpoint_ms,
        max_slowdown=job.max_slowdown,
        interference=job.interference,
        corun_stretch=_at_least_one(job.corun_stretch),
        mps_stretch=_at_least_one(job.mps_stretch),
    )


def _at_least_one(stretch: float | None) -> float | None:
    # a job measured faster next to a computing partner than alone was disturbed alone
    return None if stretch is None else max(1.0, stretch)


def sharings_for(jobs: Sequence[JobProfile]) -> tuple[str, ...]:
    """The ways of sharing a group's devices worth predicting: crossover and concurrent always, one that
    needs a measured stretch (MPS) where every job measured it (a GPU profile)."""
    return tuple(
        name
        for name in SHARINGS
        if not WAYS[name].needs_measured_stretch
        or (len(jobs) > 1 and all(getattr(job, WAYS[name].stretch or "") is not None for job in jobs))
    )


def group_speeds(
    jobs: Sequence[JobProfile],
    policy: str = DEFAULT_POLICY,
    calibration: Calibration = SHIPPED,
    sharing: str = DEFAULT_WAY.name,
) -> list[float]:
    """Each job's simulated speed in the group, in the order given, under `sharing` (crossover under
    `policy`, concurrent, mps)."""
    if len(jobs) == 1:
        return [1.0]
    if sharing not in SHARINGS:
        raise ValueError(f"unknown way of sharing {sharing!r}; choose {', '.join(SHARINGS)}")
    key = tuple(
        _key(job, interference_next_to(job, [*jobs[:i], *jobs[i + 1 :]], calibration)) for i, job in enumerate(jobs)
    )
    # without turns the policy does not matter: one cache entry per way of sharing, whatever the policy
    return list(_simulated_speeds(key, policy if WAYS[sharing].takes_turns else None, calibration, sharing))


def _key(job: JobProfile, interference: float) -> tuple[Any, ...]:
    # rounded, so that copies of a job measured apart share one simulation; to significant digits,
    # not to 0.1 ms, which turned a job of sub-millisecond times into one of none
    return (
        _rounded(job.device_ms),
        _rounded(job.comm_ms),
        _rounded(job.link_busy_ms),
        _rounded(job.checkpoint_ms),
        job.max_slowdown,
        round(interference, 3),
        _at_least_one(job.corun_stretch),
        _at_least_one(job.mps_stretch),
    )


def _rounded(ms: float) -> float:
    return float(f"{ms:.4g}")


@functools.lru_cache(maxsize=4096)
def _simulated_speeds(
    key: tuple[Any, ...], policy: str | None, calibration: Calibration, sharing: str = DEFAULT_WAY.name
) -> tuple[float, ...]:
    jobs = [SimJob(f"j{i}", *values) for i, values in enumerate(key)]
    result = simulate(jobs, sharing, policy, calibration=calibration)
    return tuple(outcome.speed for outcome in result.jobs)


def predict_group(
    jobs: Sequence[JobProfile],
    policy: str = DEFAULT_POLICY,
    calibration: Calibration = SHIPPED,
    sharing: str = DEFAULT_WAY.name,
) -> GroupPrediction:
    """The group under `sharing` (crossover under `policy` by default)."""
    speeds = group_speeds(jobs, policy, calibration, sharing)
    jobs = tuple(jobs)  # as they are now, for the duration worked out later
    return GroupPrediction(
        policy=policy,
        speeds={job.name: speed for job, speed in zip(jobs, speeds)},
        iteration_ms={job.name: job.solo_ms / speed if speed > 0 else float("inf") for job, speed in zip(jobs, speeds)},
        gain=sum(speeds),
        jobs=jobs,
        duration=lambda: group_duration_ms(jobs, policy, calibration, sharing),
        sharing=sharing,
    )


def predict_sharings(
    jobs: Sequence[JobProfile], policy: str = DEFAULT_POLICY, calibration: Calibration = SHIPPED
) -> dict[str, GroupPrediction]:
    """The group under every way of sharing worth predicting (`sharings_for`)."""
    return {sharing: predict_group(jobs, policy, calibration, sharing) for sharing in sharings_for(jobs)}


def acceptable(prediction: GroupPrediction, jobs: Sequence[JobProfile]) -> bool:
    """No job slower than its max_slowdown, none starved (no iteration done in the simulation)."""
    protected = all(
        not job.max_slowdown or prediction.slowdowns[job.name] <= job.max_slowdown * (1 + 1e-9) for job in jobs
    )
    return protected and min(prediction.speeds.values(), default=1.0) > 0


def best_sharing(predictions: dict[str, GroupPrediction], jobs: Sequence[JobProfile]) -> GroupPrediction:
    """The way of sharing a group should run under: the highest predicted gain among those that keep
    every job's protection, where crossover must beat the best way without turns by CROSSOVER_EDGE
    (a user is never worse off with xover than without it). With none acceptable, the best gain."""
    fine = {sharing: p for sharing, p in predictions.items() if acceptable(p, jobs)} or predictions
    without_turns = [p for sharing, p in fine.items() if not WAYS[sharing].takes_turns]
    best_without = max(without_turns, key=lambda p: p.gain, default=None)
    crossover = fine.get(CROSSOVER.name)
    if crossover is not None and (best_without is None or crossover.gain > best_without.gain * (1 + CROSSOVER_EDGE)):
        return crossover
    assert best_without is not None
    return best_without


def group_duration_ms(
    jobs: Sequence[JobProfile],
    policy: str = DEFAULT_POLICY,
    calibration: Calibration = SHIPPED,
    sharing: str = DEFAULT_WAY.name,
    first_speeds: Mapping[str, float] | None = None,
) -> float:
    """Time until the last job has done its iterations: the group runs at its simulated speeds (while all
    run, at `first_speeds` where they were measured) until a job finishes, then the others go on as a
    smaller group, and so on."""
    remaining = {job.name: float(job.iterations) for job in jobs}
    live = list(jobs)
    elapsed = max((job.startup_ms for job in jobs), default=0.0)  # launched together
    simulated = sharing if sharing in SHARINGS else DEFAULT_WAY.name
    while live:
        if first_speeds is not None and len(live) == len(jobs):
            speeds = [max(first_speeds[job.name], 1e-9) for job in live]
        else:
            speeds = group_speeds(live, policy, calibration, simulated)
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


# ------------------------------------------------------------------------------------ the plan's pick

MEASURED, SIMULATED = "measured", "simulated"


def lead(ahead: float, behind: float) -> float:
    """How far `ahead` leads `behind`, relative to `ahead` (0 where `ahead` is not above 0): what the pick sets
    against a figure's error."""
    return (ahead - behind) / ahead if ahead > 0 else 0.0


def predict_considered(
    jobs: Sequence[JobProfile],
    policy: str = DEFAULT_POLICY,
    calibration: Calibration = SHIPPED,
    measured: Measurements = NONE,
) -> tuple[dict[str, GroupPrediction], dict[str, str]]:
    """Every way worth predicting for the group, each from its measurement on these jobs where one is stored
    (adaptive's too, where it ran), else from the simulation; and where each figure came from."""
    predictions = predict_sharings(jobs, policy, calibration)
    sources = dict.fromkeys(predictions, SIMULATED)
    for way, (found, speeds) in measured.for_group(jobs, policy).items():
        if way in predictions or way == ADAPTIVE.name:
            predictions[way] = measured_prediction(jobs, way, policy, speeds, calibration, found.runs)
            sources[way] = MEASURED
    return predictions, sources


def measured_runs(considered: Mapping[str, GroupPrediction], sources: Mapping[str, str]) -> dict[str, int]:
    """For each way predicted from its measurement, how many comparisons that figure is the mean of (what an
    adaptive group weighs its figures by: run/units.py, `measured_before`)."""
    return {way: max(1, p.measurements) for way, p in considered.items() if sources.get(way) == MEASURED}


def measured_prediction(
    jobs: Sequence[JobProfile],
    way: str,
    policy: str,
    speeds: Mapping[str, float],
    calibration: Calibration = SHIPPED,
    runs: int = 1,
) -> GroupPrediction:
    """A way of sharing as it measured on these jobs (the mean of `runs` comparisons): their speeds; the group's
    duration from them while every job runs (the simulation for what follows a job's end)."""
    speeds = {job.name: speeds[job.name] for job in jobs}
    jobs = tuple(jobs)  # as they are now, for the duration worked out later
    return GroupPrediction(
        policy=policy,
        speeds=speeds,
        iteration_ms={
            job.name: job.solo_ms / speed if speed > 0 else float("inf") for job, speed in zip(jobs, speeds.values())
        },
        gain=sum(speeds.values()),
        jobs=jobs,
        duration=lambda: group_duration_ms(jobs, policy, calibration, way, first_speeds=speeds),
        sharing=way,
        measurements=runs,
    )


@dataclass(frozen=True)
class SharingPick:
    """How a plan runs a group: the prediction it runs under (adaptive: the better of the two ways it chooses
    between, or its own measurement), why, each way considered and where each figure came from."""

    prediction: GroupPrediction
    reason: str
    considered: dict[str, GroupPrediction]
    sources: dict[str, str]  # way -> measured | simulated

    @property
    def sharing(self) -> str:
        """The way picked."""
        return self.prediction.sharing


def pick_sharing(
    predictions: dict[str, GroupPrediction],
    jobs: Sequence[JobProfile],
    sources: Mapping[str, str] | None = None,
    calibration: Calibration = SHIPPED,
) -> SharingPick:
    """The plan's pick. Of the ways that keep every job within its max_slowdown and starve none, the best with
    turns (crossover) and the best without (concurrent, or mps where measured): where they are closer than
    the error of their figures - the model's measured error (`Calibration.model_error`), or a measurement's
    (`measured_error`) where both were measured - the model cannot tell them apart, and the group runs
    `adaptive`, which measures both while it runs; else the better one, unless adaptive itself ran on these jobs
    and measured ahead of it by more than the error of the two figures (on a CPU adaptive's state without turns
    keeps the thread policy of a turn-taking run, which plain concurrent does not: docs/design.md, *The free
    state*). One acceptable way: that one."""
    sources = dict(sources or dict.fromkeys(predictions, SIMULATED))
    fixed = {way: p for way, p in predictions.items() if WAYS[way].simulated}
    fine = {way: p for way, p in fixed.items() if acceptable(p, jobs)}
    if not fine:
        best = max(fixed.values(), key=lambda p: p.gain)
        return SharingPick(
            best, f"no way keeps every job within its max_slowdown: {best.sharing}, the best gain", predictions, sources
        )
    turns = fine.get(CROSSOVER.name)
    free = max((p for way, p in fine.items() if not WAYS[way].takes_turns), key=lambda p: p.gain, default=None)
    if turns is None or free is None:
        only = turns or free
        assert only is not None
        left_out = CROSSOVER.name if turns is None else "every way without turns"
        return SharingPick(
            only, f"{left_out} would leave a job beyond its max_slowdown: {only.sharing}", predictions, sources
        )
    both_measured = sources.get(CROSSOVER.name) == MEASURED and sources.get(free.sharing) == MEASURED
    error = calibration.measured_error if both_measured else calibration.model_error
    whose = "the measurements'" if both_measured else "the model's measured"
    better, other = (turns, free) if turns.gain >= free.gain else (free, turns)
    gap = lead(better.gain, other.gain)
    figures = (
        f"{CROSSOVER.name} {turns.gain:.2f} ({sources.get(CROSSOVER.name, SIMULATED)}), "
        f"{free.sharing} {free.gain:.2f} ({sources.get(free.sharing, SIMULATED)})"
    )
    adaptive = predictions.get(ADAPTIVE.name) if sources.get(ADAPTIVE.name) == MEASURED else None
    if gap < error:
        chosen = adaptive or replace(better, sharing=ADAPTIVE.name)
        reason = f"{figures}: {gap:.1%} apart, within {whose} error ({error:.1%}); adaptive measures both while it runs"
        return SharingPick(chosen, reason, predictions, sources)
    # the lead is of the larger figure (what is set against a relative error): said as the other's distance below
    # it, since "ahead by 29.7%" read low for 1.51 against 1.06
    reason = (
        f"{figures}: {better.sharing} ahead, {other.sharing} {gap:.1%} below it, more than {whose} error ({error:.1%})"
    )
    if adaptive is not None and acceptable(adaptive, jobs):
        # what ran beats what either fixed way promises: a plan that learns from what ran takes it
        ahead = lead(adaptive.gain, better.gain)
        against = calibration.measured_error if sources.get(better.sharing) == MEASURED else calibration.model_error
        if ahead > against:
            reason += (
                f"; but {ADAPTIVE.name} measured {adaptive.gain:.2f} on these jobs, {better.sharing} {ahead:.1%} below "
                f"it, more than the error of the two figures ({against:.1%})"
            )
            return SharingPick(adaptive, reason, predictions, sources)
    return SharingPick(better, reason, predictions, sources)
