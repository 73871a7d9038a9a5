"""Run jobs: start each through its launcher, watch it, store its metrics, clean up after it.

A *group* of jobs shares the same devices. `run_together` starts every job of a group at once,
in one emulated network when asked, with a turn server when the mode is crossover, and returns
when all have ended. The modes of `xover run` are compositions of it:
  sequential  - each job alone, one after another (the devices to itself);
  concurrent  - the jobs together, without coordination;
  crossover   - the jobs together, taking turns on each device.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from .devices import hardware_fingerprint, local_device_count
from .errors import XoverError
from .launch.horovod import horovodrun_command, is_local, parse_hosts
from .launch.network import network_for
from .launch.torchrun import torchrun_command
from .recipes import Recipe
from .runtime.metrics import parse_metric_line
from .store.models import Evaluation, Experiment, IterationMetric, Run, TurnEvent, utcnow
from .turns.policies import DEFAULT_POLICY, SlotTraits, critical_rank
from .turns.service import TurnServerProcess, runtime_dir, start_local_server
from .store.queries import new_experiment_id, snapshot_recipe
from .store.session import Store

MODES = ("sequential", "concurrent", "crossover")


def results_root() -> Path:
    """Where run logs go: results/ by default, XOVER_RESULTS to move them (tests use a temp dir)."""
    return Path(os.environ.get("XOVER_RESULTS", "results"))


@dataclass
class JobSpec:
    """One job as it will be launched."""

    name: str
    recipe: Recipe
    hosts: str  # horovodrun -H
    devices: list[int]  # device index of each local rank on its host
    engine: str = "horovod"  # horovod | torch
    script: list[str] | None = None  # an unmodified Horovod script and its arguments, instead of a recipe
    traits: SlotTraits | None = None  # what the turn policy knows of it (from its profile)

    @property
    def np(self) -> int:
        return self.recipe.np


class Observer(Protocol):
    def job_started(self, run_id: int, label: str, total: int | None) -> None: ...
    def job_progress(self, run_id: int, step: int, loss: float) -> None: ...
    def job_finished(self, run_id: int, status: str) -> None: ...


class QuietObserver:
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def job_started(self, run_id, label, total): pass
    def job_progress(self, run_id, step, loss): pass
    def job_finished(self, run_id, status): pass


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the run: every process was stopped and the runs marked."""


