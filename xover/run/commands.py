"""The library behind `xover train`, `xover run` (and the measuring part of `xover profile`).

    experiment(...)   one invocation's experiment: its row, a reaper, signals, progress, its end
    train_recipe(...) one recipe alone
    run_groups(...)   groups in modes: a comparison (each unit alone on the machine, one after another)
                      or a plan's real schedule (crossover or concurrent only: groups side by side)
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import XoverError
from ..store.session import Store, open_store
from ..turns.policies import DEFAULT_POLICY
from .jobs import (MODES, GroupToRun, JobSpec, attach_traits, check_devices, give_seconds, job_for,
                   nccl_crossover_warning, traits_from_summary)
from .leases import DeviceLeases
from .mps import MpsDaemon, check_mps
from .record import Recorder, reconcile_lost
from .schedule import QuietObserver, RunContext, Scheduler, Unit
from .supervise import Interrupted, TimedOut, interruptible, uninterrupted


def results_root() -> Path:
    """Where run logs go: results/ by default, XOVER_RESULTS to move them (tests use a temp dir)."""
    return Path(os.environ.get("XOVER_RESULTS", "results"))


REAPER_DB_VARIABLE = "XOVER_REAPER_DB"


class Reaper:
    """The reaper process of an experiment (reaper.py): told `done` when the experiment ends properly."""

    def __init__(self, experiment_id: str, db_url: str) -> None:
        # The store's URL goes in the environment, not the command line every local user can read; the
        # user's own PYTHONPATH stays after xover's (it may hold what xover imports: SQLAlchemy, ...).
        path = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen([sys.executable, "-m", "xover.run.reaper", "--experiment", experiment_id],
                                        stdin=subprocess.PIPE, start_new_session=True,
                                        env={**os.environ, "PYTHONPATH": path, REAPER_DB_VARIABLE: db_url})
        self.hosts: set[str] = set()

    def add_host(self, host: str, prefix: list[str]) -> None:
        if host not in self.hosts:
            self.hosts.add(host)
            self._send(f"host {host}")

    def add_slurm_job(self, job_id: str) -> None:
        self._send(f"slurm {job_id}")

    def _send(self, line: str) -> None:
        try:
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def done(self) -> None:
        self._send("done")
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait(timeout=30)


@dataclass
class Experiment:
    """One invocation: its id, store, recorder, results folder and the context its units share."""

    id: str
    store: Store
    recorder: Recorder
    context: RunContext
    leases: DeviceLeases

    @property
    def results_dir(self) -> Path:
        return self.context.results_dir


def link_of(jobs: list[JobSpec], bandwidth: str | None) -> str:
    """The link a run's figures are keyed by: --bandwidth (this machine's shaped loopback), 'host'
    (unshaped), or the emulated cluster's NIC rate when jobs span its hosts. Checked before anything
    is recorded: a spec that mixes emulated and other hosts, or --bandwidth across hosts, is refused."""
    from ..launch import cluster
    from ..launch.hosts import is_local

    remote = sorted({host for job in jobs for host in job.devices if not is_local(host)})
    if not remote:
        return bandwidth or "host"
    cluster.launch_prefix(remote)  # refuses a spec that mixes emulated hosts with others
    if bandwidth:
        raise XoverError(f"--bandwidth shapes this machine's loopback; jobs on {', '.join(remote)} use their "
                         "network as it is (an emulated cluster shapes its NICs at `xover cluster up --bandwidth`)")
    return (cluster.cluster_rate() if all(cluster.is_emulated_host(h) for h in remote) else None) or "host"


@contextlib.contextmanager
def experiment(store: Store, kind: str, command: str, bandwidth: str | None, show_progress: bool,
               plan_id: int | None = None, timeout_s: float | None = None, link: str | None = None):
    """One invocation's experiment: live progress while it runs, its final status whatever happens,
    and a reaper that stops its processes if xover itself is killed."""
    from ..console import ProgressObserver
    from ..store.queries import new_experiment_id

    lease, server_nice, link_bands = settings_from_env()  # refused before anything is recorded
    reconcile_lost(store)
    experiment_id = new_experiment_id()
    recorder = Recorder(store, experiment_id)
    recorder.open(kind, command, link if link not in (None, "host") else bandwidth, plan_id)
    results_dir = results_root() / "runs" / experiment_id
    results_dir.mkdir(parents=True, exist_ok=True)
    observer = ProgressObserver() if show_progress else QuietObserver()
    reaper = Reaper(experiment_id, store.url)
    context = RunContext(recorder=recorder, experiment_id=experiment_id, results_dir=results_dir, bandwidth=bandwidth,
                         observer=observer, timeout_s=timeout_s, reaper=reaper, lease=lease,
                         server_nice=server_nice, link_bands=link_bands)
    leases = DeviceLeases(f"experiment {experiment_id} ({command})")
    status = "finished"
    try:
        with interruptible(), observer:
            yield Experiment(experiment_id, store, recorder, context, leases)
    except (Interrupted, KeyboardInterrupt):
        status = "interrupted"
        raise Interrupted() from None
    except TimedOut:
        status = "timeout"
        raise
    except BaseException:
        status = "failed"
        raise
    finally:
        with uninterrupted():
            leases.release()
            recorder.finish(status)
            reaper.done()


def settings_from_env() -> tuple[dict[str, float] | None, int | None, bool]:
    """The run's settings from XOVER_TURN_LEASE, XOVER_TURN_SERVER_NICE and XOVER_LINK_BANDS (checked).
    XOVER_COMM_THREADS and XOVER_WAIT are read by the workers themselves (runtime/thread_policy.py,
    runtime/gradient_wait.py), checked here too."""
    from ..runtime.gradient_wait import wait_from_env
    from ..runtime.thread_policy import policy_from_env

    policy_from_env()
    wait_from_env()
    return turn_lease_from_env(), turn_server_nice_from_env(), link_bands_from_env()


def turn_lease_from_env() -> dict[str, float] | None:
    """XOVER_TURN_LEASE='floor=30,factor=20,initial=600': how long a job may hold a turn (seconds; at
    least `floor`, `factor` x its usual hold, `initial` before it has a history; a day at most, factor 1000).
    Defaults in turns/server.py."""
    text = os.environ.get("XOVER_TURN_LEASE")
    if not text:
        return None
    try:
        items = [(key.strip(), float(value)) for key, value in (item.split("=") for item in text.split(","))]
    except ValueError:
        raise XoverError(f"XOVER_TURN_LEASE={text!r}: expected floor=S,factor=N,initial=S") from None
    lease = dict(items)
    unknown = set(lease) - {"floor", "factor", "initial"}
    if unknown or len(lease) < len(items) or not all(math.isfinite(v) and v > 0 for v in lease.values()):
        raise XoverError(f"XOVER_TURN_LEASE={text!r}: keys floor, factor, initial, each at most once, with "
                         "positive finite values")
    limits = {"floor": 86400.0, "initial": 86400.0, "factor": 1000.0}
    too_long = [key for key, value in lease.items() if value > limits[key]]
    if too_long:  # a turn's wait must fit select() (and a day is no lease at all)
        raise XoverError(f"XOVER_TURN_LEASE={text!r}: " + ", ".join(
            f"{key} at most {limits[key]:g}" + (" (seconds: a day)" if key != "factor" else "")
            for key in too_long))
    return lease


def turn_server_nice_from_env() -> int | None:
    """XOVER_TURN_SERVER_NICE=N: the turn servers' nice value (default -15 in turns/server.py, where
    allowed); a server only ever raises its priority, so 0 leaves it alone."""
    text = os.environ.get("XOVER_TURN_SERVER_NICE")
    if not text:
        return None
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):
        raise XoverError(f"XOVER_TURN_SERVER_NICE={text!r}: expected an integer from -20 to 19")
    nice = int(text)
    if not -20 <= nice <= 19:
        raise XoverError(f"XOVER_TURN_SERVER_NICE={text!r}: expected an integer from -20 to 19")
    return nice


def link_bands_from_env() -> bool:
    """XOVER_LINK_BANDS=off: crossover leaves the link shared first come, first served (a network that
    ignores socket priorities, or a comparison); on, the default: the policy's link order."""
    given = os.environ.get("XOVER_LINK_BANDS") or "on"  # set but empty: unset, as the other variables
    text = given.strip().lower()
    if text not in ("on", "off"):
        raise XoverError(f"XOVER_LINK_BANDS={given!r}: expected on or off")
    return text == "on"


