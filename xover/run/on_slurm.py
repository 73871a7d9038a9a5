"""Running a plan through Slurm: each group of the plan is one Slurm job.

    xover run PLAN --launcher slurm [--partition P] [--account A] [--time-limit T]

This process (the *submitter*) records the experiment, submits one batch job per group (nodes and
devices per node from the plan), prints their ids, follows them (state, exit codes) and, on Ctrl-C,
cancels them with scancel. Inside each Slurm job, `python -m xover.run.on_slurm` runs the group exactly
as `-H` would (a turn server per node, horovodrun or torchrun) on the nodes Slurm gave it, recording
its runs into the same experiment (so the store must be one every node reaches: PostgreSQL. SQLite
on a filesystem the nodes share is written from several machines at once, which SQLite supports only
as far as that filesystem's locks work; xover warns and leaves WAL off there, docs/security.md). A
Slurm job that ends before or without its runs being ended (cancelled while pending, a time limit, a
node failure) has them recorded as such here. A controller that does not answer for a while (a query
timing out) is asked again, for up to `slurm.TRANSIENT_RETRY_S`, before the run gives up and cancels
its jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import XOVER_ROOT, results_root
from ..console import errors, print_error
from ..devices import local_device_count
from ..engines import DEFAULT_ENGINE
from ..errors import XoverError
from ..hosts import canonical_host, is_local
from ..processes import sweep_hosts_now
from ..settings import (
    DB_VARIABLE,
    EXPERIMENT_VARIABLE,
    RESULTS_VARIABLE,
    VARIABLE_PREFIX,
    settings,
)
from ..sharing import PLANNED
from ..store import session as store_session
from ..store.models import ACTIVE_STATUSES, Experiment, Run, utcnow
from ..store.queries import snapshot_recipe
from ..turns.credentials import metrics_credentials
from . import targets
from .experiment import settings_from_env
from .exporter import PrometheusSink, run_facts
from .external import slurm
from .jobs import GroupToRun
from .mps import MpsDaemon, check_mps
from .reach import prefix_to_reach
from .record import Recorder
from .schedule import RunContext, Scheduler, Unit
from .sinks import MetricSink, StoreSink, deliver
from .supervise import Interrupted, TimedOut, interruptible, on_interrupt, uninterrupted
from .traits import attach_traits, give_seconds
from .units import comparison_units, group_units

if TYPE_CHECKING:
    from .launchers import LaunchRequest

SLURM_TO_STATUS = {
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "PREEMPTED": "cancelled",
    "BOOT_FAIL": "failed",
    "COMPLETED": "failed",
}  # completed while a run was still open: it ended without saying so


def group_shape(group: GroupToRun) -> tuple[int, int]:
    """(nodes, devices per node) the plan gives the group."""
    per_host: dict[str, set[int]] = {}
    for job in group.jobs:
        for host, indices in job.devices.items():
            per_host.setdefault(host, set()).update(indices)
    return len(per_host), max(len(indices) for indices in per_host.values())


def group_command(experiment_id: str, group: GroupToRun, request: LaunchRequest) -> list[str]:
    """The command line that runs one group of the plan inside its Slurm job (`main` below)."""
    options = request.options
    assert options.plan_path is not None  # SlurmLauncher.check refuses a run without a plan file
    command = [
        sys.executable,
        "-m",
        "xover.run.on_slurm",
        "--experiment",
        experiment_id,
        "--plan",
        str(Path(options.plan_path).resolve()),
        "--group",
        str(group.index),
        "--engine",
        options.engine,
        *[arg for mode in options.modes for arg in ("--mode", mode)],
        *[arg for policy in options.policies for arg in ("--policy", policy)],
    ]
    if options.allow_changed:  # checked again inside the job, where the group starts
        command.append("--allow-changed")
    if options.iterations is not None:
        command += ["--iterations", str(options.iterations)]
    if options.seconds is not None:
        command += ["--seconds", str(options.seconds)]
    if options.metrics_port is not None:  # the group's figures are served on its first node (exporter.py)
        command += ["--metrics-port", str(options.metrics_port)]
    if planned_under_mps(group, options.modes):  # its node starts the daemon: the submitting host may have no GPU
        command.append("--mps")
    return command


def passed_variables(group: GroupToRun) -> dict[str, str]:
    """The variables the group's job files pass by name (`pass_env`), with their values here: in the batch
    script, as the store's URL is, so that they reach the job under --export=NONE too, and no command line."""
    return {name: os.environ[name] for job in group.jobs for name in job.recipe.pass_env if name in os.environ}


