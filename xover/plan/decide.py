"""The decision step: given the jobs waiting and the devices free, what starts now, grouped how, where,
shared which way.

One step, three callers:

* `xover plan` is the step at t = 0 with every job queued and every device free (`make.make_plan`): its
  groups, in the order the plan runs them, and what starts at once (the plan's wave 0); later waves are
  the same step again as devices free up (`placement.place_groups`).
* `xover simulate` asks it at every event of a trace (`xover/replay/`): jobs arrive, finish, and the
  policy orders the queue.
* `xover run` starts a plan's units by its start rule (`ready_to_start`): a unit starts once its devices
  are free of every unit running or waiting before it.

The step is built from the planner's parts: the grouping (`grouping.py`, with the model's period), the
model's prediction of each group (`throughput.py`; xover's own is the simulation of the turn policy,
`simulate.py`), a group kept only while it is predicted to gain (`dissolve_losing`), and the placement
(`state.FreeDevices`, which answers as `placement.py` places).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from ..sharing import ALONE
from .grouping import ALGORITHMS, GroupingRules
from .instances import JobInstance
from .model import JobProfile
from .state import Devices, FreeDevices
from .throughput import Speeds, ThroughputModel, XoverModel

# How the step orders its units: by the queue's priority (a replay's policy), or the longest first (a plan:
# long groups share the early waves instead of each extending the makespan).
ORDERS = ("priority", "longest-first")
# Which queued jobs may be grouped: all (a plan), or as many of the first of each device count as there are
# devices for them times the largest group (a replay: the jobs next in line; Muri picks its candidates so).
CANDIDATES = ("all", "next-in-line")


@dataclass(frozen=True)
class Queued:
    """A job waiting (or running, where the step decides everything afresh): its instance, the
    iterations it has left, and its priority under the policy (lower goes first)."""

    instance: JobInstance
    remaining: int
    priority: Hashable = 0

    @property
    def gpus(self) -> int:
        """The devices it needs."""
        return self.instance.gpus


@dataclass(frozen=True)
class Unit:
    """Jobs that start together on the same devices: one job alone, or a group sharing them as predicted."""

    members: tuple[Queued, ...]
    sharing: str = ALONE.name
    speeds: tuple[float, ...] = (1.0,)

    @property
    def gpus(self) -> int:
        """The devices it needs (every member needs as many)."""
        return self.members[0].gpus

    @property
    def priority(self) -> Any:
        """Its best member's priority."""
        return min(member.priority for member in self.members)  # type: ignore[type-var]

    @property
    def names(self) -> list[str]:
        """Its jobs' names."""
        return [member.instance.name for member in self.members]


@dataclass(frozen=True)
class Start:
    """A unit that starts now, and the devices it takes."""

    unit: Unit
    devices: Devices


@dataclass(frozen=True)
class StepRules:
    """How the step decides: the model that predicts groups, the grouping (None: nobody shares), its
    algorithm, the placement rule (`state.PLACEMENTS`), the order of the units (`ORDERS`), which jobs
    may be grouped (`CANDIDATES`), and whether a unit that does not fit lets later ones start (backfill;
    without it the first unit that does not fit stops the step: strict FIFO)."""

    model: ThroughputModel = field(default_factory=XoverModel)
    grouping: GroupingRules | None = None
    algo: str = "matching"
    placement: str = "best-fit"
    order: str = "priority"
    candidates: str = "next-in-line"
    backfill: bool = True


@dataclass(frozen=True)
class Step:
    """The step's answer: every queued job in a unit, in the order they start, and those starting now."""

    units: list[Unit]
    starts: list[Start]


