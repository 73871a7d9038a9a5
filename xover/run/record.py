"""Recording: every store write a run makes (experiments, runs, iteration metrics, evaluations, turn
statistics and events), and the units not started read back (`not_started_units`: `xover run` and `xover
report` both say them).

Rows never stay pending/running: an experiment's row carries its owner (host, pid, process start
time); whatever ends a run ends its rows (finished, failed, interrupted, timeout), a reaper marks them
`lost` if xover itself is killed, and `reconcile_lost` catches the rest (a machine that rebooted)
whenever a later command opens the store.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ..config import results_root
from ..console import counted
from ..devices import hardware_fingerprint
from ..errors import printable
from ..hosts import canonical_host
from ..records import (
    RANK_LEFT,
    RELAY_PREFIX,
    EndRecord,
    EvaluationRecord,
    IterationRecord,
    MetricRecord,
    StartRecord,
    TurnsLostRecord,
)
from ..results import NotStarted
from ..sharing import RunStatus, turn_taking
from ..store.models import (
    ACTIVE_STATUSES,
    Evaluation,
    Experiment,
    IterationMetric,
    Replay,
    Run,
    SharingSegment,
    TurnEvent,
    utcnow,
)
from ..store.queries import iteration_metric, run_inputs, snapshot_recipe
from ..store.session import Store
from .adaptive import Segment
from .jobs import JobSpec
from .supervise import uninterrupted

# the kind of `turn_events` row that keeps a unit the scheduler did not start (Recorder.record_not_started)
NOT_STARTED = "not-started"


class PlannedUnit(Protocol):
    """What a group was to run, as units.group_units makes it (schedule.Unit)."""

    jobs: list[JobSpec]
    mode: str
    policy: str | None
    group: int | None


def owner_identity() -> tuple[str, int, float]:
    """This process as a later command can recognise it: host, pid, and start time (pids are reused)."""
    return socket.gethostname(), os.getpid(), psutil.Process().create_time()


def owner_alive(host: str | None, pid: int | None, started: float | None) -> bool | None:
    """Whether an experiment's owner still runs; None when it ran on another host (cannot tell)."""
    if host is None or pid is None:
        return False
    if host != socket.gethostname():
        return None
    try:
        return abs(psutil.Process(pid).create_time() - (started or 0.0)) < 1.0
    except psutil.NoSuchProcess:
        return False


def reconcile_lost(store: Store) -> int:
    """Experiments of this host whose xover is gone but whose rows still say pending/running: `lost`."""
    changed = 0
    with store.session() as session, session.begin():
        experiments = session.scalars(select(Experiment).where(Experiment.status.in_((RunStatus.RUNNING,)))).all()
        for experiment in experiments:
            if owner_alive(experiment.owner_host, experiment.owner_pid, experiment.owner_started) is False:
                end_lost(session, experiment)
                changed += 1
    return changed


def end_lost(session: Session, experiment: Experiment) -> None:
    """An experiment whose xover is gone: `lost` (mark_lost), or removed where nothing of it was recorded (its xover
    killed while it waited for its devices): it would be `report latest`, a lost experiment of no jobs, as a run
    stopped there keeps none (run/experiment.py). Its results folder goes with it where empty."""
    recorded = experiment.runs or any(
        session.scalar(select(func.count()).select_from(table).where(table.experiment_id == experiment.id))
        for table in (TurnEvent, SharingSegment, Replay)
    )
    if recorded:
        mark_lost(session, experiment)
        return
    session.delete(experiment)
    with contextlib.suppress(OSError):
        (results_root() / "runs" / experiment.id).rmdir()


def run_devices(run: Run) -> set[tuple[str, int]]:
    """The (host, index) devices a run was given (`JobSpec.devices_env` as stored, over its `hosts`); none where
    not recorded."""
    if not run.devices:
        return set()
    if "=" in run.devices:  # across hosts: 'h1=0,1;h2=0,1'
        pairs = (part.partition("=") for part in run.devices.split(";"))
        return {(canonical_host(host), int(i)) for host, _, indices in pairs for i in indices.split(",") if i}
    host = (run.hosts or "localhost").split(",")[0].rpartition(":")[0] or "localhost"
    return {(canonical_host(host), int(i)) for i in run.devices.split(",") if i}


def _this_machines_others(session: Session, experiment_id: str, *conditions) -> Iterator[Experiment]:
    """Other experiments whose xover ran on this machine (`conditions` on them too). Another machine's (a shared
    store) are on other devices whatever their names."""
    yield from session.scalars(
        select(Experiment).where(
            Experiment.id != experiment_id, Experiment.owner_host == socket.gethostname(), *conditions
        )
    )


def running_on(session: Session, experiment_id: str, devices: set[tuple[str, int]]) -> list[str]:
    """Other experiments of this machine running now (their xover alive) with runs on any of `devices`: they lease in
    another XOVER_LEASE_DIR, or the lease would have been refused."""
    found = []
    for other in _this_machines_others(session, experiment_id, Experiment.status == RunStatus.RUNNING.value):
        if owner_alive(other.owner_host, other.owner_pid, other.owner_started) is not True:
            continue
        if any(run_devices(run) & devices for run in other.runs):
            found.append(other.id)
    return found