def planned_under_mps(group: GroupToRun, modes: Sequence[str]) -> bool:
    """Whether a group runs under a CUDA MPS daemon of its own, inside its Slurm job: the plan put it under
    MPS and the run is the plan's (`--mode planned`). Checked on its node, where its GPUs are."""
    return list(modes) == [PLANNED] and group.needs_mps


def submit_groups(run, request: LaunchRequest, console, submitted: dict[int, str] | None = None) -> dict[int, str]:
    """Submit every group of the request as one batch job; returns group index -> Slurm job id
    (`submitted`, filled as they go, so that a failure part way knows which to cancel)."""
    # What the groups run on: the kind of device the plan's profiles were taken on, not this host's
    # (a login node without GPUs submits GPU jobs); this host's only for a plan that does not say.
    plan = request.options.plan
    kind = (plan.device_kind if plan is not None else None) or local_device_count()[0]
    submitted = {} if submitted is None else submitted
    if request.options.metrics_port is not None:
        metrics_credentials()  # made here if missing, where the user reads them: each group's exporter uses them
    for group in request.groups:
        nodes, per_node = group_shape(group)
        command = group_command(run.id, group, request)
        # the run's XOVER_* settings, written out: a site may submit with --export=NONE. The store's URL
        # (a password, perhaps) is one of them, not an argument: every user of a node can read a command
        # line, while the script (sbatch reads it from stdin) is for its owner and Slurm's administrators.
        settings = {key: value for key, value in os.environ.items() if key.startswith(VARIABLE_PREFIX)}
        script = slurm.batch_script(
            command,
            workdir=os.getcwd(),
            environment={
                **passed_variables(group),
                **settings,
                DB_VARIABLE: request.store.url,
                "PYTHONPATH": XOVER_ROOT
                + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
                RESULTS_VARIABLE: str(run.results_dir.parent.parent.resolve()),
            },
        )
        with uninterrupted():  # a job submitted is a job known, to cancel and to the reaper
            try:
                job_id = slurm.submit(
                    script,
                    nodes,
                    tasks_per_node=per_node if kind == "cpu" else None,
                    gpus_per_node=per_node if kind == "gpu" else None,
                    partition=request.option("partition"),
                    account=request.option("account"),
                    time_limit=request.option("time_limit"),
                    job_name=f"xover-{run.id}-g{group.index}",
                    output=run.results_dir / f"slurm-group{group.index}-%j.out",
                    # a group whose node failed ends failed, as recorded; requeued (Slurm's
                    # default), it would run again into the same experiment
                    extra_args=["--no-requeue"],
                )
            except slurm.LostSubmission as lost:
                # sbatch's answer was lost but the job was made: known now, so the caller's clean-up
                # (cancel_unfinished) cancels it and closes its rows instead of leaving a ghost to run
                # into an ended experiment; one more of that name (none expected) is cancelled here
                submitted[group.index] = lost.job_ids[0]
                for job_id in lost.job_ids:
                    run.context.reaper.add_slurm_job(job_id)
                for extra in lost.job_ids[1:]:
                    with contextlib.suppress(XoverError):
                        slurm.cancel(extra)
                raise
            submitted[group.index] = job_id
            run.context.reaper.add_slurm_job(job_id)
        console.print(
            f"group {group.index}: Slurm job {job_id} ({nodes} node{'s' if nodes > 1 else ''} x {per_node} devices)",
            highlight=False,
        )
    return submitted


def submit_and_follow(run, request: LaunchRequest, submitted: dict[int, str], console) -> dict[int, Any]:
    """`xover run PLAN --launcher slurm`: submit every group, then follow them to their ends. Whatever
    ends it early (Ctrl-C, SIGTERM, --timeout, a group `sbatch` refused, an error from Slurm) cancels
    the jobs submitted and not ended, and records them; `submitted` says which were."""
    timeout_s = request.options.timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    ended: dict[int, Any] = {}
    modes, policies = list(request.options.modes), list(request.options.policies)
    planned = {group.index: group_units(group, modes, policies) for group in request.groups}
    try:
        submit_groups(run, request, console, submitted=submitted)
        return follow(run, planned, submitted, console, ended, deadline=deadline)
    except BaseException as stop:
        cancel_unfinished(
            run, planned, submitted, ended, console, status="timeout" if isinstance(stop, TimedOut) else None
        )
        raise


