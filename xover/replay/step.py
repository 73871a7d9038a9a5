"""`xover simulate`: load a trace, replay it under each policy asked for, store each replay.

A simulation is an experiment of kind `simulate` (so `xover report` finds it as it finds a run, by id or
as the latest); each policy's replay is a row of `replays`, with its jobs and its utilisation over time.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from ..console import counted
from ..engines import DEFAULT_ENGINE, engine_named
from ..errors import Interrupted, XoverError, check_seconds, printable
from ..hints import xover_command
from ..hosts import parse_hosts
from ..links import Link
from ..plan.model import JobProfile
from ..plan.state import PLACEMENTS, Host
from ..plan.step import check_max_group, profiles_of_recipes
from ..plan.throughput import MURI_ALONE_FACTOR, MURI_FACTORS, InterleaveModel, ThroughputModel, XoverModel
from ..plan.trace import load_trace_csv
from ..recipes import load_recipe
from ..run.supervise import uninterrupted
from ..sharing import RunStatus
from ..store.models import Experiment, Replay, ReplayJob, ReplayUtilisation, utcnow
from ..store.queries import new_experiment_id
from ..store.session import Store, open_store
from ..turns.policies import DEFAULT_POLICY
from ..turns.policies import POLICIES as TURN_POLICIES
from .engine import ReplayOutcome, ReplayRules, replay
from .metrics import ReplaySummary, summarise, utilisation_over_time
from .policies import DEFAULT_POLICIES, POLICIES
from .traces import FORMATS, Trace, detect_format, load_trace

MODELS = ("xover", "interleave")
# What a replay takes for granted (`ReplayRules`), by name:
# xover - running jobs keep their devices; a (re)start costs a job its restart time once; best-fit placement;
# muri  - Muri's simulator: every event decides everything afresh and costs every running job its restart time,
#         a job alone runs 1.015x its trace's iteration, first-fit placement (Tiresias: by device count).
SEMANTICS = ("xover", "muri")
DRAWN_FORMATS = ("philly", "helios")  # traces that name no model: --assign draws each job's
CLUSTER_SPEC = re.compile(r"([0-9]{1,12})x([0-9]{1,12})", re.ASCII)  # more digits: more than any cluster
MAX_DEVICES = 10**6
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SimulateRequest:
    """What `xover simulate` was asked (see its options)."""

    trace: str
    fmt: str | None = None
    hosts: str | None = None
    cluster: str | None = None
    policies: Sequence[str] = DEFAULT_POLICIES
    model: str = "xover"
    factors: Sequence[float] = MURI_FACTORS
    semantics: str = "xover"
    placement: str | None = None
    max_group: int = 2
    min_gain: float = 0.05
    turn_policy: str = DEFAULT_POLICY
    profiles_csv: str | None = None
    link: Link | None = None  # --bandwidth: stored profiles taken on it
    engine: str = DEFAULT_ENGINE  # --engine: stored profiles taken under it
    assign: Sequence[str] = ()
    seed: int = 0
    restart_s: float = 0.0
    jobs: int | None = None
    # the options the user gave (as flags, e.g. "--factors"): one that does nothing for this trace or model is
    # refused rather than ignored
    given: frozenset[str] = frozenset()


@dataclass
class PolicyReplay:
    """One policy's replay: its figures, how long it took, what was not finished."""

    summary: ReplaySummary
    wall_s: float
    unfinished: list[str] = field(default_factory=list)


@dataclass
class Simulation:
    """What `xover simulate` did: the experiment it stored, the trace, the cluster, the model, each replay."""

    experiment_id: str
    trace: Trace
    hosts: list[Host]
    model: str
    settings: dict[str, Any]
    replays: list[PolicyReplay]

    def to_dict(self) -> dict[str, Any]:
        """`xover simulate --json`."""
        return {
            "experiment": self.experiment_id,
            "trace": self.trace.path,
            "format": self.trace.format,
            "jobs": len(self.trace.instances),
            "skipped": self.trace.skipped,
            "notes": self.trace.notes,
            "hosts": ",".join(f"{name}:{slots}" for name, slots in self.hosts),
            "devices": sum(slots for _, slots in self.hosts),
            "model": self.model,
            "settings": shown_settings(self.settings),
            "replays": [{**item.summary.to_json(), "wall_s": item.wall_s} for item in self.replays],
        }


