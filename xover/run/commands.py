"""The library behind `xover train` and `xover run` (the experiment they share with `xover profile`
is in experiment.py, the units a group runs as in units.py).

    train_recipe(...) one recipe alone
    run_groups(...)   groups in modes (RunOptions): a comparison (each unit alone on the machine, one after another)
                      or a plan's real schedule (crossover or concurrent only: groups side by side)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..analysis import compare, experiment_jobs
from ..console import counted, errors, print_notice
from ..errors import Interrupted, TimedOut, XoverError, check_seconds
from ..links import Link
from ..plan import Plan
from ..plan.step import store_plan
from ..recipes import load_recipe, with_overrides
from ..results import RunOutcome, RunResult, kept_plan_lengths, measured_makespan_s, predicted_in_way
from ..scripts import detect_scripts_engine, detection_note
from ..settings import CPU_ONLY_VARIABLE, settings
from ..sharing import ALL, PLANNED, Mode, modes_of, turn_taking
from ..store.models import Experiment as ExperimentRow
from ..store.queries import iteration_rows
from ..store.session import open_store
from ..turns.credentials import CERTIFICATE_FILE, TOKEN_FILE, credentials_folder
from ..turns.policies import DEFAULT_POLICY
from .experiment import experiment, lease_devices, link_of, settings_from_env
from .exporter import PrometheusSink, check_port, run_facts
from .jobs import GroupToRun, job_for
from .launchers import check_launcher_options, hosts_or_allocation, launcher_named
from .learn import learn_measurements
from .mps import check_mps
from .ranks import check_devices, crossover_warning
from .record import beside_on_devices, not_started_units
from .request import DEFAULT_LAUNCHER, LaunchRequest, RunOptions
from .schedule import Scheduler, Unit
from .sinks import default_sinks
from .targets import run_targets, shared_arguments_hint
from .traits import attach_traits, give_seconds, predict_unplanned
from .units import comparison_units


def train_recipe(
    db: str | None,
    recipe_path: str,
    *,
    np: int | None = None,
    hosts: str | None = None,
    iterations: int | None = None,
    link: Link | None = None,
    command: str = "xover train",
    show_progress: bool = True,
    engine: str = "horovod",
    timeout_s: float | None = None,
    wait: bool = False,
) -> dict[str, Any]:
    """`xover train`: one recipe alone. Returns the experiment's job summaries."""
    recipe = with_overrides(load_recipe(recipe_path), iterations=iterations, np=np)
    job = job_for(recipe, hosts, engine=engine)
    check_devices([job])
    run_on = link_of([job], link)
    store = open_store(db)
    with experiment(store, "train", command, run_on, default_sinks(show_progress), timeout_s=timeout_s) as current:
        lease_devices(current, [job], wait, movable=True)  # on the first devices: nothing placed it
        Scheduler(current.context).run([Unit([job], Mode.SOLO.value)], exclusive=True)
    with store.session() as session:
        summaries = experiment_jobs(session, current.id)
    # a job alone as every view has it (analysis.compare): its whole run is its window (slowdown 1.0), and a run
    # that ended without finishing has no throughput (the JSON and the table as `xover report` shows them)
    jobs, _ = compare([RunResult.from_summary(summary) for summary in summaries], {})
    return {"experiment": current.id, "results_dir": str(current.results_dir), "jobs": [j.to_json() for j in jobs]}


@dataclass(frozen=True)
class RunAsked:
    """What `xover run` was given, as its options say (docs/reference.md): `targets` a plan file, or with
    `group` recipes; `scripts` with their `script_args`; `mode` None for the default (a plan's planned,
    an ad-hoc group's all). `run_as_asked` resolves it into groups and RunOptions."""

    targets: tuple[str, ...] = ()
    group: bool = False
    scripts: tuple[str, ...] = ()
    script_args: tuple[str, ...] = ()
    np: int | None = None
    hosts: str | None = None
    mode: str | None = None
    iterations: int | None = None
    seconds: float | None = None
    link: Link | None = None  # --bandwidth
    engine: str | None = None
    policy: str | None = None
    timeout_s: float | None = None
    wait: bool = False
    mps: bool = False
    allow_changed: bool = False
    launcher: str = DEFAULT_LAUNCHER
    launcher_options: dict[str, str | None] = field(default_factory=dict)
    metrics_port: int | None = None
    command: str = "xover run"
    show_progress: bool = True


