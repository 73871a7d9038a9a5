"""Gathering what a report shows from the store: one experiment in full, or every experiment in brief.

Everything here returns typed results (xover/results.py) and plain iteration rows, no ORM objects, so
the renderers (tables, JSON, CSV, pictures, HTML) work after the session is closed; each result's
`to_json()` is the shape scripts get.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

from sqlalchemy import false, func, or_, select, true
from sqlalchemy.orm import Session

from ..analysis import (
    alone_vs_profile,
    compare,
    experiment_jobs,
    group_model,
    loss_parity,
    rows_of,
)
from ..errors import XoverError, printable
from ..hints import xover_command
from ..links import Link
from ..plan import plan_from_dict
from ..redact import mask_credentials
from ..results import (
    ExperimentInfo,
    ExperimentSummary,
    GainPoint,
    GroupModel,
    GroupReport,
    NotStarted,
    ParityResult,
    RunResult,
    kept_plan_lengths,
    measured_makespan_s,
    mode_rank,
    predicted_in_way,
)
from ..run.record import not_started_units, reconcile_lost
from ..scripts import local_modules
from ..sharing import CONCURRENT, CROSSOVER, MPS, OPEN_STATUSES, Mode, RunStatus, experiment_status
from ..store.models import Experiment, PlanGroup, RecipeSnapshot, Replay, Run, SharingSegment
from ..store.models import Plan as PlanRow
from ..store.profiles import profile_device_ms, stored_interference
from ..store.queries import iteration_rows
from ..store.session import Store, database_url, missing_sqlite_file, open_store_to_read, sqlite_file

ITERATION_FIELDS = (
    "experiment",
    "run_id",
    "name",
    "mode",
    "policy",
    "step",
    "wall_time",
    "iteration_s",
    "data_s",
    "compute_s",
    "communication_s",
    "wait_s",
    "samples",
    "loss",
    "yields",
    "link_s",
    "comm_cpu_s",
)


class ReportError(XoverError):
    """A report that cannot be made: no database, no such experiment, an unwritable folder."""

    pass


class PicturesNotWritten(ReportError):
    """The pictures could not be written into `folder` (another user's results, a read-only mount, a full disk):
    `why` in the system's words. A table or JSON report is shown without them (report's _optional_pictures)."""

    def __init__(self, folder: Path, error: OSError) -> None:
        self.folder = folder
        self.why = error.strerror or str(error)
        super().__init__(f"cannot write the pictures into {folder}: {self.why}")


@dataclass(frozen=True)
class PlanMakespan:
    """A plan's run in one way (as planned, or `--mode sequential`: each job once): its makespan as measured
    (first job's start to last job's end; None where a job did not finish), the plan's prediction of it (None
    where the run gave the jobs other lengths than the plan's), and the same plan's run of the other kind, with
    the same jobs, lengths and link, nearest in time: shared beside one after another, both measured."""

    measured_s: float | None
    one_after_another: bool
    predicted_s: float | None
    other_experiment: str | None = None
    other_s: float | None = None
    running: bool = False  # a job of it has not ended yet (its makespan is not one yet)

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


@dataclass
class ExperimentReport:
    """One experiment: its row, its jobs (one per job and mode), group comparisons, loss parity,
    every iteration of rank 0 per run (run id -> rows in step order), and the units of runs it never started
    (a job refused or failed alone: they have no rows in `jobs`)."""

    experiment: ExperimentInfo
    jobs: list[RunResult]
    groups: list[GroupReport]
    parity: list[ParityResult]
    iterations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    not_started: list[NotStarted] = field(default_factory=list)
    makespan: PlanMakespan | None = None

    @property
    def id(self) -> str:
        """The experiment's id."""
        return self.experiment.id

    @property
    def is_comparison(self) -> bool:
        """Whether the experiment compared modes (`xover run`)."""
        return self.experiment.is_comparison


# ------------------------------------------------------------------------------------ opening