def beside_on_devices(session: Session, experiment_id: str) -> list[str]:
    """Other experiments of this machine whose runs had devices of this experiment's runs at the same time: runs
    leasing in another XOVER_LEASE_DIR share devices without seeing each other's leases, and neither's figures are
    of its jobs alone then."""
    ours = session.scalars(select(Run).where(Run.experiment_id == experiment_id)).all()
    devices = set().union(*(run_devices(run) for run in ours)) if ours else set()
    spans = [(run.started_at, run.ended_at or utcnow()) for run in ours if run.started_at is not None]
    if not devices or not spans:
        return []
    first, last = min(start for start, _ in spans), max(end for _, end in spans)
    found = []
    # only those open at some time in our span: a store of years holds thousands
    near = (Experiment.created_at < last, or_(Experiment.ended_at.is_(None), Experiment.ended_at > first))
    for other in _this_machines_others(session, experiment_id, *near):
        if any(
            run_devices(run) & devices
            and run.started_at is not None
            and any(run.started_at < end and (run.ended_at or utcnow()) > start for start, end in spans)
            for run in other.runs
        ):
            found.append(other.id)
    return found


def mark_lost(session, experiment: Experiment) -> None:
    """Mark an experiment whose xover is gone `lost`, with every run it left pending or running."""
    experiment.status, experiment.ended_at = RunStatus.LOST, experiment.ended_at or utcnow()
    for run in experiment.runs:
        if run.status in ACTIVE_STATUSES:
            run.status, run.ended_at = RunStatus.LOST, utcnow()
            lost = "the xover process that ran it ended without closing it (killed? or its store was full?)"
            run.error = f"{run.error}; {lost}" if run.error else lost


def not_started_units(session: Session, experiment_id: str) -> list[NotStarted]:
    """The units the experiment's scheduler never started, in the order it decided so (Recorder.record_not_started):
    what `xover run` says under its table, and `xover report` under its own."""
    rows = session.scalars(
        select(TurnEvent)
        .where(TurnEvent.experiment_id == experiment_id, TurnEvent.kind == NOT_STARTED)
        .order_by(TurnEvent.id)
    )
    return [
        NotStarted(
            group=row.group_index,
            mode=str(row.detail.get("mode", "?")),
            policy=row.detail.get("policy"),
            jobs=[str(name) for name in row.detail.get("jobs", [])],
            why=str(row.detail.get("why", "")),
            stopped_first=bool(row.detail.get("stopped_first", False)),
        )
        for row in rows
    ]