def kill_tree(pid: int, grace_s: float = 3.0) -> None:
    """Stop a launcher and every process under it: Horovod puts its workers in their own sessions,
    so signalling the launcher's process group alone would leave them running."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


class LaunchedJob:
    """One launcher process; a thread relays its output to the log and its metrics to a queue."""

    def __init__(self, run_id: int, command: list[str], env: dict[str, str], log_dir: Path,
                 events: "queue.Queue[tuple[int, dict[str, Any]]]") -> None:
        self.run_id, self.events = run_id, events
        self.tail: collections.deque[str] = collections.deque(maxlen=25)
        self.log = open(log_dir / "launcher.log", "w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                        text=True, bufsize=1, start_new_session=True, cwd=os.getcwd())
        self.reader = threading.Thread(target=self._relay, daemon=True)
        self.reader.start()

    def _relay(self) -> None:
        for line in self.process.stdout:
            self.log.write(line)
            record = parse_metric_line(line)
            if record is not None:
                self.events.put((self.run_id, record))
            elif line.strip():
                self.tail.append(line.rstrip())
        self.log.close()
        self.events.put((self.run_id, {"kind": "_exit", "code": self.process.wait()}))

    def stop(self) -> None:
        kill_tree(self.process.pid)


@dataclass
class Experimenter:
    """Everything one invocation shares: the store, its experiment row, network, display."""

    store: Store
    kind: str
    command: str
    bandwidth: str | None = None
    observer: Observer = field(default_factory=QuietObserver)
    plan_id: int | None = None
    policy: str = DEFAULT_POLICY  # the turn policy of crossover runs
    experiment_id: str = field(default_factory=new_experiment_id)

    def __post_init__(self) -> None:
        with self.store.session() as session, session.begin():
            session.add(Experiment(id=self.experiment_id, kind=self.kind, command=self.command,
                                   bandwidth=self.bandwidth, plan_id=self.plan_id, hardware=hardware_fingerprint()))
        self.results_dir = results_root() / "runs" / self.experiment_id
        self.results_dir.mkdir(parents=True, exist_ok=True)

    def finish(self, status: str) -> None:
        with self.store.session() as session, session.begin():
            experiment = session.get(Experiment, self.experiment_id)
            experiment.status, experiment.ended_at = status, utcnow()

    # ------------------------------------------------------------------------------- launching

    def run_together(self, jobs: list[JobSpec], mode: str, group_index: int | None = None) -> list[int]:
        """Start the jobs at once on their devices (crossover: taking turns); wait for all. Run ids."""
        events: queue.Queue = queue.Queue()
        runs = self._create_runs(jobs, mode, group_index)
        launched: dict[int, LaunchedJob] = {}
        turn_server = None
        try:
            with network_for(self.bandwidth) as network:
                if mode == "crossover" and len(jobs) > 1:
                    if not all(is_local(h) for job in jobs for h, _ in parse_hosts(job.hosts)):
                        raise XoverError("crossover across several hosts is not supported yet: "
                                         "run one group per host, or use --mode concurrent")
                    turn_server = self._start_turn_server(jobs, group_index or 0)
                for slot, (job, (run_id, log_dir)) in enumerate(zip(jobs, runs)):
                    env = self._worker_env(job, slot if turn_server else None, turn_server)
                    spec_path = log_dir / "spec.json"
                    spec_path.write_text(json.dumps({"job": job.name, "engine": job.engine,
                                                     "recipe": job.recipe.to_dict()}, indent=1))
                    command = network.wrap(launcher_command(job, log_dir / "ranks", spec_path, env))
                    launched[run_id] = LaunchedJob(run_id, command, env, log_dir, events)
                    self._mark_started(run_id)
                self._watch(launched, events, turn_server, {run_id: slot for slot, (run_id, _) in enumerate(runs)})
        except KeyboardInterrupt:
            for job in launched.values():
                job.stop()
            self._mark_interrupted(list(launched) + [r for r, _ in runs])
            raise Interrupted() from None
        finally:
            for job in launched.values():
                if job.process.poll() is None:
                    job.stop()
            if turn_server:
                turn_server.stop()
                self._record_turns(turn_server, runs, group_index)
        return [run_id for run_id, _ in runs]

    def _start_turn_server(self, jobs: list[JobSpec], group_index: int) -> TurnServerProcess:
        order: dict[int, list[int]] = {}
        for slot, job in enumerate(jobs):
            for device in job.devices:
                order.setdefault(device, []).append(slot)
        traits = {slot: job.traits for slot, job in enumerate(jobs) if job.traits is not None}
        socket_path = os.path.join(runtime_dir(), f"{self.experiment_id}-g{group_index}.sock")
        return start_local_server(socket_path, order, self.policy, traits)

    def _record_turns(self, server: TurnServerProcess, runs: list[tuple[int, Path]], group_index: int | None) -> None:
        """What the turn server saw: grants, yields, revocations and each job's rank skew; its events."""
        slots = (server.stats or {}).get("slots", {})
        with self.store.session() as session, session.begin():
            for slot, (run_id, _) in enumerate(runs):
                entry = slots.get(str(slot))
                if entry is not None:
                    session.get(Run, run_id).turn_stats = summarise_turn_stats(entry)
            for event in server.events:
                slot = event.get("slot")
                session.add(TurnEvent(experiment_id=self.experiment_id, group_index=group_index, host="localhost",
                                      run_id=runs[slot][0] if isinstance(slot, int) and slot < len(runs) else None,
                                      kind=event.get("kind", "?"), slot=slot, device=event.get("device"),
                                      detail=event))

    def _worker_env(self, job: JobSpec, slot: int | None, turn_server: TurnServerProcess | None) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1", XOVER_DEVICES=",".join(map(str, job.devices)), XOVER_JOB=job.name)
        env.pop("XOVER_TURN_SOCKET", None)
        # Horovod negotiates between ranks every cycle (1 ms by default) even when idle; on devices that
        # co-located jobs share, that burns cycles a partner needs. 5 ms measured slightly faster here.
        env.setdefault("HOROVOD_CYCLE_TIME", "5")
        if turn_server is not None:
            env.update(XOVER_TURN_SOCKET=turn_server.socket, XOVER_TURN_SLOT=str(slot))
        # horovodrun and its workers must find xover even when it is not installed (tests, a checkout)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def _create_runs(self, jobs: list[JobSpec], mode: str, group_index: int | None) -> list[tuple[int, Path]]:
        created = []
        with self.store.session() as session, session.begin():
            experiment = session.get(Experiment, self.experiment_id)
            hosts = set(experiment.hosts.split(",")) | {h for job in jobs for h, _ in parse_hosts(job.hosts)}
            experiment.hosts = ",".join(sorted(hosts))
            for slot, job in enumerate(jobs):
                snapshot = snapshot_recipe(session, job.recipe)
                run = Run(experiment_id=self.experiment_id, recipe_id=snapshot.id, name=job.name, mode=mode,
                          engine=job.engine, policy=self.policy if mode == "crossover" and len(jobs) > 1 else None,
                          group_index=group_index, slot=slot if mode == "crossover" else None, hosts=job.hosts,
                          np=job.np, devices=",".join(map(str, job.devices)), status="pending",
                          iterations_planned=job.recipe.iterations)
                session.add(run)
                session.flush()
                log_dir = self.results_dir / f"{run.id}-{job.name}-{mode}"
                log_dir.mkdir(parents=True, exist_ok=True)
                run.log_dir = str(log_dir)
                created.append((run.id, log_dir))
        return created

    def _mark_started(self, run_id: int) -> None:
        with self.store.session() as session, session.begin():
            run = session.get(Run, run_id)
            run.status, run.started_at = "running", utcnow()

    def _mark_interrupted(self, run_ids: list[int]) -> None:
        with self.store.session() as session, session.begin():
            for run_id in set(run_ids):
                run = session.get(Run, run_id)
                if run.status in ("pending", "running"):
                    run.status, run.ended_at = "interrupted", utcnow()

    def _watch(self, launched: dict[int, LaunchedJob], events: queue.Queue,
               turn_server: "TurnServerProcess | None" = None, slots: dict[int, int] | None = None) -> None:
        """Store metrics as they come, in batches; return when every launcher has exited."""
        running = set(launched)
        labels = {}
        with self.store.session() as session:
            for run_id in launched:
                run = session.get(Run, run_id)
                labels[run_id] = f"{run.name} [{run.mode}]"
        while running:
            batch = [events.get()]
            deadline = time.monotonic() + 0.25
            while time.monotonic() < deadline:
                try:
                    batch.append(events.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            with self.store.session() as session, session.begin():
                for run_id, record in batch:
                    self._apply(session, launched[run_id], run_id, record, labels[run_id])
                    if record["kind"] == "_exit":
                        running.discard(run_id)
                        if turn_server is not None:
                            turn_server.withdraw(slots[run_id])

    def _apply(self, session, job: LaunchedJob, run_id: int, record: dict[str, Any], label: str) -> None:
        kind = record["kind"]
        if kind == "start":
            run = session.get(Run, run_id)
            run.iterations_planned = record["iterations"]
            run.engine = record.get("engine", run.engine)
            run.gradient_bytes = record.get("gradient_bytes")
            run.checkpoints, run.device = record.get("checkpoints"), record.get("device")
            self.observer.job_started(run_id, label, record["iterations"])
        elif kind == "iter":
            session.add(IterationMetric(run_id=run_id, **{k: record[k] for k in (
                "step", "time_s", "wall_time", "iteration_s", "data_s", "compute_s", "communication_s",
                "wait_s", "samples", "loss")}, **{k: record.get(k) for k in ("yields", "link_s", "comm_cpu_s", "held")}))
            self.observer.job_progress(run_id, record["step"] + 1, record["loss"])
        elif kind == "eval":
            session.add(Evaluation(run_id=run_id, step=record["step"], metric=record["metric"], value=record["value"]))
        elif kind == "end":
            session.get(Run, run_id).peak_memory_gb = record.get("peak_memory_gb")
        elif kind == "_exit":
            run = session.get(Run, run_id)
            code = record["code"]
            run.exit_code, run.ended_at = code, utcnow()
            run.status = "finished" if code == 0 else "failed"
            if code != 0:
                run.error = failure_summary(Path(run.log_dir), list(job.tail))
            self.observer.job_finished(run_id, run.status)


def summarise_turn_stats(entry: dict[str, Any]) -> dict[str, Any]:
    """Grants, yields, revocations, and the skew between the first grants of one iteration on the
    job's devices (how far apart its ranks got their turns), p50/p90/max in ms."""
    skews = sorted((last - first) * 1000 for first, last, devices in entry.get("grant_spans", []) if devices > 1)

    def quantile(q: float) -> float | None:
        return skews[min(len(skews) - 1, int(q * len(skews)))] if skews else None

    return {"grants": entry.get("grants"), "yields": entry.get("yields"), "revoked": entry.get("revoked"),
            "skew_p50_ms": quantile(0.5), "skew_p90_ms": quantile(0.9), "skew_max_ms": skews[-1] if skews else None,
            "iterations": len(entry.get("grant_spans", []))}


def failure_summary(log_dir: Path, launcher_tail: list[str], lines: int = 15) -> str:
    """The last lines of the rank that failed first: its own error, not the launcher's echo of it."""
    for stderr in sorted((log_dir / "ranks").glob("**/stderr*")):  # horovodrun: rank.N/stderr; torchrun: .../N/stderr.log
        text = stderr.read_text(errors="replace").strip().splitlines()
        if any("Traceback" in line or "Error" in line for line in text):
            return f"rank {stderr.parent.name.removeprefix('rank.')}:\n" + "\n".join(text[-lines:])
    return "\n".join(launcher_tail[-lines:])


def install_signal_handlers() -> None:
    """SIGTERM is handled as Ctrl-C, so a stopped `xover` still cleans up its processes."""

    def on_term(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_term)


def check_devices(jobs: list[JobSpec]) -> None:
    """Fail before anything starts when a local job asks for devices this machine does not have."""
    kind, available = local_device_count()
    for job in jobs:
        if not all(is_local(host) for host, _ in parse_hosts(job.hosts)):
            continue  # remote hosts are counted by horovodrun's -H slots
        if job.np > available:
            raise XoverError(f"job '{job.name}' asks for {job.np} devices but this machine has "
                             f"{available} {kind.upper()} device(s); lower np (--np) or add hosts with -H")
        if max(job.devices, default=0) >= available:
            raise XoverError(f"job '{job.name}' is placed on device {max(job.devices)} but this machine has "
                             f"{available} {kind.upper()} device(s)")


def job_for(recipe: Recipe, hosts: str | None = None, devices: list[int] | None = None, name: str | None = None,
            engine: str = "horovod") -> JobSpec:
    if engine not in ENGINES:
        raise XoverError(f"--engine {engine}: choose {' or '.join(ENGINES)}")
    hosts = hosts or f"localhost:{recipe.np}"
    per_host = min(recipe.np, max(slots for _, slots in parse_hosts(hosts)))
    return JobSpec(name=name or recipe.name, recipe=recipe, hosts=hosts, devices=devices or list(range(per_host)),
                   engine=engine)


ENGINES = ("horovod", "torch")


def launcher_command(job: JobSpec, log_dir: Path, spec_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """The real distributed launcher of the job's engine: horovodrun or torchrun."""
    shim = ["-m", "xover.runtime.script_shim", job.engine, *job.script] if job.script else None
    if job.engine == "torch":
        return torchrun_command(job.np, job.hosts, log_dir, spec_path, env, program=shim)
    return horovodrun_command(job.np, job.hosts, log_dir, spec_path,
                              program=[sys.executable, "-u", *shim] if shim else None)


def groups_from_scripts(scripts: list[str], args: list[str], np: int | None, iterations: int | None,
                        engine: str = "horovod") -> list[GroupToRun]:
    """`xover run --script a.py --script b.py -- ARGS`: unmodified training scripts as one group, under
    horovodrun (Horovod scripts, --engine horovod) or torchrun (DistributedDataParallel scripts, --engine torch)."""
    import hashlib

    if iterations is not None:
        raise XoverError("--iterations applies to recipes; pass the script's own option after --")
    if engine not in ENGINES:
        raise XoverError(f"--engine {engine}: choose {' or '.join(ENGINES)}")
    kind = "Horovod" if engine == "horovod" else "torch.distributed (DDP)"
    np = np or local_device_count()[1]
    jobs = []
    for script in scripts:
        path = Path(script)
        if not path.is_file():
            raise XoverError(f"--script {script}: file not found")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        # The store keeps what ran as a recipe snapshot: the script, its arguments and content hash.
        recipe = Recipe(name=path.stem, model="script", dataset="script", batch_size=1, optimizer="script", lr=1.0,
                        np=np, seed=0, description=f"unmodified {kind} script {script}",
                        model_options={"script": str(path), "args": args, "sha256": digest, "engine": engine},
                        path=str(path))
        jobs.append(JobSpec(name=path.stem, recipe=recipe, hosts=f"localhost:{np}", devices=list(range(np)),
                            script=[str(path), *args], engine=engine))
    return [GroupToRun(0, _unique_names(jobs))]


# ----------------------------------------------------------------------------------- commands


@contextlib.contextmanager
def experiment(store: Store, kind: str, command: str, bandwidth: str | None, show_progress: bool,
               plan_id: int | None = None, policy: str = DEFAULT_POLICY):
    """One invocation's experiment: live progress while it runs, its final status whatever happens."""
    from .console import ProgressObserver

    install_signal_handlers()
    observer = ProgressObserver() if show_progress else QuietObserver()
    experimenter = Experimenter(store, kind, command, bandwidth=bandwidth, observer=observer, plan_id=plan_id,
                                policy=policy)
    status = "finished"
    try:
        with observer:
            yield experimenter
    except (Interrupted, KeyboardInterrupt):
        status = "interrupted"
        raise
    except BaseException:
        status = "failed"
        raise
    finally:
        experimenter.finish(status)


def train_recipe(db: str | None, recipe_path: str, *, np: int | None = None, hosts: str | None = None,
                 iterations: int | None = None, bandwidth: str | None = None, command: str = "xover train",
                 show_progress: bool = True, engine: str = "horovod") -> dict[str, Any]:
    """`xover train`: one recipe alone through horovodrun. Returns the experiment's job summaries."""
    from .launch.network import check_rate
    from .recipes import load_recipe, with_overrides
    from .store.queries import experiment_jobs
    from .store.session import open_store

    recipe = with_overrides(load_recipe(recipe_path), iterations=iterations, np=np)
    if hosts:
        parse_hosts(hosts)
    if bandwidth:
        bandwidth = check_rate(bandwidth)
    job = job_for(recipe, hosts, engine=engine)
    check_devices([job])
    store = open_store(db)
    with experiment(store, "train", command, bandwidth, show_progress) as experimenter:
        experimenter.run_together([job], "solo")
    with store.session() as session:
        jobs = experiment_jobs(session, experimenter.experiment_id)
    for job_summary in jobs:
        job_summary["slowdown"] = 1.0
    return {"experiment": experimenter.experiment_id, "results_dir": str(experimenter.results_dir), "jobs": jobs}


@dataclass
class GroupToRun:
    index: int
    jobs: list[JobSpec]
    predicted_gain: float | None = None


def groups_from_recipes(recipe_paths: list[str], iterations: int | None, engine: str = "horovod",
                        np: int | None = None) -> list[GroupToRun]:
    """`xover run --group A B`: one ad-hoc group on devices 0..np-1 of this machine."""
    from .recipes import load_recipe, with_overrides

    recipes = [with_overrides(load_recipe(path), iterations=iterations, np=np) for path in recipe_paths]
    return [GroupToRun(0, _unique_names([job_for(r, engine=engine) for r in recipes]))]


def groups_from_plan(plan_path: str, iterations: int | None, engine: str = "horovod") -> tuple[list[GroupToRun], dict[str, Any]]:
    """The groups of a plan file written by `xover plan`; every recipe is checked before anything starts."""
    from .planner import plan_from_dict
    from .recipes import RecipeError, load_recipe, with_overrides

    try:
        body = json.loads(Path(plan_path).read_text())
    except FileNotFoundError:
        raise XoverError(f"{plan_path}: plan file not found (write one with `xover plan --out {plan_path}`)") from None
    except json.JSONDecodeError as error:
        raise XoverError(f"{plan_path}: not valid JSON: {error}") from None
    try:
        plan_from_dict(body)  # validates the format, naming the field that is wrong
    except XoverError as error:
        raise XoverError(f"{plan_path}: {error}") from None
    groups = []
    for index, group in enumerate(body["groups"]):
        jobs = []
        for name in group["jobs"]:
            planned = body["jobs"].get(name, {})
            recipe_path = planned.get("recipe") or name
            try:  # the plan decides how many devices the job gets
                recipe = with_overrides(load_recipe(recipe_path), iterations=iterations, np=planned.get("devices"))
            except RecipeError as error:
                raise XoverError(f"{plan_path}: group {index}, job '{name}': {error}") from None
            hosts = sorted({d.rsplit(":", 1)[0] for d in group["devices"]})
            devices = [int(d.rsplit(":", 1)[1]) for d in group["devices"]][: recipe.np]
            host_spec = ",".join(f"{h}:{sum(1 for d in group['devices'] if d.startswith(h + ':'))}" for h in hosts)
            traits = traits_of(planned["data_ms"] + planned["compute_ms"] if "data_ms" in planned else planned["compute_ms"],
                               planned["comm_ms"], planned.get("max_slowdown", recipe.max_slowdown))
            jobs.append(JobSpec(name=name, recipe=recipe, hosts=host_spec if len(hosts) > 1 else f"{hosts[0]}:{recipe.np}",
                                devices=devices, engine=engine, traits=traits))
        groups.append(GroupToRun(index, jobs, group.get("predicted_gain")))
    return groups, body


def attach_traits(store: Store, jobs: list[JobSpec], bandwidth: str | None) -> None:
    """What the turn policy should know of each job, from its stored profile (same recipe, np, link,
    engine): its compute fraction ranks it (critical path first), its solo time and max_slowdown
    protect it. Without a profile the server learns the fraction from what it sees."""
    from .profiler import find_profile

    hardware = hardware_fingerprint()
    for job in jobs:
        if job.traits is not None:
            continue
        found = None if job.script else find_profile(store, job.recipe.hash, job.recipe.np, bandwidth or "host",
                                                     hardware, job.engine)
        job.traits = SlotTraits(rank=None, max_slowdown=job.recipe.max_slowdown, solo_iteration_s=None)
        if found is not None:
            job.traits = traits_of(found.data_ms + found.compute_ms, found.comm_ms, job.recipe.max_slowdown)


def give_seconds(jobs: list[JobSpec], seconds: float, bandwidth: str | None) -> None:
    """Each job gets the iterations it does in about `seconds` alone (from its profile's time per
    iteration), so that jobs of a group overlap from start to end."""
    from .recipes import with_overrides

    for job in jobs:
        solo_s = job.traits.solo_iteration_s if job.traits else None
        if not solo_s:
            link = f" --bandwidth {bandwidth}" if bandwidth else ""
            raise XoverError(f"--seconds needs each job's time per iteration: no profile of '{job.name}' "
                             f"(np {job.np}, engine {job.engine}) at this link; run `xover profile "
                             f"{job.recipe.path or job.name}{link} --engine {job.engine}` first, or use --iterations")
        job.recipe = with_overrides(job.recipe, iterations=max(5, math.ceil(seconds / solo_s)))


def traits_from_run(store: Store, run_id: int, max_slowdown: float | None) -> SlotTraits | None:
    """Traits from a job's run alone (the sequential mode), when no profile was stored."""
    from .analysis import job_summary
    from .store.queries import iteration_rows, run_fields

    with store.session() as session:
        summary = job_summary(run_fields(session.get(Run, run_id)), iteration_rows(session, [run_id])[run_id], [])
    if summary["status"] != "finished" or summary["compute_ms"] is None:
        return None
    return traits_of((summary["data_ms"] or 0.0) + summary["compute_ms"], summary["communication_ms"] or 0.0,
                     max_slowdown)


def traits_of(device_ms: float, comm_ms: float, max_slowdown: float | None) -> SlotTraits:
    solo_s = (device_ms + comm_ms) / 1000
    return SlotTraits(rank=critical_rank(device_ms / 1000, solo_s), max_slowdown=max_slowdown, solo_iteration_s=solo_s)


def _unique_names(jobs: list[JobSpec]) -> list[JobSpec]:
    """Two copies of one recipe in a group get distinct job names (name, name#2)."""
    seen: dict[str, int] = {}
    for job in jobs:
        seen[job.name] = seen.get(job.name, 0) + 1
        if seen[job.name] > 1:
            job.name = f"{job.name}#{seen[job.name]}"
    return jobs


def run_groups(db: str | None, groups: list[GroupToRun], modes: list[str], *, bandwidth: str | None = None,
               command: str = "xover run", show_progress: bool = True, plan_body: dict | None = None,
               plan_path: str | None = None, kind: str = "run", policies: list[str] | None = None,
               seconds: float | None = None) -> dict[str, Any]:
    """`xover run`: every group in every asked mode, one after another; returns jobs and group comparisons."""
    from .launch.network import check_rate
    from .analysis import compare_groups
    from .store.queries import experiment_jobs, iteration_rows, store_plan
    from .store.session import open_store

    if bandwidth:
        bandwidth = check_rate(bandwidth)
    for group in groups:
        check_devices(group.jobs)
    store = open_store(db)
    plan_id = None
    if plan_body:
        with store.session() as session, session.begin():
            plan_id = store_plan(session, plan_body, plan_path)
    policies = policies or [DEFAULT_POLICY]
    for group in groups:
        attach_traits(store, group.jobs, bandwidth)
        if seconds is not None:
            give_seconds(group.jobs, seconds, bandwidth)
    with experiment(store, kind, command, bandwidth, show_progress, plan_id, policies[0]) as experimenter:
        for group in groups:
            for mode in modes:
                if mode == "sequential":
                    for job in group.jobs:
                        [run_id] = experimenter.run_together([job], "sequential", group.index)
                        if job.traits is None or job.traits.rank is None:
                            job.traits = traits_from_run(store, run_id, job.recipe.max_slowdown) or job.traits
                elif mode == "crossover":
                    for policy in policies:
                        experimenter.policy = policy
                        experimenter.run_together(group.jobs, mode, group.index)
                else:
                    experimenter.run_together(group.jobs, mode, group.index)
    with store.session() as session:
        iterations = iteration_rows(session, [run.id for run in session.get(Experiment, experimenter.experiment_id).runs])
        jobs = experiment_jobs(session, experimenter.experiment_id, iterations)
    comparisons = compare_groups(jobs, iterations, policies[0])
    predicted = {g.index: g.predicted_gain for g in groups}
    for comparison in comparisons:
        comparison["predicted_gain"] = predicted.get(comparison["group"])
    return {"experiment": experimenter.experiment_id, "results_dir": str(experimenter.results_dir),
            "bandwidth": bandwidth, "modes": modes, "jobs": jobs, "groups": comparisons}