def decide(queued: Sequence[Queued], free: FreeDevices, rules: StepRules) -> Step:
    """What starts now on `free` (taken from it), grouped how and shared which way, for `queued` (lowest
    priority first; ties in the order given)."""
    ordered = list(queued)
    if rules.order == "priority":
        ordered.sort(key=lambda job: job.priority)  # type: ignore[arg-type,return-value]
    units: list[Unit] = []
    if rules.grouping is not None and rules.grouping.max_group > 1:
        chosen = ordered if rules.candidates == "all" else next_in_line(ordered, free, rules)
        if rules.candidates == "next-in-line":
            grouped = groups_as_needed(chosen, free.total_free, rules)
        else:
            grouped = form_groups(chosen, rules.model, rules.grouping, rules.algo)
        units = [predicted_unit(group, rules.model) if len(group) > 1 else Unit((group[0],)) for group in grouped]
        if len(chosen) < len(ordered):
            picked = {id(job) for job in chosen}
            units += [Unit((job,)) for job in ordered if id(job) not in picked]
    else:
        units = [Unit((job,)) for job in ordered]
    if rules.order == "longest-first":
        units.sort(key=lambda unit: unit_duration_ms(unit, rules.model), reverse=True)
    else:
        units.sort(key=lambda unit: unit.priority)
    return Step(units, place_now(units, free, rules.placement, rules.backfill))


def next_in_line(ordered: Sequence[Queued], free: FreeDevices, rules: StepRules) -> list[Queued]:
    """The jobs a replay may group now: walking the queue in order, each job that would start alone on
    what is free brings in the next `max_group` jobs of its device count (itself first), as Muri's
    simulator picks them; the rest of the queue waits as it is."""
    assert rules.grouping is not None
    trial = free.copy()
    by_gpus: dict[int, list[Queued]] = {}
    for job in ordered:
        by_gpus.setdefault(job.gpus, []).append(job)
    taken: dict[int, int] = {}  # device count -> how many of its jobs are candidates
    chosen: set[int] = set()
    for job in ordered:
        if id(job) in chosen:
            continue
        if trial.place(job.gpus, rules.placement) is None:
            continue
        same = by_gpus[job.gpus]
        start = taken.get(job.gpus, 0)
        block = same[start : start + rules.grouping.max_group]
        taken[job.gpus] = start + len(block)
        chosen.update(id(member) for member in block)
    return [job for job in ordered if id(job) in chosen]


def groups_as_needed(jobs: Sequence[Queued], free_devices: int, rules: StepRules) -> list[list[Queued]]:
    """Groups of the jobs next in line, as small as will do: groups of two (the grouping's first round)
    while they let the jobs fit in what is free, then of up to three, ..., up to the largest group."""
    assert rules.grouping is not None
    grouped: list[list[Queued]] = [[job] for job in jobs]
    if sum(job.gpus for job in jobs) <= free_devices:
        return grouped
    for size in range(2, rules.grouping.max_group + 1):
        formed = form_groups(jobs, rules.model, replace(rules.grouping, max_group=size), rules.algo, until_done=False)
        grouped = only_as_needed(formed, free_devices, rules.model)
        if sum(group[0].gpus for group in grouped) <= free_devices:
            break
    return grouped


def only_as_needed(groups: list[list[Queued]], free_devices: int, model: ThroughputModel) -> list[list[Queued]]:
    """Groups kept only while the jobs would not fit alone: those the model predicts to gain the most
    first (they lose the least of their jobs' speed), each sparing the devices of all its jobs but one,
    until the jobs' devices fit in what is free; the other groups' jobs run alone (sharing devices that
    are free costs the jobs time and gains nothing). Muri's simulator packs so, while its jobs need more
    devices than there are."""
    demand = sum(job.gpus for group in groups for job in group)
    gains = {
        index: model.predict([job.instance.profile(job.remaining) for job in group]).gain
        for index, group in enumerate(groups)
        if len(group) > 1
    }
    kept: set[int] = set()
    for index in sorted(gains, key=lambda index: -gains[index]):
        if demand <= free_devices:
            break
        kept.add(index)
        demand -= (len(groups[index]) - 1) * groups[index][0].gpus
    result: list[list[Queued]] = []
    for index, group in enumerate(groups):
        result.extend([group] if len(group) == 1 or index in kept else [[job] for job in group])
    return result


# the most jobs a plan that learns weighs by the model's prediction when grouping: some 0.04 s of simulation per
# group looked at on this machine, about n^2/2 groups of two (24 jobs: 276 pairs, some 10 s)
PREDICTED_GROUPING_JOBS = 24