class Recorder:
    """The store side of one experiment."""

    def __init__(self, store: Store, experiment_id: str, launcher_job_id: str | None = None) -> None:
        self.store, self.experiment_id = store, experiment_id
        self.launcher_job_id = launcher_job_id  # set when the runs execute inside a job of a launcher's scheduler

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        """One transaction of the store that Ctrl-C or SIGTERM does not cut: a signal that comes in it takes
        effect after it. Raised inside the write, an interrupt rolled it back, and now and then was lost
        (Python ignores an exception raised in a callback such as a weakref's): the run went on and ignored
        the next Ctrl-C (bench/interrupt_write.py measures it)."""
        with uninterrupted(), self.store.session() as session, session.begin():
            yield session

    def open(self, kind: str, command: str, bandwidth: str | None, plan_id: int | None) -> None:
        """Record the experiment's row, owned by this process (so a later command can tell if it died)."""
        host, pid, started = owner_identity()
        with self._transaction() as session:
            session.add(
                Experiment(
                    id=self.experiment_id,
                    kind=kind,
                    command=command,
                    bandwidth=bandwidth,
                    plan_id=plan_id,
                    hardware=hardware_fingerprint(),
                    owner_host=host,
                    owner_pid=pid,
                    owner_started=started,
                )
            )

    def finish(self, status: str, error: str | None = None) -> None:
        """Close the experiment with `status`; a run it left pending or running ends with it: interrupted or
        timed out as the experiment was, else failed, with `error` where one is given."""
        left_as = status if status in (RunStatus.INTERRUPTED, RunStatus.TIMEOUT) else RunStatus.FAILED
        with self._transaction() as session:
            experiment = session.get_one(Experiment, self.experiment_id)
            experiment.status, experiment.ended_at = status, utcnow()
            for run in experiment.runs:  # nothing may stay pending/running after its experiment
                if run.status in ACTIVE_STATUSES:
                    run.status, run.ended_at = left_as, utcnow()
                    run.error = error or run.error

    def run_statuses(self) -> list[str]:
        """How each run of the experiment ended (or where it is), in the order they were made."""
        with self._transaction() as session:
            return list(session.scalars(select(Run.status).where(Run.experiment_id == self.experiment_id)))

    def runs_as_they_ended(self) -> str:
        """Each run of the experiment as it ended ('name (mode): status after N iterations'), for the line a run that
        --timeout or Ctrl-C cut short ends with: which job was still running is what a user looks for."""
        with self._transaction() as session:
            counts: dict[int, int] = {
                run_id: count
                for run_id, count in session.execute(
                    select(IterationMetric.run_id, func.count())
                    .join(Run, Run.id == IterationMetric.run_id)
                    .where(Run.experiment_id == self.experiment_id)
                    .group_by(IterationMetric.run_id)
                ).all()
            }
            runs = session.scalars(select(Run).where(Run.experiment_id == self.experiment_id).order_by(Run.id)).all()
            said = []
            for run in runs:
                iterations = counts.get(run.id, 0)
                after = f" after {counted(iterations, 'iteration')}" if iterations else ""
                way = ", ".join(filter(None, (run.mode, run.policy)))
                said.append(f"{printable(run.name)} ({way}): {run.status}{after}")
        return "; ".join(said)

    def discard(self) -> bool:
        """Remove the experiment if it has no runs (a refusal before anything started); whether it did."""
        with self._transaction() as session:
            experiment = session.get_one(Experiment, self.experiment_id)
            if experiment.runs:
                return False
            session.delete(experiment)
            return True

    def create_runs(
        self, jobs: list[JobSpec], mode: str, group: int | None, policy: str | None, results_dir: Path
    ) -> list[tuple[int, Path]]:
        """A pending run per job of a unit (slots only under crossover), each with its log folder, and the
        experiment's hosts widened to theirs; returns (run id, log folder) per job, in order."""
        created = []
        with self._transaction() as session:
            experiment = session.get_one(Experiment, self.experiment_id)
            hosts = set(experiment.hosts.split(",")) | {host for job in jobs for host in job.devices}
            experiment.hosts = ",".join(sorted(hosts))
            for slot, job in enumerate(jobs):
                snapshot = snapshot_recipe(session, job.recipe)
                run = Run(
                    experiment_id=self.experiment_id,
                    recipe_id=snapshot.id,
                    name=job.name,
                    mode=mode,
                    engine=job.engine,
                    policy=policy,
                    group_index=group,
                    slot=slot if turn_taking(mode) else None,
                    hosts=job.hosts,
                    np=job.np,
                    devices=job.devices_env(),
                    status=RunStatus.PENDING,
                    iterations_planned=job.recipe.iterations,
                    launcher_job_id=self.launcher_job_id,
                    inputs=run_inputs(job.recipe),
                )
                session.add(run)
                session.flush()
                # a turn policy named too: --policy all runs a job under crossover once a policy
                log_dir = results_dir / f"{run.id}-{job.name}-{mode}{f'-{policy}' if policy else ''}"
                log_dir.mkdir(parents=True, exist_ok=True)
                run.log_dir = str(log_dir)
                created.append((run.id, log_dir))
        return created

    def launcher_job_ended(
        self, units: Sequence[PlannedUnit], job_id: str, status: str, said: str, why: str, succeeded: bool
    ) -> None:
        """A group's job of a launcher's scheduler ended (`said`: as the scheduler names its end; `why`: its
        reason, or ""). Runs its xover left open end `status`, as do runs it left interrupted when the job did
        not succeed (the scheduler stopped them); runs it never got to (all of them, when it was cancelled
        while pending) are recorded so. `units`: what the group was to run (units.group_units)."""
        index = units[0].group
        with self._transaction() as session:
            experiment = session.get_one(Experiment, self.experiment_id)
            runs = [r for r in experiment.runs if r.group_index == index and r.launcher_job_id == job_id]
            made = {(r.name, r.mode, r.policy) for r in runs}
            for unit in units if not succeeded else []:
                for job in unit.jobs:
                    if (job.name, unit.mode, unit.policy) not in made:
                        session.add(
                            Run(
                                experiment_id=self.experiment_id,
                                recipe_id=snapshot_recipe(session, job.recipe).id,
                                name=job.name,
                                mode=unit.mode,
                                policy=unit.policy,
                                engine=job.engine,
                                group_index=index,
                                hosts=job.hosts,
                                np=job.np,
                                devices=job.devices_env(),
                                status=status,
                                launcher_job_id=job_id,
                                ended_at=utcnow(),
                                error=said + why,
                                inputs=run_inputs(job.recipe),
                            )
                        )
            for row in runs:
                if row.status in ACTIVE_STATUSES or (not succeeded and row.status == RunStatus.INTERRUPTED):
                    row.status, row.ended_at = status, row.ended_at or utcnow()
                    row.error = (row.error + "\n" if row.error else "") + said

    def mark_started(self, run_ids: list[int]) -> None:
        """The runs have started."""
        with self._transaction() as session:
            for run_id in run_ids:
                run = session.get_one(Run, run_id)
                run.status, run.started_at = RunStatus.RUNNING, utcnow()

    def close_runs(self, run_ids: list[int], status: str, error: str | None = None) -> None:
        """Every run of these still pending/running ends as `status` (interrupted, timeout, failed...)."""
        with self._transaction() as session:
            for run_id in set(run_ids):
                run = session.get_one(Run, run_id)
                if run.status in ACTIVE_STATUSES:
                    run.status, run.ended_at = status, utcnow()
                    if error:
                        run.error = error

    def apply(self, batch: Sequence[tuple[int, MetricRecord]]) -> None:
        """Store a batch of metric records, each with its run's id, in one transaction; refused (StoreGone) once
        the store's SQLite file has left its path, so the run stops instead of writing on into a file that is lost.
        A batch at most each 0.2 s (Scheduler._batch): one stat each costs nothing beside its transaction."""
        self.store.check_in_place()
        with self._transaction() as session:
            for run_id, record in batch:
                self._store(session, run_id, record)

    @staticmethod
    def _store(session: Session, run_id: int, record: MetricRecord) -> None:
        if isinstance(record, IterationRecord):
            session.add(iteration_metric(run_id, record))
        elif isinstance(record, EvaluationRecord):
            if isinstance(record.value, (int, float)) and math.isfinite(record.value):
                # a diverged job's NaN accuracy is not a measurement; its losses (NaN) say what happened
                session.add(Evaluation(run_id=run_id, step=record.step, metric=record.metric, value=record.value))
        elif isinstance(record, StartRecord):
            run = session.get_one(Run, run_id)
            run.iterations_planned = record.iterations
            run.engine = record.engine or run.engine
            run.gradient_bytes, run.checkpoints, run.device = record.gradient_bytes, record.checkpoints, record.device
            run.link_priority, run.comm_threads = record.link_priority, record.comm_threads
            run.backend, run.deterministic = record.backend, record.deterministic
            run.devices_per_gpu, run.gpu_sharing = record.devices_per_gpu, record.gpu_sharing
        elif isinstance(record, TurnsLostRecord):
            run = session.get_one(Run, run_id)
            lost = {"device": record.device, "why": record.why, "wall_time": record.wall_time}
            _note_lost(run, lost)
            session.add(
                TurnEvent(
                    experiment_id=run.experiment_id,
                    run_id=run_id,
                    group_index=run.group_index,
                    host="?",
                    kind="turns-lost",
                    slot=run.slot,
                    device=record.device,
                    detail=lost,
                )
            )
        elif isinstance(record, EndRecord):
            run = session.get_one(Run, run_id)
            run.peak_memory_gb = record.peak_memory_gb
            if record.gradient_bytes is not None:  # a script's: what its engine all-reduced per step
                run.gradient_bytes = record.gradient_bytes
            if record.checkpoints is not None:  # a script's: the yield points it passed per step
                run.checkpoints = record.checkpoints

    def job_exited(self, run_id: int, code: int, error: str | None) -> str:
        """A run's launchers ended with `code`: its status (a run already ended, by a timeout or an
        interruption, keeps its own)."""
        with self._transaction() as session:
            run = session.get_one(Run, run_id)
            if run.status not in ACTIVE_STATUSES:
                return run.status
            run.exit_code, run.ended_at = code, utcnow()
            run.status = RunStatus.FINISHED if code == 0 else RunStatus.FAILED
            if code != 0:
                run.error = error
            return run.status

    def record_not_started(
        self, group: int | None, mode: str, policy: str | None, jobs: list[str], why: str, stopped_first: bool = False
    ) -> None:
        """A unit the scheduler never started (a job of it was refused, or failed alone: each run of it would fail
        the same way; or the run was stopped first, `stopped_first`): no run is made for it, so a `turn_events` row
        of kind NOT_STARTED keeps what it was and why, for the report to say (report/data.py)."""
        with self._transaction() as session:
            session.add(
                TurnEvent(
                    experiment_id=self.experiment_id,
                    group_index=group,
                    host="localhost",  # the xover that decided it
                    kind=NOT_STARTED,
                    detail={"mode": mode, "policy": policy, "jobs": list(jobs), "why": why}
                    | ({"stopped_first": True} if stopped_first else {}),
                )
            )

    def record_segment(self, runs: list[int], group: int | None, segment: Segment) -> None:
        """An adaptive unit's segment as it is now (written when it opens, again when it is decided and when it
        closes): one row per unit and place in its timeline."""
        with self._transaction() as session:
            row = session.scalars(
                select(SharingSegment).where(SharingSegment.run_id == runs[0], SharingSegment.seq == segment.seq)
            ).first()
            if row is None:
                row = SharingSegment(
                    experiment_id=self.experiment_id,
                    run_id=runs[0],
                    runs=list(runs),
                    group_index=group,
                    seq=segment.seq,
                )
                session.add(row)
            row.kind, row.way, row.reason = segment.kind, segment.way, segment.reason
            row.started, row.ended, row.switch = segment.started, segment.ended, segment.switch
            row.window = list(segment.window) if segment.window else None
            row.speeds, row.aggregate, row.error = dict(segment.speeds), segment.aggregate, segment.error
            row.decision = dict(segment.decision) if segment.decision is not None else None

    def record_turns(self, runs: list[int], group: int | None, stats: dict[str, dict], events: list[dict]) -> None:
        """What the turn servers saw (slot -> summary) and their events (lease revocations, refusals)."""
        with self._transaction() as session:
            for index, run_id in enumerate(runs):
                if str(index) in stats:
                    run = session.get_one(Run, run_id)
                    lost = (run.turn_stats or {}).get("lost")  # what its workers said as it ran
                    run.turn_stats = {**stats[str(index)], **({"lost": lost} if lost else {})}
            for event in events:
                slot = event.get("slot")
                if event.get("kind") == "lease-revoked" and isinstance(slot, int) and 0 <= slot < len(runs):
                    _note_taken_back(session.get_one(Run, runs[slot]), event)
                if event.get("kind") == "unwritable" and isinstance(slot, int) and 0 <= slot < len(runs):
                    _note_lost(
                        session.get_one(Run, runs[slot]),
                        {
                            "device": event.get("device"),
                            "why": f"the turn server dropped it: {event.get('reason')}",
                            "wall_time": event.get("wall_time"),
                        },
                    )
                session.add(
                    TurnEvent(
                        experiment_id=self.experiment_id,
                        group_index=group,
                        host=event.get("host", "localhost"),
                        run_id=runs[slot] if isinstance(slot, int) and 0 <= slot < len(runs) else None,
                        kind=event.get("kind", "?"),
                        slot=slot,
                        device=event.get("device"),
                        detail=event,
                    )
                )