def open_existing_store(db: str | None) -> Store:
    """The store, refusing to create an empty database just to report that it is empty."""
    missing = missing_sqlite_file(db)
    if missing is not None:
        raise ReportError(
            f"no database at {printable(mask_credentials(str(missing)))}: nothing has been run yet "
            "(start with `xover train mlp-digits`, or point --db / XOVER_DB at one)"
        )
    file = sqlite_file(database_url(db, create_folder=False))
    header = _first_bytes(file) if file is not None and file.is_file() else None
    if header == b"":  # it was given xover's schema: a write
        raise ReportError(
            f"the database {mask_credentials(str(file))} is an empty file: nothing has been run with it yet "
            "(point --db / XOVER_DB at a store xover has written)"
        )
    if header is not None and not SQLITE_HEADER.startswith(header):  # a file cut short inside it: SQLite says so
        raise ReportError(
            f"the database {mask_credentials(str(file))} is not a database: the file does not begin as SQLite's "
            "files do (point --db / XOVER_DB at a store xover has written)"
        )
    store = open_store_to_read(db)
    if not store.read_only:  # one opened read-only shows a run whose xover is gone as its rows say
        reconcile_lost(store)  # experiments whose xover is gone show as lost, not running
    return store


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def _first_bytes(file: Path) -> bytes | None:
    """The file's first bytes, read (its size is no guide: /proc/self/status says 0, and holds text); None where it
    cannot be read, which opening it then says."""
    try:
        with open(file, "rb") as handle:
            return handle.read(len(SQLITE_HEADER))
    except OSError:
        return None


MIN_ID_END = 4  # an experiment id ends in 4 random hex digits: a shorter end is a typo as often as a choice


def find_experiment(session: Session, target: str, where: str) -> Experiment:
    """'latest', an exact id, or an unambiguous start of one, or end of 4 characters or more (the random suffix)."""
    if not target.strip():  # every id starts with '': it named them all
        raise ReportError("no experiment named: give an id (or its end), 'latest' or 'all'")
    if target == "latest":
        newest = session.scalars(
            select(Experiment).order_by(Experiment.created_at.desc(), Experiment.id.desc())
        ).first()
        if newest is None:
            raise ReportError(f"the database {where} holds no experiments yet: run `xover train` or `xover run` first")
        return newest
    exact = session.get(Experiment, target)
    if exact is not None:
        return exact
    # an end of 4 characters or more (the random part): `report 8` matched whichever id ended in 8
    ends = Experiment.id.endswith(target, autoescape=True) if len(target) >= MIN_ID_END else false()
    matches = session.scalars(
        select(Experiment).where(or_(Experiment.id.startswith(target, autoescape=True), ends)).order_by(Experiment.id)
    ).all()
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ReportError(
            f"'{printable(target)}' matches {len(matches)} experiments ({', '.join(m.id for m in matches[:5])}"
            f"{', ...' if len(matches) > 5 else ''}): give more of the id"
        )
    if session.scalars(select(Experiment.id)).first() is None:
        raise ReportError(f"the database {where} holds no experiments yet: run `xover train` or `xover run` first")
    short = (
        f" (an id's end names one from {MIN_ID_END} characters on, and ids end in '{printable(target)}': give more "
        "of it)"
        if len(target) < MIN_ID_END
        and session.scalars(select(Experiment.id).where(Experiment.id.endswith(target, autoescape=True))).first()
        else ""
    )
    raise ReportError(
        f"no experiment '{printable(target)}' in {where}{short}: `{xover_command('report', 'all')}` lists the "
        "experiments"
    )


# ------------------------------------------------------------------------------------ one experiment


def job_order(job: RunResult) -> tuple:
    """Sort key: by group (ungrouped first), name, mode in MODE_ORDER, policy, then run."""
    return job.group if job.group is not None else -1, job.name, mode_rank(job.mode), job.policy or "", job.run_id


def experiment_row(experiment: Experiment) -> ExperimentInfo:
    """The experiment's row as the report shows it: credentials masked, times as UTC text, and its status as
    its runs ended (experiment_status)."""
    return ExperimentInfo(
        id=experiment.id,
        kind=experiment.kind,
        status=experiment_status(experiment.status, [run.status for run in experiment.runs]),
        command=mask_credentials(experiment.command),
        bandwidth=experiment.bandwidth,
        hosts=experiment.hosts,
        plan_id=experiment.plan_id,
        hardware=experiment.hardware,
        created_at=_utc_text(experiment.created_at),
        ended_at=_utc_text(experiment.ended_at),
    )


