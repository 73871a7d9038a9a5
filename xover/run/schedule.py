"""Scheduling: what starts when, and where.

A *unit* is jobs started together on the same devices in one mode: a group under crossover or
concurrent, or one job alone (sequential, solo, profile). Units start in order, each as soon as its
devices are free of every unit running or waiting before it, so a later unit on other devices does
not wait: the groups of a plan on disjoint devices and hosts run side by side, as the plan predicts.
Comparison runs (several modes) keep each unit alone on the machine, so that no measurement shares
the cores with another.

One loop supervises every running unit: it stores metrics as they come, notices ended jobs (their
partners' turns are withdrawn at once), tears a unit down when its last job ends, and stops
everything on Ctrl-C, SIGTERM or --timeout, leaving every row in a terminal state. An adaptive unit's
controller (adaptive.py) rides on the same loop: it gets its jobs' records and ends, and is ticked each
time round.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import queue
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from ..config import results_unwritable, xover_pythonpath
from ..console import print_notice
from ..devices import gpu_ids, script_gpu_env
from ..engines import ENGINES, HOROVOD
from ..errors import StartFailed, XoverError
from ..hints import xover_command
from ..hosts import Device, is_local
from ..links import HOST, Link
from ..plan.decide import ready_to_start
from ..processes import sweep
from ..records import MetricRecord, TurnsLostRecord, checked_record
from ..redact import without_values
from ..settings import (
    CUDA_BY_LOCAL_RANK_VARIABLE,
    DEVICES_VARIABLE,
    EXPERIMENT_VARIABLE,
    JOB_DIR_PLACEHOLDER,
    JOB_DIR_VARIABLE,
    JOB_VARIABLE,
    LINK_PRIORITY_VARIABLE,
    METRIC_TOKEN_VARIABLE,
    RUN_VARIABLE,
    SCRIPT_STEPS_VARIABLE,
    SECRET_VARIABLES,
    TURN_SLOT_VARIABLE,
    TURN_SOCKET_VARIABLE,
    settings,
)
from ..sharing import RunStatus, adapts, turn_taking
from ..store.session import stopped_by_the_store
from ..turns.credentials import metrics_credentials
from ..turns.policies import LINK_BAND_PRIORITIES, make_policy
from ..turns.protocol import FREE, TURNS
from ..turns.service import ServedTurns, TurnService
from .adaptive import AdaptiveController, AdaptiveSettings, MeasuredBefore, Segment
from .external.torchrun import remove_kept, take_sent
from .jobs import JobSpec
from .mps import running_under_mps
from .ranks import ranks_of
from .reach import prefix_to_reach, refuse_unshapable, run_link, shaped_link
from .record import Recorder, failure_reason, failure_summary, shim_refusal
from .sinks import GroupLabels, JobLabels, MetricSink, deliver
from .supervise import (
    IgnoredLine,
    Interrupted,
    JobExit,
    LaunchedJob,
    TimedOut,
    uninterrupted,
)


@dataclass
class Unit:
    """Jobs started together on the same devices in one mode."""

    jobs: list[JobSpec]
    mode: str
    group: int | None = None
    policy: str | None = None  # crossover: the turn policy
    on_done: Callable[[Unit], None] | None = None  # e.g. learn a job's traits from its run alone
    # The slot whose end ends the unit; the others only share its devices (a profile's reference
    # partner) and are then stopped, their runs recorded as `stopped`. None: every job runs to its end.
    ends_with: int | None = None
    runs: list[tuple[int, Path]] = field(default_factory=list)
    launched: dict[int, LaunchedJob] = field(default_factory=dict)
    exited: set[int] = field(default_factory=set)
    ended: bool = False  # its end is decided: what its stopped jobs post later ends nothing
    network: Any = None
    turns: TurnService | None = None
    prior: str | None = None  # adaptive: the state it starts in (turns or free; None: free)
    measured: MeasuredBefore | None = None  # adaptive: both states as measured on these jobs before
    adaptive: AdaptiveController | None = None

    @property
    def devices(self) -> set[Device]:
        """Every device the unit's jobs use."""
        return set().union(*(job.device_set for job in self.jobs))

    @property
    def run_ids(self) -> list[int]:
        """The runs recorded for its jobs, in the jobs' order."""
        return [run_id for run_id, _ in self.runs]

    @property
    def crossover(self) -> bool:
        """Whether its jobs take turns, or may: crossover or adaptive, with a partner to take them with."""
        return turn_taking(self.mode) and len(self.jobs) > 1

    @property
    def turn_policy(self) -> str | None:
        """The policy its turns are taken under (what its runs record and its spec names); None without turns."""
        return self.policy if self.crossover else None