def follow(
    run,
    planned: dict[int, list[Unit]],
    submitted: dict[int, str],
    console,
    states: dict[int, Any],
    poll_s: float = 1.0,
    deadline: float | None = None,
) -> dict[int, Any]:
    """Wait until every Slurm job has ended (reporting state changes, recording each end into
    `states`); TimedOut past `deadline` (time.monotonic()). `planned`: each group's units."""
    seen: dict[int, str] = {}
    told: list[str] = []

    def say_retrying(error: slurm.SlurmError) -> None:
        if not told:  # once per outage is enough
            told.append(str(error))
            console.print(
                f"Slurm did not answer ({error}); asking again for up to {slurm.TRANSIENT_RETRY_S:.0f} s",
                highlight=False,
                markup=False,
            )

    while len(states) < len(submitted):
        for index, job_id in submitted.items():
            if index in states:
                continue
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            state = slurm.retrying(
                functools.partial(slurm.job_state, job_id),
                on_retry=say_retrying,
                limit_s=None if left is None else min(left, slurm.TRANSIENT_RETRY_S),
            )
            told.clear()
            if seen.get(index) != state.state:
                seen[index] = state.state
                console.print(
                    f"group {index}: Slurm job {job_id} {state.state}"
                    + (f" ({state.reason})" if state.reason and state.reason != "None" else ""),
                    highlight=False,
                )
            if state.finished:
                states[index] = state
                record_outcome(run, planned[index], state)
        if deadline is not None and len(states) < len(submitted) and time.monotonic() > deadline:
            raise TimedOut()
        time.sleep(poll_s)
    return states


def cancel_unfinished(
    run,
    planned: dict[int, list[Unit]],
    submitted: dict[int, str],
    ended: dict[int, Any],
    console,
    status: str | None = None,
) -> None:
    """scancel every submitted job not known to have ended, wait until Slurm says each ended (two
    minutes at most), and record them (as `status` where given). A failure to cancel one does not
    stop the others from being cancelled."""
    with uninterrupted():
        unfinished = {index: job_id for index, job_id in submitted.items() if index not in ended}
        for index, job_id in unfinished.items():
            try:
                slurm.cancel(job_id)
            except XoverError as error:
                console.print(f"group {index}: could not cancel Slurm job {job_id}: {error}", highlight=False)
        for index, job_id in unfinished.items():
            try:
                state = slurm.wait_for(job_id, poll_s=0.5, timeout_s=120, cancel_on_interrupt=False)
            except XoverError as error:
                console.print(f"group {index}: Slurm job {job_id}: {error}", highlight=False)
                continue
            record_outcome(run, planned[index], state, status)


def record_outcome(run, units: list[Unit], state, status: str | None = None) -> None:
    """What Slurm says of a group's job, where its own runs could not say it (or `status`: why xover
    cancelled it). `units`: what the group was to run (commands.group_units)."""
    status = status or SLURM_TO_STATUS.get(state.state, "failed")
    index = units[0].group
    with run.store.session() as session, session.begin():
        experiment = session.get(Experiment, run.id)
        runs = [r for r in experiment.runs if r.group_index == index and r.slurm_job_id == state.job_id]
        made = {(r.name, r.mode, r.policy) for r in runs}
        # the runs it never got to (all of them, when it was cancelled while pending) end as the Slurm job did
        for unit in units if not state.succeeded else []:
            for job in unit.jobs:
                if (job.name, unit.mode, unit.policy) not in made:
                    snapshot = snapshot_recipe(session, job.recipe)
                    session.add(
                        Run(
                            experiment_id=run.id,
                            recipe_id=snapshot.id,
                            name=job.name,
                            mode=unit.mode,
                            policy=unit.policy,
                            engine=job.engine,
                            group_index=index,
                            hosts=job.hosts,
                            np=job.np,
                            devices=job.devices_env(),
                            status=status,
                            slurm_job_id=state.job_id,
                            ended_at=utcnow(),
                            error=f"Slurm job {state.job_id} {state.state}"
                            + (f": {state.reason}" if state.reason and state.reason != "None" else ""),
                        )
                    )
        for row in runs:
            # a run the job's own xover ended as interrupted was stopped by Slurm: it ended as the Slurm job did
            if row.status in ACTIVE_STATUSES or (not state.succeeded and row.status == "interrupted"):
                row.status, row.ended_at = status, row.ended_at or utcnow()
                row.error = (row.error + "\n" if row.error else "") + f"Slurm job {state.job_id} {state.state}"


# ------------------------------------------------------------------------------------ inside the Slurm job


def remap_to_allocation(group: GroupToRun, allocation) -> None:
    """The plan's hosts, in order, become the allocation's nodes, in order."""
    planned: list[str] = []
    for job in group.jobs:
        for host in job.devices:
            if host not in planned:
                planned.append(host)
    nodes = [canonical_host(host.name) for host in allocation.hosts]
    if len(nodes) < len(planned):
        raise XoverError(f"Slurm gave {len(nodes)} node(s) but group {group.index} is planned on {len(planned)}")
    mapping = dict(zip(planned, nodes))
    for job in group.jobs:
        job.devices = {mapping[host]: indices for host, indices in job.devices.items()}