MAX_NOTES = 64  # per run and kind: one per device and rank is the most a run writes; a flood stops here


def _add_note(run: Run, kind: str, note: dict) -> None:
    """One more note of `kind` in the run's turn_stats ("lost": its ranks gave up crossover turns on a device;
    "taken_back": a turn server took a turn back at its lease), up to MAX_NOTES."""
    stats = dict(run.turn_stats or {})
    notes = list(stats.get(kind) or [])
    if len(notes) < MAX_NOTES:
        stats[kind] = [*notes, note]
        run.turn_stats = stats


def _note_taken_back(run: Run, event: dict) -> None:
    """Where the turn was taken back, after how long, and whether its holders waited on each other's devices."""
    kept = ("host", "device", "held_s", "in_a_ring", "wall_time")
    _add_note(run, "taken_back", {key: event.get(key) for key in kept})


def _note_lost(run: Run, lost: dict) -> None:
    """The run gave up crossover turns on a device (turn_stats["lost"]): its record says so."""
    _add_note(run, "lost", lost)


def _unrelayed(line: str) -> str:
    """A rank's line as it wrote it, without what its launcher put in front ('[0]<stderr>:', '[rank1]:')."""
    relayed = RELAY_PREFIX.match(line)
    if not relayed:
        return line
    # torch's excepthook writes '[rank0]: ' before each line of a traceback, with a space
    rest = line[relayed.end() :]
    return rest.removeprefix(" ") if relayed.group().startswith("[rank") else rest


