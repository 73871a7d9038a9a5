"""Make a plan: group jobs, place the groups on devices, and predict what it buys."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..errors import XoverError
from ..sharing import ALONE, DEFAULT_WAY
from ..turns.policies import DEFAULT_POLICY, POLICIES
from .decide import Queued, StepRules, decide
from .grouping import ALGORITHMS, GroupingRules
from .instances import JobInstance
from .measured import NONE, Measurements
from .model import JobProfile
from .placement import place_groups, unplaceable_reason
from .predict import (
    SharingPick,
    measured_runs,
    sequential_duration_ms,
)
from .state import FreeDevices, Host
from .throughput import XoverModel


class PlanInputError(XoverError):
    """The jobs, hosts or options given to ``make_plan`` cannot make a plan."""


@dataclass(frozen=True)
class GroupPlan:
    """Jobs that share the same devices, the way they share them (`sharing`: crossover under the
    plan's turn policy, concurrent, mps, or adaptive; "alone" for a job by itself), and what the model
    predicts for them that way: each job's speed relative to alone (its slowdown is the inverse), the group's
    gain (the sum of the speeds), the fluid bound, and when it starts and how long it lasts.
    `predicted_by_sharing`: the predicted gain of each way of sharing that was considered; `predicted_from`:
    where each came from (measured on these jobs before, or simulated); `measured_runs`: for each measured one, how
    many comparisons its figure is the mean of; `sharing_reason`: why the pick."""

    jobs: list[JobProfile]
    devices: list[str]
    wave: int
    predicted_period_ms: float  # the slowest job's iteration time in the group
    predicted_gain: float
    predicted_slowdown: dict[str, float]
    predicted_duration_ms: float
    predicted_speed: dict[str, float] = field(default_factory=dict)
    predicted_iteration_ms: dict[str, float] = field(default_factory=dict)
    fluid_bound: float | None = None
    predicted_start_ms: float = 0.0
    sharing: str = DEFAULT_WAY.name
    predicted_by_sharing: dict[str, float] = field(default_factory=dict)
    predicted_from: dict[str, str] = field(default_factory=dict)  # way -> measured | simulated
    measured_runs: dict[str, int] = field(default_factory=dict)  # measured way -> comparisons its figure is the mean of
    sharing_reason: str = ""


@dataclass(frozen=True)
class PlannedScript:
    """A job of the user's own script, as it was profiled: what `xover run` needs to run it the same way."""

    path: str
    args: list[str]
    engine: str
    sha256: str  # its content when profiled
    iterations: int | None = None  # stop after this many optimizer steps (None: its own end)
    env: dict[str, str] = field(default_factory=dict)
    pass_env: list[str] = field(default_factory=list)  # names: their values come from xover's environment


@dataclass(frozen=True)
class Plan:
    """Groups placed on devices, in the order they start, plus jobs that cannot run at all.

    ``predicted_aggregate_gain``: the placed jobs' time alone over the groups' durations (work
    done per unit of group time; 1.0 = no better than one job at a time).
    ``predicted_makespan_ms``: the schedule `xover run` follows: in the plan's order, each group
    starts as soon as every one of its devices is free.
    ``sequential_makespan_ms``: every placed job alone, one after another.
    ``recipes``: job name -> recipe path, when the plan was made from recipes; ``planned_as``: job name ->
    the recipe's `Recipe.planned_as` then (a built-in model's; a script's content is in ``scripts``);
    ``scripts``: job name -> its script, for the jobs of users' own scripts.
    ``link``, ``engine``, ``device_kind``: what the profiles were taken under (None: a plan made from a
    trace); `xover run` of the plan runs under the same, and Slurm asks for that kind of device.
    """

    algo: str
    hosts: list[Host]
    groups: list[GroupPlan]
    unplaced: list[tuple[str, str]]
    predicted_aggregate_gain: float
    predicted_makespan_ms: float
    sequential_makespan_ms: float
    recipes: dict[str, str] = field(default_factory=dict)
    policy: str = DEFAULT_POLICY
    scripts: dict[str, PlannedScript] = field(default_factory=dict)
    planned_as: dict[str, str] = field(default_factory=dict)
    link: str | None = None
    engine: str | None = None
    device_kind: str | None = None
    # read from a file: its keys this version does not know, each as "groups[0].sharng (did you mean 'sharing'?)"
    unknown_keys: tuple[str, ...] = ()

    @property
    def jobs(self) -> list[JobProfile]:
        """All placed jobs, group by group."""
        return [job for group in self.groups for job in group.jobs]

    @property
    def predicted_for_its_jobs(self) -> bool:
        """Whether the plan's predicted makespans are for its jobs as they stand: a plan file edited by hand
        (a job's iterations, its times) keeps the figures predicted for what it held before. Its one-after-
        another makespan is a sum over its jobs of what the file holds of each: where it differs, one was edited."""
        return math.isclose(sequential_duration_ms(self.jobs), self.sequential_makespan_ms, rel_tol=1e-6, abs_tol=1e-3)

    @property
    def waves(self) -> int:
        """How deep the plan runs: one more than the deepest group's wave (0 for no groups)."""
        return 1 + max((group.wave for group in self.groups), default=-1)


def local_hosts(devices: int) -> list[Host]:
    """The host list for ``--devices N`` on this machine."""
    return [("localhost", devices)]


def make_plan(
    jobs: Sequence[JobProfile],
    hosts: Sequence[Host],
    device_memory_gb: float | None = None,
    max_group: int = 2,
    algo: str = "matching",
    min_gain_margin: float = 0.05,
    policy: str = DEFAULT_POLICY,
    measured: Measurements = NONE,
) -> Plan:
    """Group ``jobs`` with ``algo``, predict each group, place the groups on ``hosts`` as devices free up; a group
    measured before (``measured``) is predicted by its measurement."""
    _check_inputs(jobs, hosts, device_memory_gb, max_group, algo, min_gain_margin)
    if policy not in POLICIES:
        raise PlanInputError(f"unknown turn policy {policy!r}; choose {', '.join(POLICIES)}")
    placeable: list[JobProfile] = []
    unplaced: list[tuple[str, str]] = []
    for job in jobs:
        reason = unplaceable_reason(job, hosts, device_memory_gb)
        if reason is None:
            placeable.append(job)
        else:
            unplaced.append((job.name, reason))
    # The decision step at t = 0 with every job queued: its groups, longest first (so long groups start
    # early instead of each extending the makespan); what it starts now is wave 0, and the rest start as the
    # groups before them are predicted to end (`placement.place_groups`).
    step = decide(
        [Queued(JobInstance.of_profile(job), job.iterations, index) for index, job in enumerate(placeable)],
        FreeDevices(hosts),
        StepRules(
            model=XoverModel(policy, measured),
            grouping=GroupingRules(max_group, device_memory_gb, min_gain_margin),
            algo=algo,
            order="longest-first",
            candidates="all",
        ),
    )
    groups = [[member.instance.kind for member in unit.members] for unit in step.units]
    predicted = [
        _predict(
            group,
            policy,
            measured,
            _why_alone(group[0], placeable, max_group, algo, min_gain_margin) if len(group) == 1 else "",
        )
        for group in groups
    ]
    placed = place_groups(groups, hosts, [group.predicted_duration_ms for group in predicted])
    group_plans = schedule(
        [replace(predicted[group.given], devices=group.devices, wave=group.wave) for group in placed]
    )
    return Plan(
        algo=algo,
        hosts=[(name, slots) for name, slots in hosts],
        groups=group_plans,
        unplaced=unplaced,
        predicted_aggregate_gain=aggregate_gain(group_plans),
        predicted_makespan_ms=makespan_ms(group_plans),
        sequential_makespan_ms=sequential_duration_ms(placeable),
        policy=policy,
    )


def chosen_sharing(jobs: Sequence[JobProfile], policy: str, measured: Measurements = NONE) -> SharingPick:
    """The way of sharing `jobs` should run under (`predict.pick_sharing`), why, and every way considered."""
    return XoverModel(policy, measured).pick(jobs)


def _why_alone(job: JobProfile, placeable: Sequence[JobProfile], max_group: int, algo: str, margin: float) -> str:
    """Why `job` was planned alone: one job given, none of its device count to share with, or no group with it
    predicted to gain."""
    if not any(other is not job and other.devices == job.devices for other in placeable):
        return (
            "one job: nothing to share"
            if len(placeable) == 1
            else f"no other job of {job.devices} devices to share with"
        )
    if max_group == 1:
        return "not grouped: --max-group 1"
    if algo == "none":
        return "not grouped: --algo none"
    return (
        f"not grouped: no group with it was predicted to gain more than {margin:.0%} together, within --max-group "
        "and the devices' memory"
    )


def _predict(jobs: list[JobProfile], policy: str, measured: Measurements = NONE, alone_because: str = "") -> GroupPlan:
    """The group's plan before it is placed (no devices yet); `alone_because`: why a job alone is."""
    pick = chosen_sharing(jobs, policy, measured)
    prediction, considered = pick.prediction, dict(pick.considered)
    if prediction.sharing not in considered:  # adaptive, picked: predicted as the better of its two ways
        considered[prediction.sharing] = prediction
    alone = len(jobs) == 1
    return GroupPlan(
        jobs=jobs,
        devices=[],
        wave=0,
        predicted_period_ms=max(prediction.iteration_ms.values()),
        predicted_gain=prediction.gain,
        predicted_slowdown=prediction.slowdowns,
        predicted_duration_ms=prediction.duration_ms,
        predicted_speed=prediction.speeds,
        predicted_iteration_ms=prediction.iteration_ms,
        fluid_bound=prediction.fluid_bound,
        sharing=ALONE.name if alone else prediction.sharing,
        predicted_by_sharing={} if alone else {sharing: p.gain for sharing, p in considered.items()},
        predicted_from={} if alone else {way: pick.sources.get(way, "simulated") for way in considered},
        measured_runs={} if alone else measured_runs(considered, pick.sources),
        sharing_reason=(alone_because or "one job: nothing to share") if alone else pick.reason,
    )


def schedule(groups: Sequence[GroupPlan]) -> list[GroupPlan]:
    """Start times as `xover run` schedules them: in the plan's order, each group as soon as every
    one of its devices is free (a later group on free devices does not wait for an earlier one)."""
    free_at: dict[str, float] = {}
    timed = []
    for group in groups:
        start = max((free_at.get(device, 0.0) for device in group.devices), default=0.0)
        for device in group.devices:
            free_at[device] = start + group.predicted_duration_ms
        timed.append(replace(group, predicted_start_ms=start))
    return timed


def aggregate_gain(groups: Sequence[GroupPlan]) -> float:
    """Time the placed jobs need alone over the groups' durations; 1.0 for no groups."""
    total = sum(group.predicted_duration_ms for group in groups)
    if total == 0:
        return 1.0
    return sum(sequential_duration_ms(group.jobs) for group in groups) / total


def makespan_ms(groups: Sequence[GroupPlan]) -> float:
    """When the last group ends, in the schedule of `schedule`."""
    return max((group.predicted_start_ms + group.predicted_duration_ms for group in groups), default=0.0)


def _check_inputs(
    jobs: Sequence[JobProfile],
    hosts: Sequence[Host],
    device_memory_gb: float | None,
    max_group: int,
    algo: str,
    min_gain_margin: float,
) -> None:
    if algo not in ALGORITHMS:
        raise PlanInputError(f"unknown grouping algorithm {algo!r}; choose one of {', '.join(sorted(ALGORITHMS))}")
    if isinstance(max_group, bool) or not isinstance(max_group, int) or max_group < 1:
        raise PlanInputError(f"max group size must be a whole number >= 1, got {max_group!r}")
    if not math.isfinite(min_gain_margin) or min_gain_margin < 0:
        raise PlanInputError(f"minimum gain margin must be >= 0, got {min_gain_margin!r}")
    if device_memory_gb is not None and not (math.isfinite(device_memory_gb) and device_memory_gb > 0):
        raise PlanInputError(f"device memory must be > 0 GB, got {device_memory_gb!r}")
    _check_hosts(hosts)
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise PlanInputError(f"two jobs are named {job.name!r}; job names must be unique")
        seen.add(job.name)


def _check_hosts(hosts: Sequence[Host]) -> None:
    if not hosts:
        raise PlanInputError("no hosts given; need at least one host with devices")
    names: set[str] = set()
    for name, slots in hosts:
        if not name or ":" in name:
            raise PlanInputError(f"host name {name!r} must be non-empty and contain no ':'")
        if name in names:
            raise PlanInputError(f"host {name!r} is listed twice")
        names.add(name)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise PlanInputError(f"host {name!r} must have a whole number >= 1 of devices, got {slots!r}")