@dataclass
class RunContext:
    """What every unit of one experiment shares."""

    recorder: Recorder
    experiment_id: str
    results_dir: Path
    link: Link = HOST  # the run's link: a shaped loopback is shaped around each unit
    sinks: list[MetricSink] = field(default_factory=list)  # the store's first (run/sinks.py)
    timeout_s: float | None = None
    reaper: Any = None  # told about every other host the run reaches
    lease: dict[str, float] | None = None  # turn lease settings (tests shorten them)
    server_nice: int | None = None  # the turn servers' nice value (None: their default)
    link_bands: bool = True  # crossover: the policy orders the link (XOVER_LINK_BANDS)
    adaptive: AdaptiveSettings | None = None  # how adaptive units probe (XOVER_ADAPTIVE; None: the defaults)


# the errors of a write that names no file (a buffered write, a close): a full disk, a quota, a read-only mount
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES, errno.EPERM})


def run_tag(experiment_id: str, run_id: int) -> str:
    """What marks a run's processes (XOVER_RUN): run ids are per store, experiment ids are not."""
    return f"{experiment_id}:{run_id}"


def worker_env(
    context: RunContext,
    job: JobSpec,
    run_id: int,
    slot: int | None,
    turns: TurnService | None,
    link_band: int | None = None,
    metric_token: str | None = None,
    job_dir: Path | None = None,
) -> dict[str, str]:
    """The environment of a job's workers: what the runtime reads (devices, turns, link band, metric token),
    the job file's own variables, and no secret of this process's (launchers copy it onto other hosts)."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        DEVICES_VARIABLE: job.devices_env(),
        JOB_VARIABLE: job.name,
        EXPERIMENT_VARIABLE: context.experiment_id,
        RUN_VARIABLE: run_tag(context.experiment_id, run_id),
    }
    # Workers never open the store: its URL (a password, perhaps) stays out of their environment, which
    # launchers put on other hosts' command lines (horovodrun over ssh).
    for secret in SECRET_VARIABLES:
        env.pop(secret, None)
    env.pop(SCRIPT_STEPS_VARIABLE, None)
    env.pop(CUDA_BY_LOCAL_RANK_VARIABLE, None)
    env.pop(JOB_DIR_VARIABLE, None)
    if job_dir is not None:
        env[JOB_DIR_VARIABLE] = str(job_dir)
    if job.script:
        # the job file's own variables, `{job_dir}` in them this run's folder (as in the script's arguments)
        env.update({name: _with_job_dir(value, job_dir) for name, value in job.recipe.env.items()})
        if job.recipe.iterations:
            env[SCRIPT_STEPS_VARIABLE] = str(job.recipe.iterations)
        if len(job.devices) == 1 and all(is_local(host) for host in job.devices):
            # on GPUs, each rank sees the GPU of its own device as cuda:LOCAL_RANK (across hosts: GPUs 0..n-1)
            env.update(script_gpu_env(next(iter(job.devices.values())), gpu_ids()))
    env.pop(METRIC_TOKEN_VARIABLE, None)
    if metric_token is not None:
        env[METRIC_TOKEN_VARIABLE] = metric_token  # the runtime puts it in every record (xover/records.py)
    env.pop(TURN_SOCKET_VARIABLE, None)
    env.pop(LINK_PRIORITY_VARIABLE, None)
    # Horovod negotiates between ranks every cycle (1 ms by default) even when idle; on devices that
    # co-located jobs share, that burns cycles a partner needs; 5 ms measured best (docs/measurements.md,
    # *Figures behind the design*: *Horovod's cycle time*). A user's own wins; only Horovod's ranks read it (a
    # torch job's environment is left as torchrun would have it).
    if job.engine == HOROVOD:
        env.setdefault("HOROVOD_CYCLE_TIME", "5")
    if turns is not None:
        env.update({TURN_SOCKET_VARIABLE: turns.socket_template, TURN_SLOT_VARIABLE: str(slot)})
    if link_band is not None:
        env[LINK_PRIORITY_VARIABLE] = str(LINK_BAND_PRIORITIES[link_band])
    # launchers and workers must find this xover even when it is not installed (tests, a checkout)
    env["PYTHONPATH"] = xover_pythonpath(env.get("PYTHONPATH"))
    return env


def _with_job_dir(value: str, job_dir: Path | None) -> str:
    return value.replace(JOB_DIR_PLACEHOLDER, str(job_dir)) if job_dir is not None else value


class CheckedJob(LaunchedJob):
    """A run's launchers whose metric records count only with the run's token and the runtime's shape:
    a training script's output is not trusted (a line it prints may look like ours). A record refused
    goes on as an IgnoredLine with the reason, for the scheduler to say once; a JobExit comes only from
    the launchers' processes, never from their output."""

    def __init__(
        self,
        run_id: int,
        commands: list[list[str]],
        env: dict[str, str],
        log_dir: Path,
        events: queue.Queue[tuple[int, Event]],
        token: str,
        secrets: Sequence[str] = (),
    ) -> None:
        self.token = token  # before the launchers start: their output is read from then on
        super().__init__(run_id, commands, env, log_dir, events, [*secrets, token])

    def _record(self, record: dict[str, Any]) -> None:
        checked = checked_record(record, self.token)
        self.events.put((self.run_id, IgnoredLine(checked) if isinstance(checked, str) else checked))