def lease_devices(run: Experiment, jobs: list[JobSpec], wait: bool) -> None:
    """Every device the run will use, leased before anything starts (--wait: until they are free)."""
    from ..console import errors
    from .leases import describe_busy

    def waiting(busy):
        errors.print(f"waiting: {describe_busy(busy)}", highlight=False, soft_wrap=True, markup=False)

    timeout_s = run.context.timeout_s
    run.leases.acquire(set().union(*(job.device_set for job in jobs)), wait, waiting,
                       deadline=time.monotonic() + timeout_s if timeout_s else None)  # --wait ends at --timeout


def train_recipe(db: str | None, recipe_path: str, *, np: int | None = None, hosts: str | None = None,
                 iterations: int | None = None, bandwidth: str | None = None, command: str = "xover train",
                 show_progress: bool = True, engine: str = "horovod", timeout_s: float | None = None,
                 wait: bool = False) -> dict[str, Any]:
    """`xover train`: one recipe alone. Returns the experiment's job summaries."""
    from ..launch.network import requested_rate
    from ..recipes import load_recipe, with_overrides
    from ..store.queries import experiment_jobs

    recipe = with_overrides(load_recipe(recipe_path), iterations=iterations, np=np)
    bandwidth = requested_rate(bandwidth)
    job = job_for(recipe, hosts, engine=engine)
    check_devices([job])
    link = link_of([job], bandwidth)
    store = open_store(db)
    with experiment(store, "train", command, bandwidth, show_progress, timeout_s=timeout_s, link=link) as run:
        lease_devices(run, [job], wait)
        Scheduler(run.context).run([Unit([job], "solo")], exclusive=True)
    with store.session() as session:
        jobs = experiment_jobs(session, run.id)
    for job_summary in jobs:
        job_summary["slowdown"] = 1.0
    return {"experiment": run.id, "results_dir": str(run.results_dir), "jobs": jobs}