def group_exporter(port: int | None, group: GroupToRun, experiment_id: str) -> list[MetricSink]:
    """A group's Prometheus exporter inside its Slurm job, on its first node; a port in use there, or
    credentials it cannot read there, is said and the group runs without it (it was submitted already: the
    run goes on). The credentials are the submitter's (made before it submitted), from the same folder:
    a home the nodes share, or XOVER_METRICS_CREDENTIALS; never made anew here, where Prometheus would not
    know them."""
    if port is None:
        return []
    try:
        exporter = PrometheusSink(port, run_facts([group], planned=True), credentials=metrics_credentials(create=False))
    except XoverError as error:
        print_error(f"{error}; group {group.index} runs without its exporter")
        return []
    exporter.opened(experiment_id)
    return [exporter]


def main(argv: list[str] | None = None) -> None:
    """A group of a plan inside its Slurm job (started by the batch script `submit_groups` wrote)."""
    parser = argparse.ArgumentParser(description="one group of a plan, inside its Slurm job")
    parser.add_argument(
        "--db",
        default=settings().db,
        help=f"the store (default: ${DB_VARIABLE}, which keeps a password out of the process list)",
    )
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--engine", default=DEFAULT_ENGINE)
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument("--policy", action="append", default=[])
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--allow-changed", action="store_true", help="run scripts changed since profiled")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=settings().metrics_port,
        help="serve the group's figures to Prometheus on this port of its first node",
    )
    parser.add_argument(
        "--mps", action="store_true", help="run the group under a CUDA MPS daemon of its own on this node (planned)"
    )
    args = parser.parse_args(argv)
    if not args.db:
        parser.error(f"the store: ${DB_VARIABLE} (or --db)")
    try:
        groups, _ = targets.groups_from_plan(args.plan, args.iterations, args.engine, args.allow_changed)
        [group] = [g for g in groups if g.index == args.group]
        allocation = slurm.allocation()
        remap_to_allocation(group, allocation)
        errors.print(f"hosts from the {allocation.describe()}", highlight=False, soft_wrap=True, markup=False)
        store = store_session.open_store(args.db)
        attach_traits(store, group.jobs, None)
        if args.seconds is not None:
            give_seconds(group.jobs, args.seconds, None)
        recorder = Recorder(store, args.experiment, slurm_job_id=allocation.job_id)
        results_dir = results_root() / "runs" / args.experiment
        results_dir.mkdir(parents=True, exist_ok=True)
        lease, server_nice, link_bands = settings_from_env()  # the submitter's XOVER_* (sbatch exports them)
        context = RunContext(
            recorder=recorder,
            experiment_id=args.experiment,
            results_dir=results_dir,
            lease=lease,
            server_nice=server_nice,
            link_bands=link_bands,
            sinks=[StoreSink(recorder), *group_exporter(args.metrics_port, group, args.experiment)],
        )
        modes = args.mode or ["crossover"]
        policies = args.policy or ["work-conserving"]
        # Inside a Slurm job there is no reaper (Slurm's SIGKILL after KillWait would take it with
        # everything in the job), and the orderly stop, over ssh, can outlast KillWait: so the moment
        # the job is told to end, what runs on the other nodes is stopped first, all at once.
        elsewhere = sorted({host for job in group.jobs for host in job.devices if not is_local(host)})

        def stop_elsewhere() -> None:
            try:
                prefix = prefix_to_reach(elsewhere)
            except XoverError:
                prefix = []
            sweep_hosts_now(EXPERIMENT_VARIABLE, args.experiment, elsewhere, prefix)

        # the plan put the group under MPS: its daemon here, on the node whose GPUs it runs on (its name says
        # its Slurm job: two groups' daemons never share a folder)
        mps_folder = results_dir / f"group{group.index}-{allocation.job_id}"
        if args.mps:
            try:
                check_mps()
            except XoverError as error:
                raise XoverError(
                    f"group {group.index} was planned under CUDA MPS, which {socket.gethostname()} cannot run: {error}"
                ) from None
        try:
            with interruptible(), on_interrupt(stop_elsewhere):
                with MpsDaemon(mps_folder, args.experiment) if args.mps else contextlib.nullcontext():
                    Scheduler(context).run(
                        comparison_units([group], modes, policies, store),
                        exclusive=len(modes) > 1 or len(policies) > 1,
                    )
        finally:
            deliver(context.sinks, lambda sink: sink.closed("ended"))  # the exporter stops serving
    except Interrupted:
        sys.exit(130)
    except XoverError as error:
        print_error(str(error))
        sys.exit(2)


if __name__ == "__main__":
    main()