_RELAYED_STDERR = re.compile(r"^\[(?:[0-9]+,)?([0-9]+)\]<stderr>:")  # horovodrun's: '[0]<stderr>:', '[1,0]<stderr>:'
_USAGE_ERROR = re.compile(r"^\S+: error: ")  # argparse's 'train.py: error: unrecognized arguments: ...'


def _says_error(line: str) -> bool:
    """A line of a rank's stderr that tells of its failure: a traceback, an exception, or argparse's usage error
    (which has neither, and left only torchrun's summary said before)."""
    return "Traceback" in line or "Error" in line or bool(_USAGE_ERROR.match(line))


def says_usage_error(error: str | None) -> bool:
    """Whether a failure's summary holds a script's usage error (argparse's 'train.py: error: ...')."""
    return any(_USAGE_ERROR.match(line.strip()) for line in (error or "").splitlines())


def shim_refusal(error: str | None) -> str | None:
    """The line a script's shim wrote when it could not follow the script ('xover: SCRIPT: problem'),
    without the prefix; None for any other failure."""
    for line in (error or "").splitlines():
        line = line.strip()
        marker = line.find("xover: ")
        if marker >= 0:
            _, _, problem = line[marker + len("xover: ") :].partition(": ")
            return problem or None
    return None


# `SomethingError: ...`, `Error`, `KeyboardInterrupt`: an exception's last line, as Python prints it;
# torch's elastic agent may prefix a rank's lines with "[rank0]:"
EXCEPTION_LINE = re.compile(
    r"^(?:\[[^\]]*\]:?\s*)?"  # [rank0]:
    r"((?:[A-Za-z_][\w.]*)?(?:Error|Exception)\b(?::.*)?|KeyboardInterrupt)$"
)
RANK_HEADER = re.compile(r"^rank (\S+):$")  # failure_summary's first line
# torchrun's summary of a rank that ended with an exit code and no traceback (sys.exit(3), os._exit)
ROOT_CAUSE = re.compile(r"Root Cause.*?\brank\s*:\s*(\d+).*?\bexitcode\s*:\s*(-?\d+)", re.DOTALL)
REASON_CHARS = 400


# a terminal's escape sequences (colours, a title, a cursor move): a job's stderr may hold them, and its
# reason is shown on a terminal long after, by whoever reads the record
_TERMINAL_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x9b[0-?]*[ -/]*[@-~]")