def _utc_text(moment: datetime | None) -> str | None:
    # The store keeps naive UTC; say so, so that scripts do not read it as local time.
    return moment.isoformat(sep=" ", timespec="seconds") + " UTC" if moment else None


def jobs_and_groups(
    session: Session, experiment: Experiment, iterations: dict[int, list[dict[str, Any]]] | None = None
) -> tuple[list[RunResult], list[GroupReport]]:
    """Jobs with speeds and slowdowns, and per group: throughput by mode (crossover per policy) over the
    jobs' overlap window, the plan's predicted gain, the model's fluid bound and simulated gains, the
    measured gain and its error."""
    if iterations is None:
        iterations = iteration_rows(session, [run.id for run in experiment.runs])
    summaries = [RunResult.from_summary(summary) for summary in experiment_jobs(session, experiment.id, iterations)]
    jobs, comparisons = compare(sorted(summaries, key=job_order), iterations)
    planned: dict[int, float] = {}
    planned_groups: list[dict[str, Any]] = []
    if experiment.plan_id is not None:
        planned = {
            g.index: g.predicted_gain
            for g in session.scalars(select(PlanGroup).where(PlanGroup.plan_id == experiment.plan_id))
        }
        plan_row = session.get(PlanRow, experiment.plan_id)
        planned_groups = list((plan_row.body or {}).get("groups", [])) if plan_row is not None else []
    # a plan's run as planned (not one after another): each job once, in its group's pick
    as_planned = _a_plans_run_in_one_way(experiment) and experiment_row(experiment).modes_asked != [
        Mode.SEQUENTIAL.value
    ]
    timelines = adaptive_timelines(session, experiment.id)
    link = Link.of_key(experiment.bandwidth, "the experiment's link")
    groups = []
    for comparison in comparisons:
        alone = []  # the group's jobs alone, with their profiles' interference
        for position, job in enumerate(jobs):
            if job.group == comparison.group and job.mode == Mode.SEQUENTIAL and job.name in comparison.jobs:
                interference, link_share = stored_interference(
                    session, _profile_key(job), link.key, experiment.created_at
                )
                jobs[position] = dataclasses.replace(job, interference=interference, interference_link_share=link_share)
                alone.append(jobs[position])
        drift = {
            job.name: alone_vs_profile(
                job,
                profile_device_ms(session, _profile_key(job), link.key, job.span_hosts, experiment.created_at),
            )
            for job in alone
        }
        model = (
            group_model(alone, link, sorted(comparison.policies))
            if len(alone) == len(comparison.jobs)
            else GroupModel()
        )
        in_plan = planned_groups[comparison.group] if 0 <= comparison.group < len(planned_groups) else {}
        groups.append(
            GroupReport.of(
                comparison,
                {name: ratio for name, ratio in drift.items() if name is not None and ratio is not None},
                # the plan's prediction of the way the group ran: crossover's in a comparison (its pick's may be
                # another way's), the pick's in a plan's run as planned (`xover run` says the same)
                predicted_in_way(
                    in_plan.get("predicted_by_sharing", {}),
                    in_plan.get("sharing", CROSSOVER.name) if as_planned else CROSSOVER.name,
                    planned.get(comparison.group),
                ),
                model,
                # plans from before the pick ran every group in crossover
                in_plan.get("sharing", CROSSOVER.name) if in_plan else None,
                in_plan.get("predicted_by_sharing", {}),
                MPS.name
                if any(
                    job.gpu_sharing == MPS.name
                    for job in jobs
                    if job.mode == Mode.CONCURRENT and job.group == comparison.group
                )
                else CONCURRENT.name,
                timelines.get(comparison.group, []),
                in_plan.get("sharing_reason") if in_plan else None,
            )
        )
    return jobs, groups