def form_groups(
    jobs: Sequence[Queued],
    model: ThroughputModel,
    rules: GroupingRules,
    algo: str = "matching",
    until_done: bool = True,
) -> list[list[Queued]]:
    """`jobs` in groups, as the grouping forms them (with `model`'s periods, or the fluid bound for xover's
    model) and keeps them (`dissolve_losing`: a group the model predicts to lose is split into its jobs
    alone); every job is in one group, a job alone in a group of one, in the grouping's order."""
    profiles = [job.instance.profile(job.remaining) for job in jobs]
    by_name = {profile.name: job for profile, job in zip(profiles, jobs)}
    if not isinstance(model, XoverModel):
        rules = replace(rules, period_ms=model.grouping_period_ms)
    elif model.measured.ways:
        # xover's model groups by the fluid bound (vectorised over pairs); a plan that learns reads its
        # measurements group by group instead, each job known by its identity, and weighs the groups not measured
        # by the model's prediction (XoverModel.predicted_period_ms: a simulation each) up to
        # PREDICTED_GROUPING_JOBS jobs, by the fluid bound beyond (XoverModel.grouping_period_ms)
        period = model.predicted_period_ms if len(jobs) <= PREDICTED_GROUPING_JOBS else model.grouping_period_ms
        rules = replace(rules, period_ms=period, identity=model.identity_of)
    formed = ALGORITHMS[algo](profiles, rules)
    kept = dissolve_losing(formed, model, rules.min_gain_margin, until_done)
    if until_done:
        kept = _regrouped(formed, kept, algo, rules, model)
    return [[by_name[profile.name] for profile in group] for group in kept]


def _names(group: Sequence[JobProfile]) -> frozenset[str]:
    return frozenset(job.name for job in group)


def _regrouped(
    formed: list[list[JobProfile]],
    kept: list[list[JobProfile]],
    algo: str,
    rules: GroupingRules,
    model: ThroughputModel,
) -> list[list[JobProfile]]:
    """A plan's groups (`kept`, from `formed` after `dissolve_losing`) with the jobs left alone grouped again among
    themselves, every group found to lose - and any group holding one - left out, until none forms. The grouping
    picks by the fluid bound, and a job whose pick the model said would lose would stay alone although another
    partner gained. Not in a replay (`until_done` off), whose every event groups again."""
    groups = [group for group in kept if len(group) > 1]
    alone = [group[0] for group in kept if len(group) == 1]
    losing = {_names(group) for group in formed if len(group) > 1} - {_names(group) for group in groups}
    own_period = rules.period

    def period(jobs: Sequence[JobProfile]) -> float:
        names = _names(jobs)
        if len(names) > 1 and any(lost <= names for lost in losing):
            return math.inf  # saves nothing: never merged
        return own_period(jobs)

    # each job a kind of its own: what is left out is named by job
    again = replace(rules, period_ms=period, identity=lambda job: job.name)
    for _ in range(4 * len(formed) + 4):  # each round groups jobs or rules a group out; bounded all the same
        if not losing or len(alone) < 2:
            break
        candidates = [group for group in ALGORITHMS[algo](alone, again) if len(group) > 1]
        if not candidates:
            break
        new = [group for group in dissolve_losing(candidates, model, rules.min_gain_margin) if len(group) > 1]
        losing |= {_names(group) for group in candidates} - {_names(group) for group in new}
        grouped = set().union(*map(_names, new)) if new else set()
        groups += new
        alone = [job for job in alone if job.name not in grouped]
    return groups + [[job] for job in alone]