Progress = Callable[[str, int, int | None], None]  # (policy or step, jobs done, jobs in all; None: not known yet)


def cluster_hosts(hosts: str | None, cluster: str | None) -> list[Host]:
    """The hosts of `-H h1:8,h2:8` or `--cluster 8x8` (8 hosts of 8 devices, named n0..n7)."""

    if bool(hosts) == bool(cluster):
        raise XoverError(
            "say which cluster to replay on: --cluster HOSTSxDEVICES (e.g. 8x8) or -H h1:8,h2:8"
            + (", not both" if hosts else "")
        )
    if hosts:
        parsed = parse_hosts(hosts)
    else:
        assert cluster is not None
        match = CLUSTER_SPEC.fullmatch(cluster.strip())
        if match is None or int(match[1]) < 1 or int(match[2]) < 1:
            raise XoverError(
                f"--cluster {printable(cluster)}: give HOSTSxDEVICES, e.g. 8x8 (8 hosts of 8 devices each)"
            )
        if int(match[1]) * int(match[2]) > MAX_DEVICES:  # before a list of a billion hosts is built
            raise XoverError(f"the cluster has more than {MAX_DEVICES:,} devices: give a smaller one")
        parsed = [(f"n{index}", int(match[2])) for index in range(int(match[1]))]
    if sum(slots for _, slots in parsed) > MAX_DEVICES:
        raise XoverError(f"the cluster has more than {MAX_DEVICES:,} devices: give a smaller one")
    return parsed


def check_request(request: SimulateRequest) -> None:
    """Every option checked before the trace is read: one line naming the option and what to give."""

    if request.fmt is not None and request.fmt not in FORMATS:
        raise XoverError(f"--format {printable(request.fmt)}: choose {', '.join(FORMATS)}")
    unknown = [name for name in request.policies if name not in POLICIES]
    if unknown or not request.policies:
        raise XoverError(f"--policy {','.join(request.policies)}: choose among {', '.join(POLICIES)} (or all)")
    twice = sorted({name for name in request.policies if request.policies.count(name) > 1})
    if twice:  # each would be replayed and shown twice
        raise XoverError(f"--policy {','.join(request.policies)}: {', '.join(twice)} named twice; name each once")
    if request.model not in MODELS:
        raise XoverError(f"--model {printable(request.model)}: choose {' or '.join(MODELS)}")
    if request.semantics not in SEMANTICS:
        raise XoverError(f"--semantics {printable(request.semantics)}: choose {' or '.join(SEMANTICS)}")
    if request.placement is not None and request.placement not in PLACEMENTS:
        raise XoverError(f"--placement {printable(request.placement)}: choose {', '.join(PLACEMENTS)}")
    if request.turn_policy not in TURN_POLICIES:
        raise XoverError(f"--turn-policy {printable(request.turn_policy)}: choose {' or '.join(TURN_POLICIES)}")
    if not request.factors or any(not math.isfinite(f) for f in request.factors):
        raise XoverError("--factors: give the factors for 2, 3, ... jobs as numbers >= 1, e.g. 1.33,1.5,1.37")
    below = [f for f in request.factors if f < 1]
    if below:  # a group would run faster than its jobs' resources allow (1e-300: in no time)
        raise XoverError(
            f"--factors {','.join(f'{f:g}' for f in request.factors)}: {below[0]:g} is below 1: a factor is charged "
            "over a group's ideal interleaved iteration, the shortest its jobs' data, GPU and network times allow, "
            "so below 1 a group would run faster than possible; give numbers >= 1, e.g. 1.33,1.5,1.37"
        )
    check_max_group(request.max_group, alone="replays with nobody sharing")
    if request.model == "interleave" and request.max_group > len(request.factors) + 1:
        raise XoverError(
            f"--max-group {request.max_group}: --factors gives factors up to groups of {len(request.factors) + 1}; "
            "give one per group size"
        )
    # a group of K jobs is at most K times as fast as its jobs apart (each at most as fast as alone): a gain of
    # K - 1; a larger --min-gain forms no group (1e308 was reported as "at least inf% gain"), and 5 is 5% mistyped
    size = max(request.max_group, 2)
    if not (math.isfinite(request.min_gain) and 0 <= request.min_gain <= size - 1):
        raise XoverError(
            f"--min-gain {request.min_gain:g}: give a number from 0 to {size - 1} (0.05: 5% better than apart; a "
            f"group of {size} jobs is at most {size} times as fast as its jobs apart, a gain of {size - 1})"
        )
    check_seconds("--restart-s", request.restart_s, zero=True)
    if request.profiles_csv and request.link is not None:  # as `xover plan` says it
        raise XoverError("--bandwidth picks stored profiles of recipes; a --profiles file carries its own times")
    engine_named(request.engine)
    if request.profiles_csv and "--engine" in request.given:
        raise XoverError("--engine picks stored profiles of recipes; a --profiles file carries its own times")
    if not 0 <= request.seed <= MAX_SEED:  # random.seed(-1) draws as seed 1; one of 4,000 digits is a typo
        shown = str(request.seed) if len(str(request.seed)) <= 40 else f"{str(request.seed)[:40]}..."
        raise XoverError(f"--seed {shown}: give a whole number from 0 to {MAX_SEED}")
    if request.jobs is not None and request.jobs < 1:
        raise XoverError(f"--jobs {request.jobs}: give how many of the trace's first jobs to replay, >= 1")