def adaptive_timelines(session: Session, experiment_id: str) -> dict[int | None, list[dict[str, Any]]]:
    """Per group: the segments of its adaptive run, in order (the first adaptive unit's where it ran more)."""
    timelines: dict[int | None, list[dict[str, Any]]] = {}
    first_unit: dict[int | None, int] = {}
    rows = session.scalars(
        select(SharingSegment)
        .where(SharingSegment.experiment_id == experiment_id)
        .order_by(SharingSegment.run_id, SharingSegment.seq)
    )
    for row in rows:
        if first_unit.setdefault(row.group_index, row.run_id) != row.run_id:
            continue
        timelines.setdefault(row.group_index, []).append(
            {
                "seq": row.seq,
                "kind": row.kind,
                "way": row.way,
                "reason": row.reason,
                "started": row.started,
                "ended": row.ended,
                "switch": row.switch,
                "window": row.window,
                "speeds": row.speeds,
                "aggregate": row.aggregate,
                "error": row.error,
                "decision": row.decision,
            }
        )
    return timelines


def _profile_key(job: RunResult) -> dict[str, Any]:
    """What store/profiles.py finds a job's profiles by."""
    return {"name": job.name, "np": job.np, "engine": job.engine, "run_id": job.run_id}


def gather_report(session: Session, experiment: Experiment) -> ExperimentReport:
    """Everything the report shows of one experiment, read from the store once; each iteration row also
    names its run's experiment, job, mode and policy, so that it stands on its own in a CSV file."""
    iterations = iteration_rows(session, [run.id for run in experiment.runs])
    jobs, groups = jobs_and_groups(session, experiment, iterations)
    for job in jobs:  # rows that stand on their own in a CSV file
        for row in rows_of(iterations, job):
            row.update(experiment=experiment.id, name=job.name, mode=job.mode, policy=job.policy)
    return ExperimentReport(
        experiment_row(experiment),
        jobs,
        groups,
        loss_parity(jobs, iterations),
        iterations,
        not_started_units(session, experiment.id),
        plan_makespan(session, experiment),
    )


def _a_plans_run_in_one_way(experiment: Experiment) -> bool:
    """A plan's run in which each job ran once (as planned, or one after another), not a comparison of ways: what
    its predicted gain and its makespan are set against the plan's for."""
    return experiment.plan_id is not None and _each_job_once(experiment)


def plan_makespan(session: Session, experiment: Experiment) -> PlanMakespan | None:
    """The makespan of a plan's run in one way, beside the plan's prediction and the same plan's run of the other
    kind (PlanMakespan); None for a run not from a plan, and for a comparison (a job in several modes)."""
    if not _a_plans_run_in_one_way(experiment):
        return None
    plan_row = session.get(PlanRow, experiment.plan_id)
    body = plan_row.body if plan_row is not None else {}
    info = experiment_row(experiment)
    one_after_another = info.modes_asked == [Mode.SEQUENTIAL.value]
    planned_jobs = body.get("jobs", {})
    as_planned = (
        not info.lengths_in_seconds
        and kept_plan_lengths(
            {name: job.get("iterations") for name, job in planned_jobs.items()},
            [(run.name, run.iterations_planned) for run in experiment.runs],
        )
        and _predicted_for_its_jobs(body)
    )
    predicted_ms = body.get("sequential_makespan_ms" if one_after_another else "predicted_makespan_ms")
    other = _other_run_of_the_plan(session, experiment, body, not one_after_another)
    return PlanMakespan(
        measured_s=_measured_makespan_s(experiment),
        one_after_another=one_after_another,
        predicted_s=predicted_ms / 1000 if as_planned and isinstance(predicted_ms, (int, float)) else None,
        other_experiment=other.id if other is not None else None,
        other_s=_measured_makespan_s(other) if other is not None else None,
        running=experiment.status == RunStatus.RUNNING or any(run.status in OPEN_STATUSES for run in experiment.runs),
    )