Event = MetricRecord | IgnoredLine | JobExit  # what the launchers' relay threads post, with a run id


class Scheduler:
    """Runs units on their devices, one loop supervising them all: metrics to the sinks, ended jobs noticed,
    every run left in a terminal state however the loop stops."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.events: queue.Queue[tuple[int, Event]] = queue.Queue()
        self.owner: dict[int, tuple[Unit, int]] = {}  # run id -> (its unit, its slot)
        self.jobs: dict[int, JobLabels] = {}  # run id -> whose records its are
        self.ignored: dict[int, int] = {}  # run id -> records of its output refused (xover/records.py)
        self.turns_lost: set[int] = set()  # runs a rank of which gave up crossover turns
        self.deadline: float | None = None  # time.monotonic() of --timeout, while `run` runs
        # a job's name (a copy's, name#2: its first's) -> why each later run of it would fail the same way: its
        # shim refused it, or it failed alone before any run of it trained
        self.doomed: dict[str, str] = {}
        self.trained: set[str] = set()  # the jobs (copies as their first) a run of which ended cleanly

    # -- the loop -----------------------------------------------------------------------------
    def run(self, units: list[Unit], exclusive: bool) -> None:
        """Run the units, each as soon as its devices are free (`exclusive`: one at a time, in order), until
        all have ended; Ctrl-C, SIGTERM or --timeout stop every one still running."""
        running: list[Unit]
        pending, running = list(units), []
        deadline = time.monotonic() + self.context.timeout_s if self.context.timeout_s else None
        self.deadline = deadline  # a unit's start (turn servers, torchrun's ssh) stops at it too
        try:
            while pending or running:
                self._start_ready(pending, running, exclusive)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimedOut()
                wait = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
                for unit in self._handle(self._batch(wait)):
                    self._finish(unit, running)
                self._skip_doomed(pending)
                self._adapt(running)
        except (Interrupted, TimedOut, KeyboardInterrupt) as stop:
            status = RunStatus.TIMEOUT if isinstance(stop, TimedOut) else RunStatus.INTERRUPTED
            with uninterrupted():
                self._stop_all(running, status)
                self._never_started(pending, status)
            raise
        except BaseException as error:
            # a store that refused a write (a full disk): the runs say so, where it still takes that
            why = stopped_by_the_store(error.orig) if isinstance(error, DBAPIError) else None
            with uninterrupted():
                self._stop_all(running, RunStatus.FAILED, why)
            raise

    def _start_ready(self, pending: list[Unit], running: list[Unit], exclusive: bool) -> None:
        busy = set().union(*(unit.devices for unit in running))
        # the planning core's start rule (plan/decide.py): earlier units keep their place in the order
        ready = ready_to_start([frozenset(unit.devices) for unit in pending], busy, exclusive, bool(running))
        for unit in [pending[index] for index in ready]:
            # running before it starts: whatever of it has started is stopped with the rest, however the
            # start ends (listed after its start, an interrupt in between left it out: never stopped)
            running.append(unit)
            pending.remove(unit)
            try:
                self._start(unit)
            except BaseException as error:
                with uninterrupted():
                    self._stop_unit(unit, *stopped_as(error))
                    running.remove(unit)
                if isinstance(error, XoverError) and not isinstance(error, StartFailed) and unit.runs:
                    raise StartFailed(str(error)) from None  # its runs are kept, failed: not refused input
                raise

    def _batch(self, wait: float) -> list[tuple[int, Event]]:
        try:
            batch = [self.events.get(timeout=wait)]
        except queue.Empty:
            return []
        until = time.monotonic() + 0.2  # store metrics in batches: one transaction per 0.2 s
        while time.monotonic() < until:
            try:
                batch.append(self.events.get(timeout=max(0.0, until - time.monotonic())))
            except queue.Empty:
                break
        return batch

    def _handle(self, batch: list[tuple[int, Event]]) -> list[Unit]:
        """Records to the sinks (the store first), then the exits of the batch: the units that ended."""
        records: list[tuple[JobLabels, MetricRecord]] = []
        exits: list[tuple[int, JobExit]] = []
        for run_id, event in batch:
            if isinstance(event, IgnoredLine):
                self._ignore(run_id, event)
            elif isinstance(event, JobExit):
                exits.append((run_id, event))
            else:
                records.append((self.jobs[run_id], event))
        if records:
            self._to_sinks(lambda sink: sink.received(records))
            now = time.time()
            for job, record in records:
                unit, slot = self.owner[job.run_id]
                if unit.adaptive is not None:
                    self._guarded(unit, unit.adaptive.observe, slot, record, now)
        for job, record in records:
            if isinstance(record, TurnsLostRecord) and job.run_id not in self.turns_lost:
                self.turns_lost.add(job.run_id)  # said once per run; the record keeps each
                _say(
                    f"{job.label}: a rank gave up crossover turns on device {record.device} "
                    f"({record.why}); it trains on without them, and its record and report say so"
                )
        return [unit for run_id, exit in exits for unit in self._exited(run_id, exit.code)]

    def _exited(self, run_id: int, code: int) -> list[Unit]:
        unit, slot = self.owner[run_id]
        log_dir = dict(unit.runs)[run_id]
        error = failure_summary(log_dir, unit.launched[run_id].tail, launcher_code=code) if code != 0 else None
        if error is not None:  # its own lines: argparse's 'unrecognized arguments: --api-key KEY' repeats a secret
            error = without_values(error, unit.launched[run_id].secrets)
        problem = shim_refusal(error)
        job = _copy_of(unit.jobs[slot].name)
        if code == 0:
            self.trained.add(job)
        elif problem is not None and job in self.trained:
            # the same script trained in an earlier run: what changed is what it found on disk
            hint = (
                f"it trained in an earlier run: resumed from what that run left? give each run its own folder: "
                f"`{JOB_DIR_PLACEHOLDER}` in its arguments"
            )
            error, problem = f"{error}; {hint}", f"{problem}; {hint}"
        status = self.context.recorder.job_exited(run_id, code, error)
        if problem is not None:
            self.doomed.setdefault(job, f"refused ({problem})")
        elif code != 0 and len(unit.jobs) == 1 and job not in self.trained:
            # the script's own failure with nothing beside it (a bug, a missing file, a bad argument): its
            # other runs would fail the same way, and a partner would train beside it for nothing
            self.doomed.setdefault(job, f"failed alone ({failure_reason(error) or f'exit code {code}'})")
        self._to_sinks(lambda sink: sink.job_ended(self.jobs[run_id], status))
        unit.exited.add(run_id)
        if unit.turns is not None:
            unit.turns.withdraw(slot)  # its partners never wait for it again
        if unit.adaptive is not None:
            self._guarded(unit, unit.adaptive.job_ended, slot, time.time())
        if not unit.ended and (unit.exited >= set(unit.run_ids) or slot == unit.ends_with):
            unit.ended = True
            return [unit]
        return []

    def _never_started(self, pending: list[Unit], status: RunStatus) -> None:
        """The units still to start when the run was stopped, each recorded as not started, so that the report
        (and `report all`) tell what was asked and never ran, not a shorter experiment."""
        why = "the run's --timeout came first" if status == RunStatus.TIMEOUT else "the run was stopped first"
        for unit in pending:
            self.context.recorder.record_not_started(
                unit.group, unit.mode, unit.turn_policy, [job.name for job in unit.jobs], why, stopped_first=True
            )

    def _skip_doomed(self, pending: list[Unit]) -> None:
        """The units still to start with a job whose script its shim refused, or that failed alone before it
        ever trained, are never started: each would fail the same way (a comparison's other modes, a plan's
        other units of it, a copy of it); each is recorded as not started, with why, for the report to say."""
        skipped = [unit for unit in pending if any(_copy_of(job.name) in self.doomed for job in unit.jobs)]
        if not skipped:
            return
        for unit in skipped:
            pending.remove(unit)
            doomed = sorted({_copy_of(job.name) for job in unit.jobs} & set(self.doomed))
            self.context.recorder.record_not_started(
                unit.group,
                unit.mode,
                unit.turn_policy,
                [job.name for job in unit.jobs],
                "; ".join(f"{name}: {self.doomed[name]}" for name in doomed),
            )
        names = sorted({_copy_of(job.name) for unit in skipped for job in unit.jobs} & set(self.doomed))
        # the jobs that lose their runs beside it, named: a partner that runs fine alone gets no shared run
        partners = sorted({_copy_of(job.name) for unit in skipped for job in unit.jobs} - set(self.doomed))
        _say(
            f"{'; '.join(f'{name}: {self.doomed[name]}' for name in names)}; "
            f"{len(skipped)} later run{'s' if len(skipped) > 1 else ''} with "
            f"{'them' if len(names) > 1 else 'it'} not started"
            + (
                f" (among them {' and '.join(partners)}'s runs beside {'them' if len(names) > 1 else 'it'})"
                if partners
                else ""
            )
        )

    def _adapt(self, running: list[Unit]) -> None:
        """Every adaptive unit running: its turn servers' switches handed to its controller, then a tick."""
        for unit in running:
            if unit.adaptive is None or unit.turns is None:
                continue
            while not unit.turns.switched.empty() and unit.adaptive is not None:
                self._guarded(unit, unit.adaptive.switched, *unit.turns.switched.get_nowait())
            if unit.adaptive is not None:
                self._guarded(unit, unit.adaptive.tick, time.time())

    def _guarded(self, unit: Unit, call: Callable[..., None], *args: Any) -> None:
        """A call into an adaptive unit's controller. One that fails is said once and the unit goes on in the
        state its turn servers are in, without its controller: the jobs train on, their math untouched."""
        try:
            call(*args)
        except Exception as error:
            unit.adaptive = None
            _say(f"group {unit.group}: adaptive's controller failed ({error!r}); the group goes on as it is")

    def _segment(self, unit: Unit, segment: Segment) -> None:
        """An adaptive unit's segment opened, was decided or closed: stored, and told to the sinks."""
        self.context.recorder.record_segment(unit.run_ids, unit.group, segment)
        labels = GroupLabels(self.context.experiment_id, unit.group, tuple(job.name for job in unit.jobs), unit.mode)
        shown = segment.to_json()
        self._to_sinks(lambda sink: sink.adaptive_segment(labels, shown))

    def _to_sinks(self, call: Callable[[MetricSink], None]) -> None:
        self.context.sinks[:] = deliver(self.context.sinks, call)

    def _ignore(self, run_id: int, event: IgnoredLine) -> None:
        """A record CheckedJob refused: said the first time for each run, counted after that."""
        self.ignored[run_id] = self.ignored.get(run_id, 0) + 1
        if self.ignored[run_id] == 1:
            _say(
                f"{self.jobs[run_id].label}: ignored a line of its output that looks like a metric record of "
                f"xover's but is not one of this run's ({event.reason}); the job's log keeps it"
            )

    def _say_ignored(self, unit: Unit) -> None:
        for run_id in unit.run_ids:
            if self.ignored.get(run_id, 0) > 1:
                _say(
                    f"{self.jobs[run_id].label}: ignored {self.ignored[run_id]} lines of its output that look like "
                    "metric records of xover's but are not this run's"
                )

    # -- a unit's life ------------------------------------------------------------------------
    def _start(self, unit: Unit) -> None:
        """Record the unit's runs, then start - each thing started the unit's before a signal can land, so
        that its teardown stops what it holds - its link, its turn servers (a unit that takes turns) and
        its jobs' launchers. Starting waits (a turn server's `ready`, torchrun's ssh calls) stay open to
        Ctrl-C: the unit stops them."""
        context = self.context
        hosts = sorted({host for job in unit.jobs for host in job.devices})
        remote = [host for host in hosts if not is_local(host)]
        prefix = prefix_to_reach(hosts)
        link = run_link(hosts, context.link)  # a shaped loopback across hosts is refused
        refuse_unshapable(link)  # before its runs are recorded: refused input keeps nothing
        if context.reaper is not None:
            for host in remote:
                context.reaper.add_host(host, prefix)
        self._record_runs(unit)
        with uninterrupted():
            unit.network = shaped_link(
                link.shaped_rate,
                {EXPERIMENT_VARIABLE: context.experiment_id},
                nodes=len(unit.devices),
            ).__enter__()
        link_bands = self._start_turns(unit, prefix) if unit.crossover else {}
        self._launch_jobs(unit, prefix, link_bands)
        context.recorder.mark_started(unit.run_ids)

    def _record_runs(self, unit: Unit) -> None:
        """The unit's runs, pending, and whose records each run's are."""
        context = self.context
        unit.runs = context.recorder.create_runs(
            unit.jobs, unit.mode, unit.group, unit.turn_policy, context.results_dir
        )
        for slot, (run_id, _) in enumerate(unit.runs):
            self.owner[run_id] = (unit, slot)
            job = unit.jobs[slot]
            self.jobs[run_id] = JobLabels(
                run_id, context.experiment_id, job.name, unit.mode, unit.group, unit.turn_policy, job.hosts
            )

    def _start_turns(self, unit: Unit, prefix: list[str]) -> dict[int, int]:
        """The unit's turn servers, one per host, under its policy and in its starting state (serving their
        figures where a sink wants them), and an adaptive unit's controller; returns each slot's band on the
        link, where the policy orders it."""
        context = self.context
        assert unit.policy is not None  # group_units makes each turn-taking unit with its policy
        traits = {slot: job.traits for slot, job in enumerate(unit.jobs) if job.traits is not None}
        link_bands = make_policy(unit.policy, traits).link_bands() if context.link_bands else {}
        served = None
        exporter = next((sink for sink in context.sinks if sink.wants_turn_servers), None)
        if exporter is not None:
            served = ServedTurns(
                context.experiment_id,
                "" if unit.group is None else str(unit.group),
                tuple(job.name for job in unit.jobs),
                # what Prometheus is told for the exporter holds for the turn servers it lists
                credentials=getattr(exporter, "credentials", None) or metrics_credentials(),
                ports=settings().turn_metrics_ports,
                address=settings().metrics_address,
            )
        unit.turns = TurnService(
            f"{context.experiment_id}-r{unit.run_ids[0]}",
            [job.devices for job in unit.jobs],
            unit.policy,
            traits,
            prefix,
            {EXPERIMENT_VARIABLE: context.experiment_id},
            context.lease,
            context.server_nice,
            deadline=self.deadline,
            served=served,
            start=False,  # the unit holds it first: a server started is one its teardown stops
            guard=uninterrupted,
            state=self._adaptive_start(unit),
        )
        unit.turns.start()
        self._announce_turn_servers(unit.turns)
        if adapts(unit.mode):
            config = context.adaptive or AdaptiveSettings.of(settings().adaptive)
            unit.adaptive = AdaptiveController(
                [job.name for job in unit.jobs],
                [job.np for job in unit.jobs],
                [job.traits.solo_iteration_s if job.traits else None for job in unit.jobs],
                unit.turns,
                functools.partial(self._segment, unit),
                config,
                prior=unit.prior,
                under_mps=running_under_mps(),
                now=time.time(),
                measured=unit.measured,
            )
        return link_bands

    def _launch_jobs(self, unit: Unit, prefix: list[str], link_bands: dict[int, int]) -> None:
        """Each job's launchers (its engine's command lines, run/ranks.py), with its workers' environment and
        spec, and a token that marks its metric records as its own."""
        context = self.context
        for slot, (job, (run_id, log_dir)) in enumerate(zip(unit.jobs, unit.runs)):
            token = secrets.token_hex(16)
            # every run of a script writes its outputs apart (the shim makes it on other hosts): a script that
            # resumes from its last checkpoint must not resume from another run's, nor two copies share one
            job_dir = (log_dir / "out").resolve() if job.script else None
            if job_dir is not None:
                with self._writing_results(job_dir):
                    job_dir.mkdir(parents=True, exist_ok=True)
            env = worker_env(context, job, run_id, slot, unit.turns, link_bands.get(slot), token, job_dir)
            spec_path = log_dir / "spec.json"
            spec = {
                "job": job.name,
                "mode": unit.mode,
                "policy": unit.turn_policy,
                "engine": job.engine,
                "runtime": ENGINES[job.engine].runtime_name,
            }
            with self._writing_results(spec_path):
                spec_path.write_text(json.dumps({**spec, "recipe": job.recipe.to_dict()}, indent=1))
            ranks = ranks_of(job.engine)
            # the ranks' own output, as they wrote it (a secret their error repeats too): its user's alone, as
            # torchrun keeps its folders; horovodrun's were readable by all (launcher.log has it masked)
            rank_logs = log_dir / "ranks"
            with self._writing_results(rank_logs):  # and the settings files its nodes here read, written in it
                rank_logs.mkdir(exist_ok=True)
                rank_logs.chmod(0o700)
                commands = [
                    unit.network.wrap(c)
                    for c in ranks.launch_commands(job, rank_logs, spec_path, env, prefix, self.deadline)
                ]
            with uninterrupted(), self._writing_results(log_dir):  # a launcher started is one the unit stops
                unit.launched[run_id] = CheckedJob(
                    run_id, commands, ranks.launch_env(job, env), log_dir, self.events, token, job.recipe.secrets
                )

    @contextlib.contextmanager
    def _writing_results(self, path: Path) -> Iterator[None]:
        """A write of a unit's start under the results folder (`path`: the file or folder written, or the folder
        written in), once its runs are recorded: an OSError of it (a full disk, a read-only mount) ends the start
        as StartFailed, one line saying what was not written, why and what to do, and the experiment kept, its
        runs failed. An OSError that names a file elsewhere (a launcher's program not found), or names none and
        is no write's (a fork refused), is left as it was."""
        try:
            yield
        except OSError as error:
            results = self.context.results_dir.resolve()
            named = Path(os.fsdecode(error.filename)).resolve() if isinstance(error.filename, (str, bytes)) else None
            if not (named.is_relative_to(results) if named is not None else error.errno in _WRITE_ERRORS):
                raise
            experiment_id = self.context.experiment_id
            raise StartFailed(
                f"{results_unwritable(named or path, error)}; every process was stopped, and experiment "
                f"{experiment_id} is recorded failed with its runs ({xover_command('report', experiment_id)})"
            ) from None

    def _adaptive_start(self, unit: Unit) -> str:
        """The state an adaptive unit's turn servers start in (its prior, XOVER_ADAPTIVE's start); turns else."""
        if not adapts(unit.mode):
            return TURNS
        return (self.context.adaptive or AdaptiveSettings.of(settings().adaptive)).start or unit.prior or FREE

    def _finish(self, unit: Unit, running: list[Unit]) -> None:
        with uninterrupted():  # out of `running` only once torn down: an interrupt in between stops it there
            sharing_only = [run_id for run_id in unit.run_ids if run_id not in unit.exited]  # Unit.ends_with
            if sharing_only:
                self.context.recorder.close_runs(sharing_only, RunStatus.STOPPED)
                for run_id in sharing_only:
                    self._to_sinks(functools.partial(_job_stopped, labels=self.jobs[run_id]))
            self._teardown(unit)
            running.remove(unit)
        self._say_ignored(unit)
        if unit.on_done is not None:
            unit.on_done(unit)

    def _teardown(self, unit: Unit) -> None:
        for job in unit.launched.values():
            if job.running():
                job.stop()
        # Workers that a launcher left behind go too: here (a launcher that exited before its
        # workers) and on other hosts (ssh gave them no terminal). The same ssh call removes there the files of
        # settings sent to a node that never read them (it never started, or never got that far): a secret no
        # longer left on another host, at no ssh call more than the sweep's.
        sent: dict[str, list[str]] = {}
        for _, log_dir in unit.runs:
            for host, names in take_sent(log_dir / "ranks").items():
                sent.setdefault(host, []).extend(names)
        remote = sorted({host for job in unit.jobs for host in job.devices if not is_local(host)} | set(sent))
        prefix = prefix_to_reach(remote) if remote else []
        sweep(
            RUN_VARIABLE,
            [run_tag(self.context.experiment_id, run_id) for run_id in unit.run_ids],
            remote,
            prefix,
            remove=sent,
        )
        for _, log_dir in unit.runs:  # the settings files of nodes that never started (and so never read them)
            remove_kept(log_dir / "ranks")
        if unit.adaptive is not None:
            if unit.turns is not None:
                while not unit.turns.switched.empty():
                    unit.adaptive.switched(*unit.turns.switched.get_nowait())
            unit.adaptive.close(time.time())
            unit.adaptive = None
        try:
            if unit.turns is not None:
                if unit.turns.served is not None:
                    self._to_sinks(functools.partial(_turn_servers_gone, unit=unit.turns.name))
                unit.turns.stop()
                self.context.recorder.record_turns(
                    unit.run_ids, unit.group, unit.turns.slot_statistics(), unit.turns.events
                )
                unit.turns = None
        finally:  # a store that refuses the turns' record (a full disk) leaves no shaped link behind
            if unit.network is not None:
                unit.network.__exit__(None, None, None)
                unit.network = None

    def _announce_turn_servers(self, turns: TurnService) -> None:
        endpoints = turns.endpoints()
        if endpoints:
            self._to_sinks(lambda sink: sink.turn_servers(turns.name, endpoints) if sink.wants_turn_servers else None)

    def _stop_unit(self, unit: Unit, status: str, error: str | None = None) -> None:
        for job in unit.launched.values():
            job.stop()
        try:
            self.context.recorder.close_runs(unit.run_ids, status, error)
        finally:  # a store that refuses the write (a full disk) leaves the rows to the experiment's end, not the unit
            self._teardown(unit)

    def _stop_all(self, running: list[Unit], status: str, error: str | None = None) -> None:
        refused: DBAPIError | None = None
        for unit in running:
            try:
                self._stop_unit(unit, status, error)
            except DBAPIError as failure:  # the store's (a full disk): every other unit is stopped all the same
                refused = refused or failure
        if refused is not None:
            raise refused