def profile_lookup(
    db: str | None, profiles_csv: str | None, link: Link | None, engine: str = DEFAULT_ENGINE
) -> Callable[[str], JobProfile | None]:
    """How a model name becomes a profile: a row of the profiles CSV (`xover plan --profiles`' format), or
    the newest stored profile of the recipe of that name under `engine` (at --bandwidth, or its one link
    rate)."""
    if profiles_csv:
        by_name = {profile.name: profile for profile in load_trace_csv(profiles_csv)}
        return by_name.get
    found: dict[str, JobProfile | None] = {}

    def stored(name: str) -> JobProfile | None:
        if name not in found:
            jobs, _, _, _ = profiles_of_recipes(db, [load_recipe(name)], link, engine=engine)
            found[name] = jobs[0]
        return found[name]

    return stored


def model_for(request: SimulateRequest, trace: Trace) -> ThroughputModel:
    """The throughput model asked for, knowing the trace's iterations alone where it gives them."""
    if request.model == "xover":
        return XoverModel(request.turn_policy)
    alone = {job.name: job.iteration_ms for job in trace.instances if job.iteration_ms is not None}
    return InterleaveModel(tuple(request.factors), alone_factor(request), alone)


def alone_factor(request: SimulateRequest) -> float:
    """How much slower than its trace's iteration a job runs alone (Muri's simulator: 1.015)."""
    return MURI_ALONE_FACTOR if request.semantics == "muri" else 1.0


def rules_for(request: SimulateRequest, policy: str) -> ReplayRules:
    """The replay's rules for one policy under the semantics asked for."""
    if request.semantics == "muri":
        placement = request.placement or ("anywhere" if POLICIES[policy].order == "attained-service" else "first-fit")
        reschedule, restart = "repack", "every-event"
    else:
        placement, reschedule, restart = request.placement or "best-fit", "keep", "on-start"
    return ReplayRules(
        placement=placement,
        reschedule=reschedule,
        restart=restart,
        alone_factor=alone_factor(request),
        max_group=request.max_group,
        min_gain_margin=request.min_gain,
    )