def comparison_units(groups: list[GroupToRun], modes: list[str], policies: list[str], store: Store,
                     link: str | None = None) -> list[Unit]:
    """Every group in every mode, in order: sequential (each job alone) first, so that crossover can
    rank jobs that had no profile by what they did alone (and, on the shaped `link`, order the link)."""

    def learn_traits(unit: Unit) -> None:
        from ..analysis import job_summary
        from ..store.models import Run
        from ..store.queries import iteration_rows, run_fields

        [job], [run_id] = unit.jobs, unit.run_ids
        if job.traits is None or job.traits.rank is None:
            with store.session() as session:
                summary = job_summary(run_fields(session.get(Run, run_id)), iteration_rows(session, [run_id])[run_id], [])
            job.traits = traits_from_summary(summary, job.recipe.max_slowdown, link) or job.traits

    units = [unit for group in groups for unit in group_units(group, modes, policies)]
    for unit in units:
        if unit.mode == "sequential":
            unit.on_done = learn_traits
    return units


def group_units(group: GroupToRun, modes: list[str], policies: list[str]) -> list[Unit]:
    """The units one group runs as in `modes`, in order: each job alone for sequential, the whole group
    for concurrent, and once per policy for crossover. Also what a group that never ran stands for."""
    if len(group.jobs) == 1:
        # one job shares nothing: concurrent and crossover would only run it alone again
        return [Unit(group.jobs, "sequential" if "sequential" in modes else modes[0], group.index)]
    units = []
    for mode in modes:
        if mode == "sequential":
            units += [Unit([job], "sequential", group.index) for job in group.jobs]
        elif mode == "crossover":
            units += [Unit(group.jobs, "crossover", group.index, policy) for policy in policies]
        else:
            units.append(Unit(group.jobs, mode, group.index))
    return units


