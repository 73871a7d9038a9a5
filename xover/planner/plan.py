"""Make a plan: group jobs, place the groups on devices, and predict what it buys."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import XoverError
from .grouping import ALGORITHMS, GroupingRules
from .model import (
    JobProfile,
    group_duration_ms,
    group_gain,
    predicted_period,
    predicted_slowdown,
    sequential_duration_ms,
)
from .placement import Host, PlacedGroup, place_groups, unplaceable_reason


class PlanInputError(XoverError):
    """The jobs, hosts or options given to ``make_plan`` cannot make a plan."""


@dataclass(frozen=True)
class GroupPlan:
    """Jobs that take turns on the same devices, and what the model predicts for them."""

    jobs: list[JobProfile]
    devices: list[str]
    wave: int
    predicted_period_ms: float
    predicted_gain: float
    predicted_slowdown: dict[str, float]
    predicted_duration_ms: float


@dataclass(frozen=True)
class Plan:
    """Groups placed on devices in waves, plus jobs that cannot run at all.

    ``predicted_aggregate_gain``: sum of the placed jobs' solo iteration times over
    the sum of the groups' periods (1.0 = no better than one job at a time).
    ``predicted_makespan_ms``: sum over waves of the longest group in the wave.
    ``sequential_makespan_ms``: every placed job alone, one after another.
    ``recipes``: job name -> recipe path, when the plan was made from recipes.
    """

    algo: str
    hosts: list[Host]
    groups: list[GroupPlan]
    unplaced: list[tuple[str, str]]
    predicted_aggregate_gain: float
    predicted_makespan_ms: float
    sequential_makespan_ms: float
    recipes: dict[str, str] = field(default_factory=dict)

    @property
    def jobs(self) -> list[JobProfile]:
        """All placed jobs, group by group."""
        return [job for group in self.groups for job in group.jobs]

    @property
    def waves(self) -> int:
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
) -> Plan:
    """Group ``jobs`` with ``algo``, place the groups on ``hosts`` in waves, predict the outcome."""
    _check_inputs(jobs, hosts, device_memory_gb, max_group, algo, min_gain_margin)
    placeable: list[JobProfile] = []
    unplaced: list[tuple[str, str]] = []
    for job in jobs:
        reason = unplaceable_reason(job, hosts, device_memory_gb)
        if reason is None:
            placeable.append(job)
        else:
            unplaced.append((job.name, reason))
    rules = GroupingRules(max_group=max_group, device_memory_gb=device_memory_gb, min_gain_margin=min_gain_margin)
    groups = ALGORITHMS[algo](placeable, rules)
    # Longest groups first, so they share the early waves instead of each extending the makespan.
    groups = sorted(groups, key=group_duration_ms, reverse=True)
    placed = sorted(place_groups(groups, hosts), key=lambda group: group.wave)
    group_plans = [_predict(group) for group in placed]
    return Plan(
        algo=algo,
        hosts=[(name, slots) for name, slots in hosts],
        groups=group_plans,
        unplaced=unplaced,
        predicted_aggregate_gain=aggregate_gain(group_plans),
        predicted_makespan_ms=makespan_ms(group_plans),
        sequential_makespan_ms=sequential_duration_ms(placeable),
    )


def _predict(group: PlacedGroup) -> GroupPlan:
    return GroupPlan(
        jobs=group.jobs,
        devices=group.devices,
        wave=group.wave,
        predicted_period_ms=predicted_period(group.jobs),
        predicted_gain=group_gain(group.jobs),
        predicted_slowdown={job.name: predicted_slowdown(job, group.jobs) for job in group.jobs},
        predicted_duration_ms=group_duration_ms(group.jobs),
    )


def aggregate_gain(groups: Sequence[GroupPlan]) -> float:
    """Sum of solo iteration times over sum of group periods; 1.0 for no groups."""
    total_period = sum(group.predicted_period_ms for group in groups)
    if total_period == 0:
        return 1.0
    return sum(job.solo_ms for group in groups for job in group.jobs) / total_period


def makespan_ms(groups: Sequence[GroupPlan]) -> float:
    """Waves run one after another; a wave lasts as long as its longest group."""
    longest: dict[int, float] = {}
    for group in groups:
        longest[group.wave] = max(longest.get(group.wave, 0.0), group.predicted_duration_ms)
    return sum(longest.values())


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