def _predicted_for_its_jobs(body: dict[str, Any]) -> bool:
    """Whether a stored plan's predictions are for its jobs as they stand (Plan.predicted_for_its_jobs): a plan
    file edited by hand, then run, is stored as it was run, with the figures predicted before the edit."""
    try:
        return plan_from_dict(body).predicted_for_its_jobs
    except XoverError:  # a plan of an older xover, read no further: its figures as they are
        return True


def _each_job_once(experiment: Experiment) -> bool:
    names = [run.name for run in experiment.runs]
    return bool(names) and len(names) == len(set(names))


def _measured_makespan_s(experiment: Experiment) -> float | None:
    """First job's start to last job's end; None unless every job finished (results.measured_makespan_s)."""
    return measured_makespan_s((run.status, run.started_at, run.ended_at) for run in experiment.runs)


def _other_run_of_the_plan(
    session: Session, experiment: Experiment, body: dict[str, Any], one_after_another: bool
) -> Experiment | None:
    """The same plan's run (the same content) of the other kind, every job once with the same recipe and length,
    over the same link: the nearest in time."""
    jobs = {run.name: (run.recipe_id, run.iterations_planned, run.np) for run in experiment.runs}
    candidates = session.scalars(
        select(Experiment).where(
            Experiment.plan_id.is_not(None), Experiment.id != experiment.id, Experiment.kind == experiment.kind
        )
    ).all()
    matches = [
        other
        for other in candidates
        if (experiment_row(other).modes_asked == [Mode.SEQUENTIAL.value]) == one_after_another
        and other.bandwidth == experiment.bandwidth
        and _each_job_once(other)
        and {run.name: (run.recipe_id, run.iterations_planned, run.np) for run in other.runs} == jobs
        and (session.get(PlanRow, other.plan_id) or PlanRow()).body == body
    ]
    return min(matches, key=lambda other: abs((other.created_at - experiment.created_at).total_seconds()), default=None)


# ------------------------------------------------------------------------------------ every experiment


@dataclass
class ExperimentBrief:
    """One experiment in brief, for `xover report all`: its row, jobs and groups, without iterations, and the
    runs it never started (a job refused or failed alone: it may have no run at all); for a simulation, which
    has no runs, the number of jobs it replayed."""

    experiment: ExperimentInfo
    jobs: list[RunResult]
    groups: list[GroupReport]
    replayed_jobs: int | None = None
    not_started: list[NotStarted] = field(default_factory=list)

    def summary(self) -> ExperimentSummary:
        """Its line in `xover report all`: counts, the modes run, and the best measured crossover gain (of every
        group under every turn policy it ran: not only the default policy's, which a group's table shows)."""
        gains = [
            entry.aggregate for group in self.groups for entry in group.policies.values() if entry.aggregate is not None
        ]
        modes = sorted({j.mode for j in self.jobs if j.mode is not None}, key=mode_rank)
        return ExperimentSummary(
            id=self.experiment.id,
            kind=self.experiment.kind,
            status=self.experiment.status,
            created_at=self.experiment.created_at,
            jobs=(
                self.replayed_jobs
                if self.replayed_jobs is not None
                else len({j.name for j in self.jobs} | {name for unit in self.not_started for name in unit.jobs})
            ),
            runs=len(self.jobs),
            modes=",".join(modes),
            best_crossover_gain=max(gains) if gains else None,
        )


def all_experiments(session: Session) -> list[ExperimentBrief]:
    """Every experiment, newest first, with its jobs and (for comparison runs) group gains."""
    experiments = session.scalars(select(Experiment).order_by(Experiment.created_at.desc(), Experiment.id.desc())).all()
    # a simulation's jobs are its trace's (each policy replays them all), not runs
    replayed = {
        experiment_id: jobs
        for experiment_id, jobs in session.execute(
            select(Replay.experiment_id, func.max(Replay.jobs)).group_by(Replay.experiment_id)
        )
    }
    briefs = []
    for experiment in experiments:
        jobs, groups = jobs_and_groups(session, experiment)
        briefs.append(
            ExperimentBrief(
                experiment_row(experiment),
                jobs,
                groups,
                replayed.get(experiment.id),
                not_started_units(session, experiment.id),
            )
        )
    return briefs