def run_as_asked(db: str | None, asked: RunAsked) -> RunOutcome:
    """`xover run`: the groups and options of what was asked, checked in the order the options are
    documented, then `run_groups`."""
    ad_hoc = asked.group or bool(asked.scripts)
    modes = modes_of(asked.mode, plan=not ad_hoc)
    check_seconds("--timeout", asked.timeout_s)
    chosen = run_targets(
        list(asked.targets),
        group=asked.group,
        scripts=list(asked.scripts),
        script_args=list(asked.script_args),
        np=asked.np,
        hosts=hosts_or_allocation(asked.hosts) if ad_hoc else asked.hosts,
        iterations=asked.iterations,
        engine=asked.engine,
        allow_changed=asked.allow_changed,
        link=asked.link,
        launcher=asked.launcher,
        policy=asked.policy,
    )
    if chosen.plan is not None and chosen.plan.unknown_keys:  # read past, as a later version's would be: say so
        print_notice(
            f"warning: {chosen.plan_path}: plan fields this xover does not know, ignored: "
            + ", ".join(chosen.plan.unknown_keys[:10])
            + (f" and {len(chosen.plan.unknown_keys) - 10} more" if len(chosen.plan.unknown_keys) > 10 else "")
        )
    if chosen.gpu_plan_on_cpus:
        errors.print(
            f"{chosen.plan_path}: the plan was made for GPUs; {CPU_ONLY_VARIABLE}=1 runs it on CPU cores (its "
            "predictions are for GPUs)",
            highlight=False,
            markup=False,
        )
    if chosen.cpu_plan_on_gpus:
        print_notice(
            f"warning: {chosen.plan_path}: the plan was made on CPU cores (plan field 'device_kind' is 'cpu') and its "
            f"jobs will run on this machine's GPUs, where its predictions do not hold: profile and plan again here "
            f"for a plan made for them, or keep the jobs on CPU cores with {CPU_ONLY_VARIABLE}=1"
        )
    if chosen.link_from_plan:
        errors.print(
            f"link {chosen.link}, as the plan's profiles were taken (--bandwidth host: the unshaped network)",
            highlight=False,
        )
    unused = policy_unused(asked.policy, modes, chosen.groups)
    if unused:
        print_notice(f"warning: {unused}")
    check_seconds("--seconds", asked.seconds)
    if asked.seconds is not None and asked.iterations is not None:
        raise XoverError("--seconds and --iterations: give one (--seconds sets each job's iterations)")
    check_launcher_options(asked.launcher, asked.launcher_options)
    if asked.scripts and asked.engine is None:  # say which engine the scripts' imports showed
        print_notice(detection_note(detect_scripts_engine(list(asked.scripts))[1]))
    outcome = run_groups(
        db,
        chosen.groups,
        RunOptions(
            modes=tuple(modes),
            policies=tuple(chosen.policies),
            engine=chosen.engine,
            link=chosen.link,
            iterations=asked.iterations,
            seconds=asked.seconds,
            timeout_s=asked.timeout_s,
            wait=asked.wait,
            mps=asked.mps,
            allow_changed=asked.allow_changed,
            launcher=asked.launcher,
            launcher_options=asked.launcher_options,
            plan=chosen.plan,
            plan_path=chosen.plan_path,
            command=asked.command,
            show_progress=asked.show_progress,
            metrics_port=asked.metrics_port,
        ),
    )
    hint = shared_arguments_hint(list(asked.scripts), list(asked.script_args), [job.error for job in outcome.jobs])
    if hint:
        print_notice(hint)
    return outcome


def policy_unused(policy: str | None, modes: list[str], groups: list[GroupToRun]) -> str | None:
    """Words for a --policy the run has no use for (nothing takes turns; all of them, where a plan's run takes
    one), None where it uses it."""
    if policy is None:
        return None
    if modes == [PLANNED]:
        if not any(turn_taking(group.sharing) for group in groups):
            picks = ", ".join(sorted({group.sharing for group in groups}))
            return (
                f"--policy {policy}: no group of the plan takes turns (it picked {picks}), so it changes nothing; "
                f"`--mode crossover` runs the plan's groups taking turns under it"
            )
        if policy == ALL:
            return (
                f"--policy all: a plan's run takes turns under one policy ({DEFAULT_POLICY}); `--mode crossover "
                "--policy all` compares every policy on the plan's groups"
            )
        return None
    if not any(turn_taking(mode) for mode in modes):
        return f"--policy {policy}: --mode {','.join(modes)} takes no turns, so it changes nothing"
    return None


