"""The units a group runs as: each job alone (sequential), the whole group (concurrent), once per
turn policy (crossover), or as its plan picked (planned); a comparison runs every group's units one
after another."""

from __future__ import annotations

from ..analysis import job_summary
from ..links import HOST, Link
from ..plan.calibration import SHIPPED
from ..plan.predict import MEASURED, lead
from ..sharing import ADAPTIVE, CROSSOVER, PLANNED, Mode, adapts, turn_taking
from ..store.models import Run
from ..store.queries import iteration_rows, run_fields
from ..store.session import Store
from ..turns.protocol import FREE, TURNS
from .adaptive import MeasuredBefore
from .jobs import GroupToRun
from .schedule import Unit
from .traits import traits_from_summary

SEQUENTIAL = Mode.SEQUENTIAL.value


def comparison_units(
    groups: list[GroupToRun], modes: list[str], policies: list[str], store: Store, link: Link = HOST
) -> list[Unit]:
    """Every group in every mode, in order: sequential (each job alone) first, so that crossover can
    rank jobs that had no profile by what they did alone (and, on the shaped `link`, order the link)."""

    def learn_traits(unit: Unit) -> None:
        [job], [run_id] = unit.jobs, unit.run_ids
        if job.traits is None or job.traits.rank is None:
            with store.session() as session:
                summary = job_summary(
                    run_fields(session.get_one(Run, run_id)), iteration_rows(session, [run_id])[run_id], []
                )
            job.traits = traits_from_summary(summary, job.recipe.max_slowdown, link) or job.traits

    units = [unit for group in groups for unit in group_units(group, modes, policies)]
    for unit in units:
        if unit.mode == Mode.SEQUENTIAL:
            unit.on_done = learn_traits
    return units


def group_units(group: GroupToRun, modes: list[str], policies: list[str]) -> list[Unit]:
    """The units one group runs as in `modes`, in order: each job alone for sequential, the whole group
    for concurrent, once per policy for crossover, once under the first policy for adaptive (starting in
    the state its plan predicted better), and for planned in its plan's way of sharing (under the first
    policy). Also what a group that never ran stands for."""
    if PLANNED in modes:
        modes = [group.planned_mode if mode == PLANNED else mode for mode in modes]
        policies = policies[:1]
    if len(group.jobs) == 1:
        # one job shares nothing: concurrent and crossover would only run it alone again
        return [Unit(group.jobs, SEQUENTIAL if SEQUENTIAL in modes else modes[0], group.index)]
    units = []
    for mode in modes:
        if mode == SEQUENTIAL:
            units += [Unit([job], SEQUENTIAL, group.index) for job in group.jobs]
        elif adapts(mode):
            units.append(
                Unit(
                    group.jobs,
                    mode,
                    group.index,
                    policies[0],
                    prior=adaptive_prior(group),
                    measured=measured_before(group),
                )
            )
        elif turn_taking(mode):
            units += [Unit(group.jobs, mode, group.index, policy) for policy in policies]
        else:
            units.append(Unit(group.jobs, mode, group.index))
    return units


def adaptive_prior(group: GroupToRun) -> str | None:
    """The state an adaptive group starts in: turns where its plan predicted crossover ahead of its best way
    without turns, else without them; None without a plan's predictions."""
    crossover, free = group.predicted_by_sharing.get(CROSSOVER.name), group.best_without_turns
    if crossover is None or free is None:
        return None
    return TURNS if crossover > group.predicted_by_sharing[free] else FREE


def measured_before(group: GroupToRun) -> MeasuredBefore | None:
    """Both states of an adaptive group as earlier comparisons measured them on the same jobs (crossover's and
    its best way without turns, both marked measured in its predictions); None where either was simulated, or
    where adaptive itself ran on these jobs and measured ahead of both by more than a measurement's error: then
    the two ways' figures do not describe the states it switches between (on a CPU its state without turns
    keeps the thread policy that plain concurrent runs without: docs/design.md, *What ran before weighs in*),
    and its windows decide alone."""
    crossover, free = CROSSOVER.name, group.best_without_turns
    if free is None or any(group.predicted_from.get(way) != MEASURED for way in (crossover, free)):
        return None
    aggregates = {TURNS: group.predicted_by_sharing[crossover], FREE: group.predicted_by_sharing[free]}
    adaptive = (
        group.predicted_by_sharing.get(ADAPTIVE.name) if group.predicted_from.get(ADAPTIVE.name) == MEASURED else None
    )
    if adaptive and lead(adaptive, max(aggregates.values())) > SHIPPED.measured_error:
        return None
    runs = {TURNS: group.measured_runs.get(crossover, 1), FREE: group.measured_runs.get(free, 1)}
    return MeasuredBefore(aggregates, SHIPPED.measured_error, runs)
