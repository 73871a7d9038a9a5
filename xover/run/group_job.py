"""One group of a plan inside a job of a launcher's scheduler (run/batch.py), on the nodes it gave:

    python -m xover.run.group_job REQUEST.json

The request (request.py's GroupRequest) says the experiment, the group and the run's options, as the
submitting xover resolved them; the store's URL comes from the environment (XOVER_DB), never a command line.
The group runs exactly as `-H` would - its units, a turn server per node, horovodrun or torchrun - on the
job's nodes, its runs recorded into the experiment with the job's id; there is no reaper here (the
scheduler's SIGKILL after its grace would take it with everything in the job), so the moment the job is
told to end, what runs on the other nodes is stopped first, all at once.
"""

from __future__ import annotations

import contextlib
import socket
import sys

from ..config import results_root
from ..console import print_error, print_notice
from ..errors import XoverError
from ..hosts import canonical_host, is_local, parse_hosts
from ..links import HOST
from ..processes import sweep_hosts_now
from ..settings import DB_VARIABLE, EXPERIMENT_VARIABLE, settings
from ..store import session as store_session
from ..turns.credentials import metrics_credentials
from . import targets
from .batch import BatchLauncher, planned_under_mps
from .experiment import settings_from_env
from .exporter import PrometheusSink, run_facts
from .jobs import GroupToRun
from .launchers import launcher_named
from .mps import MpsDaemon, check_mps
from .reach import prefix_to_reach
from .record import Recorder
from .request import GroupRequest
from .schedule import RunContext, Scheduler
from .sinks import MetricSink, StoreSink, deliver
from .supervise import Interrupted, interruptible, on_interrupt
from .traits import attach_traits, give_seconds
from .units import comparison_units


def remap_to_hosts(group: GroupToRun, hosts: str) -> None:
    """The plan's hosts, in order, become the job's nodes (a -H value), in order."""
    planned: list[str] = []
    for job in group.jobs:
        for host in job.devices:
            if host not in planned:
                planned.append(host)
    nodes = [canonical_host(name) for name, _ in parse_hosts(hosts)]
    if len(nodes) < len(planned):
        raise XoverError(f"the job got {len(nodes)} node(s) but group {group.index} is planned on {len(planned)}")
    mapping = dict(zip(planned, nodes))
    for job in group.jobs:
        job.devices = {mapping[host]: indices for host, indices in job.devices.items()}


def group_exporter(port: int | None, group: GroupToRun, experiment_id: str) -> list[MetricSink]:
    """A group's Prometheus exporter inside its job, on its first node; a port in use there, or credentials
    it cannot read there, is said and the group runs without it (it was submitted already: the run goes
    on). The credentials are the submitter's (made before it submitted), from the same folder: a home the
    nodes share, or XOVER_METRICS_CREDENTIALS; never made anew here, where Prometheus would not know them."""
    if port is None:
        return []
    try:
        exporter = PrometheusSink(port, run_facts([group], planned=True), credentials=metrics_credentials(create=False))
    except XoverError as error:
        print_error(f"{error}; group {group.index} runs without its exporter")
        return []
    exporter.opened(experiment_id)
    return [exporter]


def run_group(request: GroupRequest, db: str) -> None:
    """Run the request's group here, on the nodes of the job this process runs in."""
    options = request.options
    assert options.plan_path is not None  # a BatchLauncher submits plan files only
    launcher = launcher_named(request.launcher)
    if not isinstance(launcher, BatchLauncher):
        raise XoverError(f"--launcher {launcher.name} runs no group in a job of its own")
    groups, _ = targets.groups_from_plan(options.plan_path, options.iterations, options.engine, options.allow_changed)
    [group] = [g for g in groups if g.index == request.group]
    hosts, job_id, described = launcher.job_here()
    remap_to_hosts(group, hosts)
    print_notice(described)
    store = store_session.open_store(db)
    attach_traits(store, group.jobs, HOST)  # a node's network as it is: --bandwidth is refused for a scheduler
    if options.seconds is not None:
        give_seconds(group.jobs, options.seconds, HOST)
    recorder = Recorder(store, request.experiment, launcher_job_id=job_id)
    results_dir = results_root() / "runs" / request.experiment
    results_dir.mkdir(parents=True, exist_ok=True)
    lease, server_nice, link_bands = settings_from_env()  # the submitter's XOVER_* (its job exports them)
    port = options.metrics_port if options.metrics_port is not None else settings().metrics_port
    context = RunContext(
        recorder=recorder,
        experiment_id=request.experiment,
        results_dir=results_dir,
        lease=lease,
        server_nice=server_nice,
        link_bands=link_bands,
        sinks=[StoreSink(recorder), *group_exporter(port, group, request.experiment)],
    )
    elsewhere = sorted({host for job in group.jobs for host in job.devices if not is_local(host)})

    def stop_elsewhere() -> None:
        try:
            prefix = prefix_to_reach(elsewhere)
        except XoverError:
            prefix = []
        sweep_hosts_now(EXPERIMENT_VARIABLE, request.experiment, elsewhere, prefix)

    # the plan put the group under MPS: its daemon here, on the node whose GPUs it runs on (its name says its
    # job: two groups' daemons never share a folder)
    mps = planned_under_mps(group, options.modes)
    if mps:
        try:
            check_mps()
        except XoverError as error:
            raise XoverError(
                f"group {group.index} was planned under CUDA MPS, which {socket.gethostname()} cannot run: {error}"
            ) from None
    modes, policies = list(options.modes), list(options.policies)
    try:
        with interruptible(), on_interrupt(stop_elsewhere):
            daemon = MpsDaemon(results_dir / f"group{group.index}-{job_id}", request.experiment)
            with daemon if mps else contextlib.nullcontext():
                Scheduler(context).run(
                    comparison_units([group], modes, policies, store), exclusive=len(modes) > 1 or len(policies) > 1
                )
    finally:
        deliver(context.sinks, lambda sink: sink.closed("ended"))  # the exporter stops serving


def main(argv: list[str] | None = None) -> None:
    """The group job's entry point: its request's path; the store from XOVER_DB."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m xover.run.group_job REQUEST.json (written by the submitting xover)")
    db = settings().db
    if not db:
        print_error(f"the store: ${DB_VARIABLE} (the submitting xover sets it in the job's environment)")
        sys.exit(2)
    try:
        run_group(GroupRequest.read(argv[0]), db)
    except Interrupted:
        sys.exit(130)
    except XoverError as error:
        print_error(str(error))
        sys.exit(2)


if __name__ == "__main__":
    main()