def run_groups(db: str | None, groups: list[GroupToRun], modes: list[str], *, bandwidth: str | None = None,
               command: str = "xover run", show_progress: bool = True, plan_body: dict | None = None,
               plan_path: str | None = None, kind: str = "run", policies: list[str] | None = None,
               seconds: float | None = None, timeout_s: float | None = None, wait: bool = False,
               launcher: str = "local", slurm_options: dict[str, Any] | None = None, engine: str = "horovod",
               iterations: int | None = None, mps: bool = False) -> dict[str, Any]:
    """`xover run`: groups in modes. One mode of a plan is its real schedule (groups start as soon as
    their devices are free, side by side); several modes are a comparison, one unit at a time. With
    launcher 'slurm' each group of the plan is a Slurm job (run/slurm.py). With `mps` every unit runs
    under a CUDA MPS daemon of the run's own (run/mps.py)."""
    from ..analysis import compare_groups
    from ..launch.network import requested_rate
    from ..store.models import Experiment as ExperimentRow
    from ..store.queries import experiment_jobs, iteration_rows, store_plan

    bandwidth = requested_rate(bandwidth)
    settings_from_env()  # a bad variable is refused before the plan is recorded
    if mps:
        check_mps()
    policies = policies or [DEFAULT_POLICY]
    for group in groups:
        check_devices(group.jobs)
    warning = nccl_crossover_warning([job for group in groups for job in group.jobs], modes)
    if warning and launcher == "local":
        from ..console import errors

        errors.print(f"warning: {warning}", highlight=False, markup=False)
    link = link_of([job for group in groups for job in group.jobs], bandwidth)
    store = open_store(db)
    for group in groups:
        attach_traits(store, group.jobs, link)
        if seconds is not None:
            give_seconds(group.jobs, seconds, link)
    plan_id = None
    if plan_body:
        with store.session() as session, session.begin():
            plan_id = store_plan(session, plan_body, plan_path)
    comparison = len(modes) > 1 or modes == ["sequential"] or len(policies) > 1
    units = comparison_units(groups, modes, policies, store, link)
    started = time.time()
    slurm_jobs: dict[int, str] = {}
    if launcher == "slurm":
        from ..console import errors
        from . import slurm as on_slurm

        if not plan_path or bandwidth or mps:
            raise XoverError("--launcher slurm runs a plan file (each group one Slurm job), without --bandwidth "
                             "or --mps")
        with experiment(store, kind, command, bandwidth, False, plan_id, timeout_s, link=link) as run:
            on_slurm.submit_and_follow(run, groups, plan_path, modes, policies, engine, iterations, seconds,
                                       store.url, slurm_jobs, errors, timeout_s, **(slurm_options or {}))
    else:
        with experiment(store, kind, command, bandwidth, show_progress, plan_id, timeout_s, link=link) as run:
            lease_devices(run, [job for group in groups for job in group.jobs], wait)
            with MpsDaemon(run.results_dir) if mps else contextlib.nullcontext():
                Scheduler(run.context).run(units, exclusive=comparison)
    makespan_s = time.time() - started
    with store.session() as session:
        iterations = iteration_rows(session, [r.id for r in session.get(ExperimentRow, run.id).runs])
        jobs = experiment_jobs(session, run.id, iterations)
    comparisons = compare_groups(jobs, iterations, policies[0])
    predicted = {g.index: g.predicted_gain for g in groups}
    for comparison_row in comparisons:
        comparison_row["predicted_gain"] = predicted.get(comparison_row["group"])
    result = {"experiment": run.id, "results_dir": str(run.results_dir), "bandwidth": bandwidth,
              "link": None if link == "host" else link, "modes": modes,
              "policies": policies, "jobs": jobs, "groups": comparisons}
    if slurm_jobs:
        result["slurm_jobs"] = {str(index): job_id for index, job_id in slurm_jobs.items()}
    if plan_body and not comparison:
        result["schedule"] = schedule_summary(jobs, plan_body, makespan_s)
    return result


def schedule_summary(jobs: list[dict[str, Any]], plan_body: dict, wall_s: float) -> dict[str, Any]:
    """A plan run as scheduled: measured makespan (first job start to last job end) next to the plan's
    prediction and to running its jobs one after another."""
    from datetime import datetime

    starts = [datetime.fromisoformat(j["started_at"]) for j in jobs if j.get("started_at")]
    ends = [datetime.fromisoformat(j["ended_at"]) for j in jobs if j.get("ended_at")]
    measured = (max(ends) - min(starts)).total_seconds() if starts and ends else wall_s
    return {"measured_makespan_s": measured, "predicted_makespan_s": plan_body.get("predicted_makespan_ms", 0) / 1000,
            "sequential_makespan_s": plan_body.get("sequential_makespan_ms", 0) / 1000,
            "groups_overlapping": _overlapping_groups(jobs)}


def _overlapping_groups(jobs: list[dict[str, Any]]) -> int:
    """How many groups ran at the same time at the busiest moment."""
    from datetime import datetime

    spans: dict[int, list[float]] = {}
    for job in jobs:
        if job.get("started_at") and job.get("ended_at") and job["group"] is not None:
            start = datetime.fromisoformat(job["started_at"]).timestamp()
            end = datetime.fromisoformat(job["ended_at"]).timestamp()
            span = spans.setdefault(job["group"], [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    moments = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()])
    busiest = current = 0
    for _, change in moments:
        current += change
        busiest = max(busiest, current)
    return busiest


def modes_of(mode: str) -> list[str]:
    if mode not in (*MODES, "all"):
        raise XoverError(f"--mode {mode}: choose crossover, concurrent, sequential or all")
    return list(MODES) if mode == "all" else [mode]