def run_groups(db: str | None, groups: list[GroupToRun], options: RunOptions) -> RunOutcome:
    """`xover run`: groups in modes. One mode of a plan is its real schedule (groups start as soon as
    their devices are free, side by side); several modes are a comparison, one unit at a time. The
    launcher (launchers.py) runs them: here or over ssh ('local'), or each group of the plan as a Slurm
    job ('slurm')."""
    modes, policies = list(options.modes), list(options.policies) or [DEFAULT_POLICY]
    if modes == [PLANNED]:
        policies = policies[:1]
    settings_from_env()  # a bad variable is refused before the plan is recorded
    chosen = launcher_named(options.launcher)
    # a group the plan put under MPS runs under the run's MPS daemon (so do the plan's other groups); under a
    # launcher that runs it elsewhere (Slurm), under one of its own where it runs, checked there (group_job.py)
    mps = options.mps or (chosen.runs_here and modes == [PLANNED] and any(group.needs_mps for group in groups))
    if mps:
        try:
            check_mps()
        except XoverError as error:
            if options.mps:
                raise
            picked = ", ".join(str(group.index) for group in groups if group.needs_mps)
            raise XoverError(
                f"the plan runs group {picked} under MPS (its pick, or adaptive's best way without turns), and MPS "
                f"cannot run here ({str(error).split(': ', 1)[-1].removesuffix('; run without --mps')}): run it "
                "with --mode crossover or --mode concurrent, or plan again on this machine"
            ) from None
    for group in groups:
        check_devices(group.jobs, planned=options.plan is not None)
    run_modes = sorted({group.planned_mode for group in groups}) if modes == [PLANNED] else modes
    warning = crossover_warning([job for group in groups for job in group.jobs], run_modes)
    if warning and chosen.runs_here:
        errors.print(f"warning: {warning}", highlight=False, markup=False)
    link = link_of([job for group in groups for job in group.jobs], options.link)
    store = open_store(db)
    for group in groups:
        attach_traits(store, group.jobs, link)
        predict_unplanned(store, group, link, policies[0], modes)
        if options.seconds is not None:
            give_seconds(group.jobs, options.seconds, link)
    comparison = len(modes) > 1 or modes == [Mode.SEQUENTIAL] or len(policies) > 1
    resolved = replace(options, modes=tuple(modes), policies=tuple(policies), mps=mps)
    request = LaunchRequest(
        store=store,
        groups=groups,
        units=comparison_units(groups, modes, policies, store, link),
        options=resolved,
        link=link,
        comparison=comparison,
    )
    chosen.check(request)  # before the plan is recorded
    # the exporter binds its port now: a port in use is refused before anything is recorded or started
    port = options.metrics_port if options.metrics_port is not None else settings().metrics_port
    if port is not None:
        check_port(port)
    if chosen.runs_here:
        request = replace(request, exporter=metrics_exporter(port, groups, planned=options.plan is not None))
    elif port is not None:  # each group serves its own, on its first node (group_job.py)
        request = replace(request, options=replace(request.options, metrics_port=port))
    try:
        plan = options.plan
        if plan is not None:
            with store.session() as session, session.begin():
                request = replace(request, plan_id=store_plan(session, plan, options.plan_path))
        try:
            launched = chosen.launch(request)
        except (Interrupted, TimedOut) as stop:
            if not comparison or not any(len(group.jobs) > 1 for group in groups):
                raise
            # its finished modes are shown, and none of its figures kept: the next plan of these jobs would read
            # a comparison whose modes ran on a machine in unknown states
            raise type(stop)(f"{stop}; a comparison cut short is not kept for the next plan") from None
        current, launcher_jobs = launched.experiment, launched.launcher_jobs
    finally:
        if request.exporter is not None:
            request.exporter.stop()  # the run's end closed it already, unless it never began
    with store.session() as session:
        iterations = iteration_rows(session, [r.id for r in session.get_one(ExperimentRow, current.id).runs])
        summaries = experiment_jobs(session, current.id, iterations)
        not_started = not_started_units(session, current.id)
        beside = beside_on_devices(session, current.id)
    jobs, comparisons = compare([RunResult.from_summary(summary) for summary in summaries], iterations, policies[0])
    if beside:  # its figures are of its jobs beside another run's: no plan may learn them
        print_notice(
            f"warning: {counted(len(beside), 'experiment')} of this store ({', '.join(beside)}) ran on this run's "
            "devices at the same time (leasing them in another XOVER_LEASE_DIR): its figures are not of its jobs "
            "alone, and this comparison is not kept for the next plan"
        )
    else:
        learn_measurements(store, current.id, groups, jobs, comparisons, link)  # for the next plan of these jobs
    return RunOutcome(
        experiment=current.id,
        results_dir=str(current.results_dir),
        link=link,
        modes=modes,
        policies=policies,
        jobs=jobs,
        groups=comparisons,
        # a plan run in one way: the gain the plan predicted for it; a comparison's: crossover's, set against it
        predicted_gains={
            g.index: (
                predicted_for(g, g.sharing if modes == [PLANNED] else modes[0])
                if plan is not None and not comparison
                else g.predicted_gain
            )
            for g in groups
        },
        sharing={g.index: g.sharing for g in groups} if plan is not None else {},
        launcher=chosen.name,
        launcher_jobs=dict(launcher_jobs or {}),
        schedule=(
            schedule_summary(
                jobs, plan, lengths_as_planned(plan, options, jobs), one_after_another=modes == [Mode.SEQUENTIAL]
            )
            if plan is not None and (not comparison or modes == [Mode.SEQUENTIAL])
            else None
        ),
        not_started=not_started,
        seconds=options.seconds,
    )