def check_options_apply(request: SimulateRequest, fmt: str) -> None:
    """Each option given does something for this trace's format and this model: one that would be ignored
    (--factors under --model xover, --assign for a trace that names its models) is one line instead."""
    unused = {
        "--factors": "interleave" != request.model and "only --model interleave charges factors",
        "--turn-policy": "xover" != request.model and "only --model xover predicts turns under a policy",
        "--assign": fmt not in DRAWN_FORMATS
        and f"a {fmt} trace names each job's model; only Philly's and Helios' need them drawn",
        "--seed": "--assign" not in request.given and "it seeds --assign's draw of models; give --assign too",
        "--profiles": fmt == "muri" and "a Muri trace carries each job's times",
        "--bandwidth": fmt == "muri" and "a Muri trace carries each job's times",
        "--engine": fmt == "muri" and "a Muri trace carries each job's times",
        "--restart-s": fmt == "muri" and "a Muri trace gives each job's restart time",
    }
    for flag, why in unused.items():
        if flag in request.given and why:
            raise XoverError(f"{flag} does nothing here: {why}")


def shown_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A simulation's settings as its outputs show them: without the whole paths of its inputs (kept in the store
    only so that a report is never written over them; a shared report need not carry a home folder)."""
    return {key: value for key, value in settings.items() if key != "inputs"}


def simulate(db: str | None, request: SimulateRequest, command: str, progress: Progress | None = None) -> Simulation:
    """Replay the trace under each policy, store the simulation, and return it."""
    check_request(request)
    hosts = cluster_hosts(request.hosts, request.cluster)
    check_options_apply(request, request.fmt or detect_format(request.trace))
    lookup = profile_lookup(db, request.profiles_csv, request.link, request.engine)
    trace = load_trace(
        request.trace,
        request.fmt,
        profiles=lookup,
        assign=request.assign,
        seed=request.seed,
        restart_s=request.restart_s,
        limit=request.jobs,
        progress=None if progress is None else lambda done, total: progress(READING, done, total),
    )
    devices = sum(slots for _, slots in hosts)
    too_big = [job for job in trace.instances if job.gpus > devices]
    if too_big:
        most = max(job.gpus for job in too_big)
        raise XoverError(
            f"{trace.path}: job {too_big[0].name} needs {too_big[0].gpus} devices and the cluster has {devices} "
            f"({counted(len(too_big), 'such job')}): replay on a bigger cluster"
            + (f" (the largest job needs {most})" if len(too_big) > 1 and most != too_big[0].gpus else "")
        )
    store = open_store(db)  # one that cannot be opened, or written, is said before the replay (minutes), not after it
    store.check_writable()
    model = model_for(request, trace)
    settings = {
        # what it was made from, absolute: a report is never written over them (the trace column keeps the path given)
        "inputs": {
            "trace": str(Path(request.trace).absolute()),
            "profiles": str(Path(request.profiles_csv).absolute()) if request.profiles_csv else None,
        },
        "semantics": request.semantics,
        "model": request.model,
        "factors": list(request.factors) if request.model == "interleave" else None,
        "max_group": request.max_group,
        "min_gain": request.min_gain,
        "turn_policy": request.turn_policy if request.model == "xover" else None,
        "restart_s": request.restart_s,
        "seed": request.seed,
    }
    replays: list[tuple[str, ReplayOutcome, float, ReplayRules]] = []
    for name in request.policies:
        rules = rules_for(request, name)
        report = _reporter(progress, name, len(trace.instances))
        started = time.perf_counter()
        try:
            outcome = replay(trace.instances, hosts, POLICIES[name], model, rules, report)
        except ValueError as error:
            raise XoverError(f"{trace.path}: {error}") from None
        replays.append((name, outcome, time.perf_counter() - started, rules))
    experiment_id = new_experiment_id()
    try:
        report = _reporter(progress, STORING, sum(len(outcome.jobs) for _, outcome, _, _ in replays))
        with uninterrupted():  # Ctrl-C or SIGTERM while it is written takes effect once it is written whole
            store_simulation(store, experiment_id, trace, hosts, model, settings, replays, command, report)
    except Interrupted:
        raise Interrupted(stored_words(experiment_id)) from None
    return Simulation(
        experiment_id,
        trace,
        hosts,
        model.describe(),
        settings,
        [PolicyReplay(summarise(outcome), wall, outcome.unfinished) for _, outcome, wall, _ in replays],
    )


# the bar of a long trace being read (a 117,000-job Philly log: 6 s; `traces.LONG_TRACE_BYTES`), in its entries
READING = "reading"
# the bar of the replays' jobs being stored (a 117,000-job log under six policies: tens of seconds, said by nothing)
STORING = "storing"


def _reporter(progress: Progress | None, policy: str, total: int) -> Callable[[int], None] | None:
    if progress is None:
        return None
    return lambda done: progress(policy, done, total)


def stored_words(experiment_id: str) -> str:
    """What an interrupt after the simulation was stored leaves: the experiment, whole."""
    return f"the simulation was stored whole, as experiment {experiment_id} ({xover_command('report', experiment_id)})"


def store_simulation(
    store: Store,
    experiment_id: str,
    trace: Trace,
    hosts: list[Host],
    model: ThroughputModel,
    settings: dict[str, Any],
    replays: list[tuple[str, ReplayOutcome, float, ReplayRules]],
    command: str,
    report: Callable[[int], None] | None = None,
) -> None:
    """The simulation as experiment `experiment_id` (kind simulate) and its replays, jobs and utilisation;
    `report` is told the jobs stored so far after each replay's."""
    spec = ",".join(f"{name}:{slots}" for name, slots in hosts)
    try:
        with store.session() as session, session.begin():
            session.add(
                Experiment(
                    id=experiment_id,
                    kind="simulate",
                    command=command,
                    status=RunStatus.FINISHED,
                    hosts=spec,
                    ended_at=utcnow(),
                )
            )
            session.flush()
            tell = report or (lambda _done: None)
            done = 0
            tell(done)
            for name, outcome, wall, rules in replays:
                row = _replay_row(experiment_id, name, outcome, wall, rules, trace, spec, model, settings)
                session.add(row)
                session.flush()
                _store_jobs_and_utilisation(session, row.id, outcome)
                done += len(outcome.jobs)
                tell(done)
    finally:
        store.close()