def dissolve_losing(
    groups: list[list[JobProfile]], model: ThroughputModel, margin: float, until_done: bool = True
) -> list[list[JobProfile]]:
    """Groups are chosen with the grouping's period; one that the model says would not pay off (gain
    within the margin of 1, or, `until_done`, longer than its jobs one after another), or would leave a
    job slower than its max_slowdown or starve one, is not formed (or, already running, is dissolved): its
    jobs stay alone. `until_done`: the group runs as formed until its last job ends, its jobs going on as
    smaller groups as the others end (a plan); without it the group is looked at again whenever its jobs
    change (a replay), so only its gain now counts."""
    kept: list[list[JobProfile]] = []
    for group in groups:
        if len(group) == 1:
            kept.append(group)
            continue
        if isinstance(model, XoverModel):  # one prediction gives the speeds and the duration
            picked = model.group_prediction(group)
            speeds = tuple(picked.speeds[job.name] for job in group)
            duration = picked.duration_ms if until_done else 0.0
        else:
            speeds = model.predict(group).speeds
            duration = group_duration_ms(group, model) if until_done else 0.0
        unprotected = any(
            job.max_slowdown and (speed <= 0 or 1.0 / speed > job.max_slowdown * (1 + 1e-9))
            for job, speed in zip(group, speeds)
        )
        starved = min(speeds) <= 0
        losing = sum(speeds) <= 1.0 + margin or (until_done and duration > sequential_ms(group) * (1 + 1e-9))
        if unprotected or starved or losing:
            kept.extend([job] for job in group)
        else:
            kept.append(group)
    return kept


def group_duration_ms(jobs: Sequence[JobProfile], model: ThroughputModel) -> float:
    """Time until the group's last job has done its iterations, the others going on as a smaller group
    whenever one finishes (each job's iterations, at the model's speeds)."""
    if isinstance(model, XoverModel):
        return model.group_prediction(jobs).duration_ms
    remaining = {job.name: float(job.iterations) for job in jobs}
    live = list(jobs)
    elapsed = max((job.startup_ms for job in jobs), default=0.0)
    while live:
        speeds = model.predict(live).speeds
        iteration = {job.name: _alone_ms(job, model) / max(speed, 1e-9) for job, speed in zip(live, speeds)}
        finish = min(remaining[job.name] * iteration[job.name] for job in live)
        elapsed += finish
        for job in live:
            remaining[job.name] -= finish / iteration[job.name]
        live = [job for job in live if remaining[job.name] > 1e-6]
    return elapsed


def sequential_ms(jobs: Sequence[JobProfile], model: ThroughputModel | None = None) -> float:
    """The jobs one after another, each alone, each launched on its own."""
    return sum(job.startup_ms + job.iterations * _alone_ms(job, model) for job in jobs)


def _alone_ms(job: JobProfile, model: ThroughputModel | None) -> float:
    alone = getattr(model, "iteration_ms", None)
    return alone(job) if callable(alone) else job.solo_ms


def predicted_unit(group: Sequence[Queued], model: ThroughputModel) -> Unit:
    """A group as a unit, with the model's way of sharing and speeds."""
    speeds: Speeds = model.predict([job.instance.profile(job.remaining) for job in group])
    return Unit(tuple(group), speeds.sharing, speeds.speeds)


def unit_duration_ms(unit: Unit, model: ThroughputModel) -> float:
    """How long a unit runs: a job alone its iterations, a group until its last job is done."""
    profiles = [member.instance.profile(member.remaining) for member in unit.members]
    if len(profiles) == 1:
        return sequential_ms(profiles, model)
    return group_duration_ms(profiles, model)


def place_now(units: Sequence[Unit], free: FreeDevices, rule: str = "best-fit", backfill: bool = True) -> list[Start]:
    """The units that start now, in order, each on devices taken from `free` by `rule`; a unit that does
    not fit waits, and with `backfill` later ones may still start (without it, none does)."""
    starts = []
    for unit in units:
        devices = free.place(unit.gpus, rule)
        if devices is None:
            if not backfill:
                break
            continue
        starts.append(Start(unit, devices))
    return starts


def ready_to_start(
    pending: Sequence[frozenset[Hashable]], busy: AbstractSet[Hashable], exclusive: bool = False, running: bool = False
) -> list[int]:
    """The runtime's start rule (`xover run`): which pending units (by index, in order) start now. A unit
    starts once its devices are free of every unit running (`busy`) and of every unit waiting before it
    (earlier units keep their place in the order); `exclusive`: one unit at a time, in order, and none
    while one runs (`running`)."""
    started: list[int] = []
    blocked = set(busy)
    for index, devices in enumerate(pending):
        if exclusive and (running or index > 0):
            break
        if devices & blocked:
            blocked |= devices
            continue
        started.append(index)
        blocked |= devices
    return started