def metrics_exporter(port: int | None, groups: list[GroupToRun], planned: bool) -> PrometheusSink | None:
    """The Prometheus exporter of `xover run --metrics-port PORT` (or XOVER_METRICS_PORT), serving from now
    on; None when neither asks for one."""
    if port is None:
        return None
    sink = PrometheusSink(port, run_facts(groups, planned))
    folder = credentials_folder()
    host = f"[{sink.address}]" if ":" in sink.address else sink.address
    # said once: a first scrape without the token is a 401 that tells nothing of where the token is
    print_notice(
        f"metrics: https://{host}:{sink.port}/metrics while the run lasts, to the bearer token in "
        f"{folder / TOKEN_FILE} (certificate {folder / CERTIFICATE_FILE}; docs/reference.md: Prometheus metrics)"
    )
    return sink


def lengths_as_planned(plan: Plan, options: RunOptions, jobs: list[RunResult]) -> bool:
    """Whether the run kept the plan's lengths: no --seconds, every job the iterations the plan predicted for (no
    --iterations of another length; a job file's script run to its own end is not), and a plan file whose jobs are
    those it predicted for (not edited by hand since)."""
    if options.seconds is not None or not plan.predicted_for_its_jobs:
        return False
    planned = {job.name: job.iterations for group in plan.groups for job in group.jobs}
    return kept_plan_lengths(planned, [(job.name, job.iterations_planned) for job in jobs])


def predicted_for(group: GroupToRun, way: str) -> float | None:
    """The plan's predicted gain of `group` in `way` (results.predicted_in_way, as `xover report` reads it)."""
    return predicted_in_way(group.predicted_by_sharing, way, group.predicted_gain)


def schedule_summary(
    jobs: list[RunResult], plan: Plan, lengths_as_planned: bool = True, one_after_another: bool = False
) -> dict[str, Any]:
    """A plan run as scheduled, or its jobs one after another (`--mode sequential`, each job once): measured
    makespan (first job start to last job end; None unless every job finished, as `xover report` says it:
    results.measured_makespan_s) next to the plan's prediction and to running its jobs one after another; those two
    are for the plan's lengths, so they are set beside the measured one only where the run kept them (not under
    --iterations or --seconds)."""
    return {
        "one_after_another": one_after_another,
        "measured_makespan_s": measured_makespan_s(
            (job.status, _moment(job.started_at), _moment(job.ended_at)) for job in jobs
        ),
        "predicted_makespan_s": plan.predicted_makespan_ms / 1000,
        "sequential_makespan_s": plan.sequential_makespan_ms / 1000,
        "groups_overlapping": _overlapping_groups(jobs),
        "lengths_as_planned": lengths_as_planned,
    }


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _overlapping_groups(jobs: list[RunResult]) -> int:
    """How many groups ran at the same time at the busiest moment."""
    spans: dict[int, list[float]] = {}
    for job in jobs:
        if job.started_at and job.ended_at and job.group is not None:
            start = datetime.fromisoformat(job.started_at).timestamp()
            end = datetime.fromisoformat(job.ended_at).timestamp()
            span = spans.setdefault(job.group, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    moments = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()])
    busiest = current = 0
    for _, change in moments:
        current += change
        busiest = max(busiest, current)
    return busiest