def failure_reason(error: str | None) -> str | None:
    """The most telling line of a failed job's `error` (the last lines of the rank that failed first):
    the last line that looks like an exception (`RuntimeError: boom`), else the last non-empty line;
    'rank N: ' before it when the text names the rank. None when there is no text. Shown as text: its
    colours left out, any other control character escaped."""
    lines = [printable(line).strip() for line in _TERMINAL_CONTROL.sub("", error or "").splitlines()]
    rank = None
    if lines and (header := RANK_HEADER.match(lines[0])):
        rank, lines = header.group(1), lines[1:]
    lines = [line for line in lines if line]
    if not lines:
        return None
    if rank is None and (cause := ROOT_CAUSE.search("\n".join(lines))):
        return f"rank {cause.group(1)}: exited with code {cause.group(2)}, no traceback"
    exceptions = [match.group(1) for line in lines if (match := EXCEPTION_LINE.match(line))]
    reason = exceptions[-1] if exceptions else lines[-1]
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 3] + "..."
    return f"rank {rank}: {reason}" if rank is not None else reason


# horovodrun runs each rank under a shell: a rank's death by a signal is the shell's exit code 128 + its
# number, and the shell's words for it ("Terminated", "Killed") end the rank's stderr
_SHELL_SIGNAL_BASE = 128
_SHELL_NOTES = ("Terminated", "Killed")
# what a rank says when a peer died before it: the peer's failure, not its own
KNOCK_ON_ERRORS = (
    "Connection reset by peer",  # gloo
    "Connection closed by peer",  # gloo
    "Horovod has been shut down",
    "Broken pipe",
    "remote process exited",  # NCCL
    "remote process exiting",  # NCCL's ncclRemoteError
    "collective operation timeout",  # NCCL's watchdog, a peer gone silent
)
_TORCHRUN_ROOT_CAUSE = "Root Cause (first observed failure):"
_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_TORCHRUN_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_HOROVODRUN_FIRST_PROCESS = re.compile(r"^Process name: (\d+)$")  # then "Exit code: 3"
_HOROVODRUN_EXIT_CODE = re.compile(r"^Exit code: (-?\d+)$")
_HOROVODRUN_PROCESS_EXIT = re.compile(r"^Process (\d+) exit with status code (-?\d+)\.$")


@dataclass(frozen=True)
class LauncherVerdict:
    """The rank a launcher says ended first, and how: torchrun's root cause, horovodrun's first process."""

    rank: str
    log_name: str  # the name of its log folder: torchrun names it by the local rank
    exit_code: int
    through_shell: bool = False  # horovodrun's: a signal is 128 + its number

    def how_it_ended(self) -> str:
        """'exited with code 3' / 'killed by signal 9 (SIGKILL)'."""
        return how_it_ended(self.exit_code, self.through_shell)


def how_it_ended(exit_code: int, through_shell: bool = False) -> str:
    """'exited with code 3' / 'killed by signal 9 (SIGKILL)': a process's end from its exit code (negative: the
    signal, as Python's subprocess gives it; through a shell, 128 + the signal)."""
    number = -exit_code if exit_code < 0 else None
    if through_shell and exit_code > _SHELL_SIGNAL_BASE:
        number = exit_code - _SHELL_SIGNAL_BASE
    if number is not None:
        try:
            return f"killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            pass
    return f"exited with code {exit_code}"


def launcher_verdict(launcher_lines: Sequence[str]) -> LauncherVerdict | None:
    """Which rank ended first, as the launcher's own summary says: torchrun's "Root Cause (first observed
    failure)" block, horovodrun's "Process name: N" / "Exit code: C" (else its first "Process N exit with
    status code C." that is not 0). None when it says neither."""
    lines = [line.rstrip() for line in launcher_lines]
    roots = [index for index, line in enumerate(lines) if line.strip() == _TORCHRUN_ROOT_CAUSE]
    if roots:
        rank = local_rank = exit_code = None
        for line in lines[roots[-1] + 1 :]:
            if line.startswith("="):  # the block's closing rule
                break
            if named := _TORCHRUN_RANK.match(line):
                rank, local_rank = named.group(1), named.group(2) or named.group(1)
            elif code := _TORCHRUN_EXIT_CODE.match(line):
                exit_code = int(code.group(1))
        if rank is not None and local_rank is not None and exit_code is not None:
            return LauncherVerdict(rank, local_rank, exit_code)
    for line, following in zip(lines, lines[1:]):
        if (process := _HOROVODRUN_FIRST_PROCESS.match(line)) and (code := _HOROVODRUN_EXIT_CODE.match(following)):
            return LauncherVerdict(process.group(1), process.group(1), int(code.group(1)), through_shell=True)
    for line in lines:
        if (exited := _HOROVODRUN_PROCESS_EXIT.match(line)) and exited.group(2) != "0":
            rank = exited.group(1)
            return LauncherVerdict(rank, rank, int(exited.group(2)), through_shell=True)
    return None