def stopped_as(error: BaseException) -> tuple[str, str | None]:
    """How the runs of a unit whose start `error` cut short end: (status, error to record). Ctrl-C, SIGTERM,
    scancel or a Slurm time limit (Interrupted) is an interrupt, not a failure of the start: `interrupted`,
    which the account of its job by a launcher's scheduler corrects later (Recorder.launcher_job_ended); --timeout
    is `timeout`."""
    if isinstance(error, (Interrupted, KeyboardInterrupt)):
        return RunStatus.INTERRUPTED, None
    if isinstance(error, TimedOut):
        return RunStatus.TIMEOUT, None
    if isinstance(error, DBAPIError):  # the driver's words, not SQLAlchemy's repr with its statement and parameters
        return RunStatus.FAILED, stopped_by_the_store(error.orig)
    return RunStatus.FAILED, str(error) if isinstance(error, XoverError) else f"could not start: {error!r}"


def _turn_servers_gone(sink: MetricSink, unit: str) -> None:
    """A unit's turn servers stop: nothing to scrape there any more."""
    if sink.wants_turn_servers:
        sink.turn_servers(unit, [])


def _job_stopped(sink: MetricSink, labels: JobLabels) -> None:
    """A job stopped with its unit (it only shared the devices of the job whose end ended the unit)."""
    sink.job_ended(labels, RunStatus.STOPPED)


def _copy_of(name: str) -> str:
    """The job a copy of a job is (name#2: name): the same script, refused the same way."""
    return name.split("#", 1)[0]


def _say(message: str) -> None:
    print_notice(message)