def _replay_row(
    experiment_id: str,
    name: str,
    outcome: ReplayOutcome,
    wall: float,
    rules: ReplayRules,
    trace: Trace,
    spec: str,
    model: ThroughputModel,
    settings: dict[str, Any],
) -> Replay:
    """One policy's replay as its row: its settings and summary."""
    summary = summarise(outcome)
    return Replay(
        experiment_id=experiment_id,
        policy=name,
        model=model.describe(),
        trace=trace.path,
        trace_format=trace.format,
        hosts=spec,
        devices=outcome.devices,
        settings={
            **settings,
            "placement": rules.placement,
            "reschedule": rules.reschedule,
            "restart": rules.restart,
            "alone_factor": rules.alone_factor,
            "skipped": trace.skipped,
            "notes": trace.notes,
        },
        jobs=summary.jobs,
        finished=summary.finished,
        avg_jct_s=_number(summary.avg_jct_s),
        median_jct_s=_number(summary.median_jct_s),
        p99_jct_s=_number(summary.p99_jct_s),
        makespan_s=_number(summary.makespan_s),
        avg_queue_s=_number(summary.avg_queue_s),
        utilisation=_number(summary.utilisation),
        grouped_share=_number(summary.grouped_share),
        by_sharing=summary.by_sharing,
        events=summary.events,
        preemptions=summary.preemptions,
        wall_s=wall,
    )


def _store_jobs_and_utilisation(session: Any, replay_id: int, outcome: ReplayOutcome) -> None:
    """A replay's jobs and its utilisation over time, inserted in bulk."""
    session.execute(
        insert(ReplayJob),
        [
            {
                "replay_id": replay_id,
                "name": job.name,
                "kind": job.kind,
                "gpus": job.gpus,
                "arrival_s": job.arrival_s,
                "start_s": _number(job.start_s),
                "end_s": _number(job.end_s),
                "work_s": job.work_s,
                "preemptions": job.preemptions,
                "grouped_s": job.grouped_s,
            }
            for job in outcome.jobs
        ],
    )
    points = utilisation_over_time(outcome)
    if points:
        session.execute(insert(ReplayUtilisation), [{"replay_id": replay_id, **point.__dict__} for point in points])


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None