@dataclass
class _RankLog:
    rank: str
    lines: list[str]  # as the rank wrote them, the shell's closing words left out
    written: float  # when: the file's modification time, or the line's place in the launcher's log

    def says_error(self) -> bool:
        return any(_says_error(line) for line in self.lines)

    def knock_on(self) -> bool:
        """Whether its error is what a peer's death causes (connection reset, Horovod shut down): said anywhere in
        its last traceback (torch's NCCL error says so on the line before its last)."""
        starts = [index for index, line in enumerate(self.lines) if "Traceback" in line]
        last = self.lines[starts[-1] :] if starts else self.lines[-1:]
        return any(marker in line for line in last for marker in KNOCK_ON_ERRORS)

    def left_after(self) -> int | None:
        """The iterations after which its script ended by itself (exit 0), as the runtime said on its stderr
        (records.RANK_LEFT); None: it did not, or it raised too."""
        if self.says_error():
            return None
        said = [match for line in self.lines if (match := RANK_LEFT.match(line.strip()))]
        return int(said[-1].group(2)) if said else None

    def first_to_blame(self) -> tuple[bool, bool, float, str]:
        """Sort key: its own error before a peer's knock-on, a traceback before a mere error line, then
        the log last written earliest."""
        traceback = any("Traceback" in line for line in self.lines)
        return (self.knock_on(), not traceback, self.written, self.rank)


def _without_shell_notes(lines: list[str]) -> list[str]:
    while lines and lines[-1].strip() in _SHELL_NOTES:
        lines = lines[:-1]
    return lines


def _rank_logs(log_dir: Path) -> tuple[dict[str, _RankLog], bool]:
    """Each rank's stderr file, by its rank as a number (horovodrun: rank.N/stderr, zero-padded from 11 ranks on;
    torchrun: RUN/attempt_K/LOCAL_RANK/stderr.log), and whether they are one launcher's: torchrun on several
    nodes writes a RUN folder per node, each with its local ranks 0, 1, ..., which the launcher's verdict (a
    local rank on one of them) cannot tell apart; then every log is kept, by its path."""
    ranks = log_dir / "ranks"
    found = []
    for stderr in sorted(ranks.glob("**/stderr*")):  # a later attempt's after an earlier's
        name = stderr.parent.name.removeprefix("rank.")
        rank = str(int(name)) if name.isdigit() else name
        text = [_unrelayed(line) for line in stderr.read_text(errors="replace").strip().splitlines()]
        found.append((stderr.relative_to(ranks), _RankLog(rank, _without_shell_notes(text), stderr.stat().st_mtime)))
    runs = {path.parts[0] for path, _ in found if len(path.parts) > 3}  # torchrun's RUN folders
    if len(runs) > 1:
        return {str(path): log for path, log in found}, False
    return {log.rank: log for _, log in found}, True


def _relayed_rank_logs(launcher_lines: Sequence[str]) -> dict[str, _RankLog]:
    """Each rank's stderr as horovodrun relayed it into its own log ('[0]<stderr>:...'), where one rank
    keeps no log file of its own."""
    logs: dict[str, _RankLog] = {}
    for index, line in enumerate(launcher_lines):
        if relayed_from := _RELAYED_STDERR.match(line):
            rank = relayed_from.group(1)
            logs.setdefault(rank, _RankLog(rank, [], float(index))).lines.append(_unrelayed(line))
    for log in logs.values():
        log.lines = _without_shell_notes(log.lines)
    return logs


def _launcher_lines(log_dir: Path, launcher_tail: list[str]) -> list[str]:
    """The end of the launcher's log (its summary is last), else the lines the run kept of it."""
    launcher_log = log_dir / "launcher.log"
    if not launcher_log.is_file():
        return launcher_tail
    with open(launcher_log, "rb") as handle:
        handle.seek(max(0, launcher_log.stat().st_size - 65536))
        return handle.read().decode(errors="replace").splitlines()


def _torchrun_failures(launcher_lines: Sequence[str]) -> list[LauncherVerdict]:
    """Every rank torchrun's last summary lists, in its "Failures:" and its root cause: the ranks it stopped
    itself (SIGTERM) and any other that ended on its own in the same moment (torchrun's clock counts whole
    seconds, so its root cause may be a peer's knock-on exit)."""
    lines = [line.rstrip() for line in launcher_lines]
    starts = [index for index, line in enumerate(lines) if line.strip() in ("Failures:", _TORCHRUN_ROOT_CAUSE)]
    if not starts:
        return []
    failures, rank, local_rank = [], None, None
    for line in lines[starts[0] if len(starts) == 1 else starts[-2] :]:
        if named := _TORCHRUN_RANK.match(line):
            rank, local_rank = named.group(1), named.group(2) or named.group(1)
        elif (code := _TORCHRUN_EXIT_CODE.match(line)) and rank is not None and local_rank is not None:
            failures.append(LauncherVerdict(rank, local_rank, int(code.group(1))))
            rank = local_rank = None
    return failures


@dataclass(frozen=True)
class _Blame:
    rank: str
    lines: list[str] | None  # its log's; None: it has no error of its own to show
    ended: str = "no error in its log, no traceback"  # how, then (LauncherVerdict.how_it_ended, _left_early)


# the lines of a rank's stderr shown where it ended without a traceback: `raise SystemExit("bad config")` prints
# its reason as one line, and a script's own last words are rarely more
_LAST_WORDS = 3