def gain_points(briefs: list[ExperimentBrief]) -> list[GainPoint]:
    """Predicted vs measured crossover gain for every group of every comparison run.

    Predicted is the plan's figure when the run came from a plan, else the simulation of the policy
    crossover ran under, from the group's sequential runs (the fluid bound is a limit, not a
    prediction); groups with neither, or not measured, are left out.
    """
    points = []
    for brief in briefs:
        for group in brief.groups:
            predicted = group.crossover_predicted
            if predicted is None or group.measured_gain is None:
                continue
            points.append(
                GainPoint(
                    experiment=brief.experiment.id,
                    group=group.group,
                    jobs=group.jobs,
                    predicted_gain=predicted,
                    predicted_from="plan" if group.predicted_gain is not None else "model",
                    measured_gain=group.measured_gain,
                )
            )
    return points


def experiment_inputs(session: Session, experiment: Experiment | None = None) -> list[tuple[Path, str]]:
    """The files an experiment (None: every one) was made from, each with what it is, for refusing a report's
    output over one: a simulation's trace and profiles CSV, a run's plan file, job files, scripts and the modules
    of their own the scripts import. Only whole paths of files that exist: a relative one was relative to a folder
    the store does not know."""

    def of(column: Any) -> Any:  # this experiment's rows, or every one's
        return column == experiment.id if experiment is not None else true()

    found: dict[str, str] = {}

    def kept(path: Any) -> TypeGuard[str]:  # a whole path of a file that exists
        return isinstance(path, str) and os.path.isabs(path) and os.path.isfile(path)

    def add(path: Any, what: str) -> None:
        if kept(path):
            found.setdefault(path, what)

    for experiment_id, settings in session.execute(
        select(Replay.experiment_id, Replay.settings).where(of(Replay.experiment_id))
    ):
        inputs = (settings or {}).get("inputs") or {}
        add(inputs.get("trace"), f"the trace of experiment {experiment_id}")
        add(inputs.get("profiles"), f"the profiles of experiment {experiment_id}")
    plans = select(PlanRow.path, Experiment.id).join(Experiment, Experiment.plan_id == PlanRow.id)
    for path, experiment_id in session.execute(plans.where(of(Experiment.id))):
        add(path, f"the plan of experiment {experiment_id}")
    # the job files and their scripts: the bodies (json, which PostgreSQL cannot DISTINCT) read once a recipe
    snapshots = select(RecipeSnapshot.id, RecipeSnapshot.path, Run.experiment_id).join(
        Run, Run.recipe_id == RecipeSnapshot.id
    )
    first_of: dict[int, str] = {}
    for recipe_id, path, experiment_id in session.execute(snapshots.where(of(Run.experiment_id)).distinct()):
        add(path, f"a job file of experiment {experiment_id}")
        first_of.setdefault(recipe_id, experiment_id)
    scripts: dict[str, str] = {}  # each script once, with the first experiment that ran it
    ran = select(Run.recipe_id).where(of(Run.experiment_id))
    for recipe_id, body in session.execute(
        select(RecipeSnapshot.id, RecipeSnapshot.body).where(RecipeSnapshot.id.in_(ran))
    ):
        if kept(script := (body or {}).get("script")):
            scripts.setdefault(script, first_of[recipe_id])
    # each run's own files (0021): a copy of a job file or a script elsewhere is its snapshot's under another path
    for inputs, experiment_id in session.execute(select(Run.inputs, Run.experiment_id).where(of(Run.experiment_id))):
        add((inputs or {}).get("job_file"), f"a job file of experiment {experiment_id}")
        if kept(script := (inputs or {}).get("script")):
            scripts.setdefault(script, experiment_id)
    for script, experiment_id in scripts.items():
        add(script, f"a script of experiment {experiment_id}")
        try:  # and the modules of its own it imports, as `plan --out` keeps them
            for module in local_modules(script):
                add(str(module), f"a module a script of experiment {experiment_id} imports")
        except OSError:  # an unreadable module: the script itself is still kept
            pass
    return [(Path(path), what) for path, what in found.items()]