def _without_traceback(rank: str, how: str, log: _RankLog | None) -> _Blame:
    """A rank that ended (`how`: 'exited with code 1') with no error in its log: its last lines on stderr said
    after it, where it wrote any (a SystemExit's message is its reason, and no traceback comes with it)."""
    said = [line for line in log.lines if line.strip()][-_LAST_WORDS:] if log is not None else []
    if not said:
        return _Blame(rank, None, f"{how}, no traceback")
    return _Blame(rank, None, f"{how}, no traceback; its stderr ended:\n" + "\n".join(said))


def _left_early(logs: dict[str, _RankLog], knock_on: _RankLog) -> _Blame | None:
    """The rank whose script ended by itself first (exit 0, the fewest iterations), where a peer that still
    expected it failed with a knock-on error: the cause, the peer's error said after it. None: no rank did.
    Before, the peer's 'Connection closed by peer' was the job's failure, and the rank that left unnamed (no
    launcher counts an exit 0 as a failure)."""
    left = sorted(
        (iterations, log.written, log.rank) for log in logs.values() if (iterations := log.left_after()) is not None
    )
    if not left:
        return None
    iterations, _, rank = left[0]
    said = [match.group(1) for line in knock_on.lines if (match := EXCEPTION_LINE.match(line.strip()))]
    then = said[-1] if said else knock_on.lines[-1].strip()
    return _Blame(
        rank,
        None,
        f"left early: its script ended with exit 0 after {iterations} iterations while its peers still expected "
        f"it; then rank {knock_on.rank}: {then}",
    )


def _blamed(
    verdict: LauncherVerdict | None, logs: dict[str, _RankLog], failures: Sequence[LauncherVerdict]
) -> _Blame | None:
    """The rank that failed first, and its log's lines; None: nobody to blame. The launcher names the rank
    that ended first, but a rank that raised may outlive a peer's knock-on error (horovodrun's 'Horovod has
    been shut down' on rank 0 while rank 1's traceback is still being written), a rank that died without
    a word in the same second as a peer's knock-on exit may be listed beside it rather than as the cause, and a
    rank that left early with exit 0 is no launcher's failure at all (_left_early)."""
    failed = sorted((log for log in logs.values() if log.says_error()), key=_RankLog.first_to_blame)
    named = logs.get(verdict.log_name) if verdict is not None else None
    if verdict is None or (named is None and failed):  # no verdict, or of a rank whose log is elsewhere
        if failed and failed[0].knock_on() and (left := _left_early(logs, failed[0])) is not None:
            return left
        return _Blame(failed[0].rank, failed[0].lines) if failed else None
    if named is None or not named.says_error():
        return _without_traceback(verdict.rank, verdict.how_it_ended(), named)
    if named.knock_on():
        if failed and not failed[0].knock_on():
            return _Blame(failed[0].rank, failed[0].lines)
        for other in failures:
            silent = logs.get(other.log_name)
            stopped = other.exit_code == -signal.SIGTERM  # by torchrun, after the first failure
            if other.log_name != verdict.log_name and not stopped and silent is not None and not silent.says_error():
                return _without_traceback(other.rank, other.how_it_ended(), silent)
        if (left := _left_early(logs, named)) is not None:
            return left
    return _Blame(verdict.rank, named.lines)


def failure_summary(log_dir: Path, launcher_tail: list[str], lines: int = 15, launcher_code: int | None = None) -> str:
    """Why a job failed, in a few lines: 'rank N:' and the last lines of the rank that failed first (its own
    error, not the launcher's echo of it, nor a peer's knock-on), or how it ended when it died without a
    word ('exited with code 3, no traceback'). The rank is the one the launcher names, where it names one.
    Where no rank is to blame and a signal ended the launcher itself (`launcher_code`, negative), that is the
    cause: its last lines were its start's banner."""
    logs, one_launcher = _rank_logs(log_dir)
    # the shim's one line on what it cannot follow ('xover: SCRIPT: ...') says it all
    refusals = [
        (log.written, log.rank, refused[-1])
        for log in logs.values()
        if (refused := [line for line in log.lines if line.startswith("xover: ")])
    ]
    if refusals:
        _, rank, refusal = min(refusals)
        return f"rank {rank}:\n{refusal}"
    launcher_lines = _launcher_lines(log_dir, launcher_tail)
    if not logs:
        # one rank under horovodrun keeps no per-rank logs: the shim's line comes relayed ('[0]<stderr>:xover: ...')
        refused = [line for line in map(_unrelayed, launcher_lines) if line.startswith("xover: ")]
        if refused:
            return refused[-1]
        # nor its error: the rank's relayed stderr, not what horovodrun says after it ("non-zero status")
        logs = _relayed_rank_logs(launcher_lines)
    # torchrun on several nodes: each node's verdict names a local rank of its own, not told apart here
    verdict = launcher_verdict(launcher_lines) if one_launcher else None
    blamed = _blamed(verdict, logs, _torchrun_failures(launcher_lines) if one_launcher else [])
    if blamed is None:
        if launcher_code is not None and launcher_code < 0:
            return f"the launcher was {how_it_ended(launcher_code)} before any rank failed"
        return "\n".join(launcher_tail[-lines:])
    if blamed.lines is None:
        return f"rank {blamed.rank}:\n{blamed.ended}"
    return f"rank {blamed.rank}:\n" + "\n".join(blamed.lines[-lines:])
