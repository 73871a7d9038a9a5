"""`xover profile`: run each recipe alone and summarise what it does per iteration.

A profile holds medians (and p10/p90) of data, compute and exposed-communication time, the
iteration time, samples/s, peak memory and gradient bytes; and what the model of sharing needs:
how long the all-reduce keeps the link busy (from the gradient bytes and the link rate, never
below the exposed communication nor above the measured span of the all-reduces), the CPU that
communication takes per iteration on top of the job's own compute (the machine's busy CPU time
while it runs alone, minus its compute and xover's own share), and the layer boundaries per
iteration. It is keyed by recipe hash, np, hosts spanned, bandwidth, engine, a hardware fingerprint and the
settings that change a job alone (XOVER_THREADS_PER_RANK, or the user's OMP_NUM_THREADS where it is not given:
the count torch computes on, settings.threads_per_rank; XOVER_PIN_CORES, XOVER_TORCH_BACKEND, XOVER_DETERMINISTIC),
and reused until `--force`. A job file's own `env` (its OMP_NUM_THREADS too) is part of its key.

Then (unless `--no-corun`) each job runs once more, under crossover next to a reference partner
(`mlp-balanced` unless `--corun-with`): jobs that share devices slow each other beyond taking turns
(the partner's communication on the same cores: the engines' threads, the kernel's network work, the
caches they evict), and how much is a property of the job. The fraction by which its device time
there exceeds its device time alone is its `interference`, which the predictions charge whenever it
shares its devices (half of it scaled by how much the partners communicate next to how much the
reference partner did: `planner.model.interference_next_to`).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import statistics
import threading
import time
from dataclasses import dataclass
from datetime import timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..devices import gpu_ids, hardware_fingerprint, local_device_count
from ..errors import XoverError
from ..hosts import parse_hosts
from ..links import Link
from ..plan.from_profiles import job_profile
from ..plan.model import link_busy_ms, measured_interference
from ..recipes import MAX_ITERATIONS, Recipe, RecipeError, load_recipe, with_overrides
from ..run.experiment import Experiment, experiment, lease_devices, link_of
from ..run.jobs import job_for
from ..run.mps import MpsDaemon, control_program
from ..run.ranks import check_devices
from ..run.record import shim_refusal
from ..run.schedule import Scheduler, Unit
from ..run.sinks import default_sinks
from ..run.traits import traits_of
from ..sharing import Mode, RunStatus
from ..store.models import IterationMetric, Profile, Run
from ..store.profiles import find_profile, tuning_here
from ..store.queries import snapshot_recipe
from ..store.session import Store, open_store
from ..turns.policies import DEFAULT_POLICY

BASELINE_S = 0.5  # how long the machine's load is read before a profile's run starts: what else runs on it
BUSY_BEFORE = 0.25  # of the machine's cores busy with other work before a run: its profile is said to be less sure


class MachineLoad:
    """Samples the machine's busy CPU time (/proc/stat) and xover's own while a profile runs; on a GPU
    also the first GPU's utilisation through NVML (the share of its last sample period in which a kernel
    ran), every `gpu_every_s`.

    The job's communication costs CPU outside its ranks too (the kernel's network stack, the shaped link), so
    it is read from the whole machine. What else keeps the machine busy (another user's job, a test suite) is
    read for `baseline_s` before the run starts, while nothing of it runs, and taken off: without it a profile
    taken on a busy machine charged that load to the job's communication, and the plan then saw no gain in any
    group (`make demo` beside a test suite, 2026-12-02). On a machine that other work keeps busy the job's own
    figures are not those of the job alone either: the profile says so (`busy_before`)."""

    def __init__(self, every_s: float = 0.2, gpu_every_s: float = 0.02, baseline_s: float = BASELINE_S) -> None:
        self.every_s = every_s
        self.baseline_s = baseline_s
        self.baseline_cores = 0.0  # cores busy with other work before the run (never xover's own)
        self.samples: list[tuple[float, float, float]] = []  # wall time, busy cpu-s, xover's own cpu-s
        self.gpu_samples: list[tuple[float, float]] = []  # wall time, utilisation 0..1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._gpu_thread = threading.Thread(target=self._sample_gpu, args=(gpu_every_s,), daemon=True)

    def _sample_gpu(self, every_s: float) -> None:
        gpus = gpu_ids()
        if not gpus:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no driver or no library: nothing to sample
            return
        try:
            first = gpus[0]
            handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(first))
                if first.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(first)
            )
            while not self._stop.is_set():
                self.gpu_samples.append((time.time(), pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100))
                self._stop.wait(every_s)
        except Exception:  # NVML refused a call: keep what was sampled
            return
        finally:
            pynvml.nvmlShutdown()

    @staticmethod
    def _busy_seconds() -> float | None:
        try:
            with open("/proc/stat") as handle:
                fields = [int(x) for x in handle.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while not self._stop.is_set():
            if (sample := self._busy_and_own()) is not None:
                self.samples.append(sample)
            self._stop.wait(self.every_s)

    def _busy_and_own(self) -> tuple[float, float, float] | None:
        busy = self._busy_seconds()
        if busy is None:
            return None
        own = resource.getrusage(resource.RUSAGE_SELF)
        return time.time(), busy, own.ru_utime + own.ru_stime

    def __enter__(self) -> MachineLoad:
        if self.baseline_s > 0 and (before := self._busy_and_own()) is not None:
            time.sleep(self.baseline_s)
            after = self._busy_and_own()
            if after is not None and after[0] > before[0]:
                self.baseline_cores = self._cores_between(before, after)
        self._thread.start()
        self._gpu_thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._gpu_thread.join()

    def busy_cores(self, start: float, end: float) -> float | None:
        """Cores kept busy between two wall times by the run: everything but xover itself and what kept the
        machine busy before it started (`baseline_cores`)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
            return None
        return max(0.0, self._cores_between(inside[0], inside[-1]) - self.baseline_cores)

    @staticmethod
    def _cores_between(first: tuple[float, float, float], last: tuple[float, float, float]) -> float:
        """Cores kept busy between two samples by everything but xover itself."""
        (t0, busy0, own0), (t1, busy1, own1) = first, last
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)

    @property
    def busy_before(self) -> float | None:
        """The share of the machine's cores that other work kept busy before the run, where it is over
        BUSY_BEFORE; else None."""
        share = self.baseline_cores / (os.cpu_count() or 1)
        return share if share > BUSY_BEFORE else None


def busy_in_windows(samples: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float | None:
    """The mean of the utilisation samples taken inside the windows (wall-time spans; a job's compute
    phases), not of the whole run: how busy one job computing keeps the GPU. None without samples there."""
    inside = [value for moment, value in samples if any(start <= moment <= end for start, end in windows)]
    return sum(inside) / len(inside) if inside else None


def compute_windows(metrics: list[IterationMetric], warmup: int) -> list[tuple[float, float]]:
    """Each measured iteration's data and compute phase as a wall-time span: it ends when the backward
    pass is done, which is when the iteration's record is stamped."""
    return [(m.wall_time - (m.data_s or 0.0) - m.compute_s, m.wall_time) for m in metrics[warmup:]]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


SETTLED_RATIO = 0.8  # the last third of the measured steps this much faster than the first: not yet settled


def still_settling(iteration_s: list[float], warmup: int) -> tuple[float, float] | None:
    """(first, last) ms: the medians of the first and the last third of the steps after `warmup`, where the
    last are over a fifth faster - the job was still warming up (on an H200 over Gloo on a shaped link, a
    job's steps went 370 to 175 ms over steps 3-7 and settled at 150 from step 9: docs/measurements.md,
    2026-12-04); None where it had settled."""
    measured = iteration_s[warmup:]
    if len(measured) < 3:
        return None
    third = len(measured) // 3
    first, last = statistics.median(measured[:third]), statistics.median(measured[-third:])
    return (first * 1000, last * 1000) if last < SETTLED_RATIO * first else None


def summarise(metrics: list[IterationMetric], warmup: int) -> dict[str, Any]:
    """A profile's figures from rank 0's iterations after `warmup`: each phase's median and spread, the
    throughput, the link's busy span, and the window they cover; fewer than 3 iterations left is an error."""
    steady = metrics[warmup:]
    if len(steady) < 3:
        raise XoverError(f"only {len(steady)} iterations after a warm-up of {warmup}: raise --iterations")
    phases = {
        "data": [m.data_s for m in steady],
        "compute": [m.compute_s for m in steady],
        "comm": [m.communication_s for m in steady],
        "iteration": [m.iteration_s for m in steady],
    }
    medians = {name: statistics.median(values) * 1000 for name, values in phases.items()}
    spread = {
        name: {"p10_ms": _quantile(v, 0.1) * 1000, "p90_ms": _quantile(v, 0.9) * 1000} for name, v in phases.items()
    }
    samples_per_s = sum(m.samples for m in steady) / sum(m.iteration_s for m in steady)
    spans = [m.link_s for m in steady if m.link_s is not None]
    return {
        "data_ms": medians["data"],
        "compute_ms": medians["compute"],
        "comm_ms": medians["comm"],
        "iteration_ms": medians["iteration"],
        "samples_per_s": samples_per_s,
        "spread": spread,
        "iterations": len(steady),
        "link_span_ms": statistics.median(spans) * 1000 if spans else None,
        "window": (steady[0].wall_time - steady[0].iteration_s, steady[-1].wall_time),
    }


def link_ms_of(summary: dict[str, Any], gradient_bytes: int, np: int, hosts: int, link: Link) -> float:
    """The link's busy time per iteration: what the gradient bytes take at the link's rate, within
    [exposed communication, the measured span of the all-reduces]; unshaped: the exposed time."""
    comm = summary["comm_ms"]
    if link.bits_per_s is None:
        return comm
    estimate = link_busy_ms(gradient_bytes, np, hosts, link.bits_per_s)
    span = summary["link_span_ms"]
    return max(comm, min(estimate, span) if span is not None else estimate)


def comm_cpu_ms_of(summary: dict[str, Any], load: MachineLoad | None, np: int, device: str | None) -> float | None:
    """CPU per iteration and rank beyond the job's own compute: its communication's cost to a partner
    computing on the same cores. None when it cannot be told (no /proc/stat, a GPU job)."""
    if load is None or (device or "").startswith("cuda"):
        return None
    busy = load.busy_cores(*summary["window"])
    if busy is None:
        return None
    device_ms = summary["data_ms"] + summary["compute_ms"]
    return max(0.0, (busy * summary["iteration_ms"] - np * device_ms) / np)


def corun_device_ms(
    job_metrics: list[IterationMetric],
    partner_metrics: list[IterationMetric],
    warmup: int,
    partner_still_iterating: bool = False,
) -> float | None:
    """The job's median device time (data + compute) over its iterations after warm-up that ended
    while its partner still ran (all of them when the partner was stopped at the job's end with
    iterations left, even if it had not finished one); None when fewer than 3 did."""
    if partner_still_iterating:
        partner_end = math.inf
    elif partner_metrics:
        partner_end = max(m.wall_time for m in partner_metrics)
    else:
        return None
    shared = [m for m in job_metrics[warmup:] if m.wall_time <= partner_end]
    if len(shared) < 3:
        return None
    return statistics.median((m.data_s or 0.0) + m.compute_s for m in shared) * 1000


def corun_partner_iterations(
    iterations: int,
    job_iteration_ms: float,
    partner_device_ms: float,
    partner_iteration_ms: float,
    job_startup_ms: float | None = None,
) -> int:
    """How many iterations the reference partner is given next to a job measured for `iterations`: enough
    to outlast the job, since only the job's iterations that end while the partner runs count (it is
    stopped when the job ends, so a generous count costs nothing). Under crossover a job's iteration can
    take its own time plus the partner's device time, and the partner may start iterating while the job
    still starts (its launcher, imports, data); twice that, because the profiles may come from a quieter
    or busier machine than this run (docs/measurements.md, *make test's time*)."""
    job_span_ms = iterations * (job_iteration_ms + partner_device_ms) + (job_startup_ms or 0.0)
    return max(iterations, math.ceil(2 * job_span_ms / partner_iteration_ms))


def startup_ms_of(run: Run, metrics: list[IterationMetric]) -> float | None:
    """From the launcher's start to the start of the first iteration."""
    if not metrics or run.started_at is None:
        return None
    first = metrics[0]
    launched = run.started_at.replace(tzinfo=timezone.utc).timestamp()  # the store keeps naive UTC
    return max(0.0, (first.wall_time - first.iteration_s - launched) * 1000)


def profile_dict(profile: Profile) -> dict[str, Any]:
    """A stored profile as `xover profile --json` shows it (measured or reused), with its compute fraction."""
    c = profile.data_ms + profile.compute_ms
    return {
        "name": profile.name,
        "recipe": profile.recipe.path,
        "recipe_hash": profile.recipe_hash,
        "np": profile.np,
        "hosts": profile.hosts,
        "engine": profile.engine,
        "bandwidth": profile.bandwidth,
        "hardware": profile.hardware,
        "data_ms": profile.data_ms,
        "compute_ms": profile.compute_ms,
        "comm_ms": profile.comm_ms,
        "iteration_ms": profile.iteration_ms,
        "samples_per_s": profile.samples_per_s,
        "memory_gb": profile.memory_gb,
        "gradient_mb": profile.gradient_bytes / 2**20,
        "link_ms": profile.link_ms,
        "comm_cpu_ms": profile.comm_cpu_ms,
        "checkpoints": profile.checkpoints,
        "corun_partner": profile.corun_partner,
        "corun_device_ms": profile.corun_device_ms,
        "interference": profile.interference,
        "corun_partner_link_share": profile.corun_partner_link_share,
        "startup_ms": profile.startup_ms,
        "corun_stretch": profile.corun_stretch,
        "mps_stretch": profile.mps_stretch,
        "gpu_busy": profile.gpu_busy,
        "compute_fraction": c / (c + profile.comm_ms) if c + profile.comm_ms > 0 else 1.0,
        "iterations_measured": profile.iterations,
        "spread": profile.spread,
        "planned_iterations": profile.recipe.body.get("iterations"),
        "profile_id": profile.id,
        "created_at": profile.created_at.isoformat(timespec="seconds"),
    }


DEFAULT_CORUN_PARTNER = "mlp-balanced"  # balanced compute and all-reduce: a partner that does both


@dataclass(frozen=True)
class ProfileOptions:
    """How `xover profile` measures its jobs: the command line's choices (docs/reference.md)."""

    np: int | None = None  # every recipe's ranks (default: its own)
    iterations: int = 30
    warmup: int = 5  # iterations left out of the figures
    link: Link | None = None  # --bandwidth (a shaped loopback, or the host network); None: the jobs' own
    engine: str = "horovod"  # what runs the built-in models (a script runs under its own)
    hosts: str | None = None  # -H
    force: bool = False  # measure again even where a stored profile fits
    wait: bool = False  # for devices another xover holds
    corun_with: str | None = DEFAULT_CORUN_PARTNER  # the reference partner of the interference; None: not measured
    stretch: bool | None = None  # measure the co-run stretch (None: on GPUs, where sharing without turns differs)
    command: str = "xover profile"  # the command line, as recorded
    show_progress: bool = True


def profile_recipes(
    db: str | None,
    recipe_paths: list[str],
    options: ProfileOptions = ProfileOptions(),
    scripts: list[Recipe] | None = None,
) -> list[dict[str, Any]]:
    """Profile each recipe alone (a stored profile is reused unless `force`), then, unless
    `corun_with` is None, measure its interference next to that partner (once per profile).
    `engine` runs the built-in models; a script (a job file, or `scripts` from --script) runs under
    its own, measured through the shims that run it unmodified (an optimizer step is an iteration)."""
    if options.warmup < 0:
        raise XoverError(f"--warmup {options.warmup}: give the iterations left out of the figures, a whole number >= 0")
    if options.iterations <= options.warmup + 2 or options.iterations > MAX_ITERATIONS:
        raise XoverError(
            f"--iterations ({options.iterations}) must exceed --warmup ({options.warmup}) by at least 3, "
            f"and be at most {MAX_ITERATIONS}"
        )
    recipes = _once_each(
        [with_overrides(load_recipe(path), np=options.np) for path in recipe_paths] + list(scripts or [])
    )
    if not recipes:
        raise XoverError("give recipes or job files to profile (or --script FILE)")
    try:
        partner_recipe = load_recipe(options.corun_with) if options.corun_with else None
    except RecipeError as error:
        raise XoverError(f"--corun-with: {error}") from None
    jobs = [job_for(recipe, options.hosts, engine=options.engine) for recipe in recipes]
    check_devices(jobs)
    profiling = _Profiling(open_store(db), options, recipes, jobs, link_of(jobs, options.link), partner_recipe)
    return profiling.run()


def _once_each(recipes: list[Recipe]) -> list[Recipe]:
    """Each job once: the same file given twice is one profile (it was measured twice, alone and next to the
    partner, for one stored profile); two files of one job name are refused, as `plan` refuses them."""
    kept: dict[str, Recipe] = {}
    for recipe in recipes:
        twin = kept.get(recipe.name)
        if twin is None:
            kept[recipe.name] = recipe
        elif twin != recipe:
            raise XoverError(
                f"{recipe.named_twice(twin)}; a profile is stored by job name: give a copy its own `name` in a job file"
            )
    return list(kept.values())


class _Profiling:
    """One `xover profile`: what is stored already, what is measured, and the measuring."""

    def __init__(
        self,
        store: Any,
        options: ProfileOptions,
        recipes: list[Recipe],
        jobs: list[Any],
        link: Link,
        partner_recipe: Recipe | None,
    ) -> None:
        self.store, self.options, self.recipes, self.jobs, self.link = store, options, recipes, jobs, link
        self.partner_recipe = partner_recipe
        self.hardware = hardware_fingerprint()
        on_gpu = local_device_count()[0] == "gpu"
        self.with_mps = on_gpu and control_program() is not None
        self.measure_stretch = on_gpu if options.stretch is None else options.stretch
        self.profiles: dict[int, Profile] = {}
        self.alone: list[int] = []
        self.corun: list[int] = []
        self.stretch: list[int] = []
        self._find_what_is_missing()
        self.measured: dict[int, list[str]] = {}  # job -> what of it was measured now (alone, interference, stretch)
        self.busy_before: dict[str, float] = {}  # job name -> share of the cores other work kept busy before its run
        self.settling: dict[str, tuple[float, float]] = {}  # job name -> its steps still speeding up (still_settling)
        self.partners: dict[int, tuple[Recipe, Profile]] = {}  # np -> the partner recipe at that np, its profile

    def _find_what_is_missing(self) -> None:
        """Each job's stored profile, and what is missing of it: asked again once the devices are leased, since
        another xover may have profiled the same job while this one waited for them (`--wait`: two profiles of
        one job, the second measured for nothing)."""
        force, partner_recipe = self.options.force, self.partner_recipe
        found = {i: None if force else self.stored(r, j) for i, (r, j) in enumerate(zip(self.recipes, self.jobs))}
        self.profiles = {i: profile for i, profile in found.items() if profile is not None}
        self.alone = [i for i, profile in found.items() if profile is None]
        self.corun = [
            i for i, profile in found.items() if partner_recipe and (profile is None or profile.interference is None)
        ]
        self.stretch = [
            i
            for i, profile in found.items()
            if self.measure_stretch
            and (profile is None or profile.corun_stretch is None or (self.with_mps and profile.mps_stretch is None))
        ]

    def stored(self, recipe: Recipe, job: Any) -> Profile | None:
        """The profile stored for this recipe and placement on this link and hardware, if any."""
        return find_profile(
            self.store, recipe.profile_keys, recipe.np, self.link.key, self.hardware, job.engine, len(job.devices)
        )

    def run(self) -> list[dict[str, Any]]:
        """Measure what is missing, in one experiment; every profile, each marked reused or not."""
        options = self.options
        if self.alone or self.corun or self.stretch:
            with experiment(
                self.store,
                "profile",
                options.command,
                self.link,
                default_sinks(options.show_progress),
                kept_empty=False,
            ) as current:
                lease_devices(current, self.jobs, options.wait)
                if options.wait:
                    self._find_what_is_missing()  # nothing left to measure: an experiment of no runs, not kept
                self._measure(current)
        # a profile is found by what the job computes: one stored under another name is named as asked here
        return [
            {
                **profile_dict(self.profiles[i]),
                "name": self.recipes[i].name,
                "reused": i not in self.measured,
                "measured": self.measured.get(i, []),  # what of it (alone, interference, stretch); none: reused
                "busy_before": self.busy_before.get(self.recipes[i].name) if i in self.measured else None,
                "settling": self.settling.get(self.recipes[i].name) if i in self.measured else None,
            }
            for i in range(len(self.recipes))
        ]

    def _measure(self, current: Any) -> None:
        options, recipes, jobs = self.options, self.recipes, self.jobs
        for i in self.alone:
            self.profiles[i] = self._measure_alone(current, recipes[i], jobs[i])
            self.measured.setdefault(i, []).append("alone")
        for i in self.corun:
            partner, partner_profile = self._partner(current, recipes[i], jobs[i])
            self.profiles[i] = _measure_corun(
                current,
                self.store,
                recipes[i],
                jobs[i],
                self.profiles[i],
                partner,
                partner_profile,
                options.iterations,
                options.warmup,
                options.engine,
            )
            self.measured.setdefault(i, []).append("interference")
        for i in self.stretch:
            self.profiles[i] = _measure_stretch(
                current,
                self.store,
                recipes[i],
                jobs[i],
                self.profiles[i],
                options.iterations,
                options.warmup,
                options.engine,
                self.with_mps,
            )
            self.measured.setdefault(i, []).append("stretch")

    def _measure_alone(self, current: Any, recipe: Recipe, job: Any) -> Profile:
        options = self.options
        unit = Unit(
            [job_for(with_overrides(recipe, iterations=options.iterations), job.hosts, engine=options.engine)],
            Mode.PROFILE.value,
        )
        with MachineLoad() as load:
            Scheduler(current.context).run([unit], exclusive=True)
        if load.busy_before is not None:
            self.busy_before[recipe.name] = load.busy_before
        profile, settling = _store_profile(
            self.store, recipe, unit.run_ids[0], self.link, self.hardware, options.warmup, job.engine, load
        )
        if settling is not None:
            self.settling[recipe.name] = settling
        return profile

    def _partner(self, current: Any, recipe: Recipe, job: Any) -> tuple[Recipe, Profile]:
        """The reference partner at the recipe's np, and its profile: one just measured, stored, or measured now."""
        if recipe.np not in self.partners:
            assert self.partner_recipe is not None  # `corun` is empty without one
            partner = with_overrides(self.partner_recipe, np=recipe.np)
            partner_job = job_for(partner, job.hosts, engine=self.options.engine)
            key = partner.profile_key
            just_measured = [self.profiles[k] for k in self.measured if self.recipes[k].profile_key == key]
            # stored, --force or not: --force measures the jobs named, the reference partner only where named too
            profile = (
                just_measured[0]
                if just_measured
                else self.stored(partner, partner_job) or self._measure_alone(current, partner, partner_job)
            )
            self.partners[recipe.np] = (partner, profile)
        return self.partners[recipe.np]


def _measure_corun(
    current: Experiment,
    store: Store,
    recipe,
    job,
    profile: Profile,
    partner,
    partner_profile: Profile,
    iterations: int,
    warmup: int,
    engine: str,
) -> Profile:
    """Run `recipe` under crossover next to `partner` and store its interference on `profile`."""
    partner_iterations = corun_partner_iterations(
        iterations,
        profile.iteration_ms,
        partner_profile.data_ms + partner_profile.compute_ms,
        partner_profile.iteration_ms,
        profile.startup_ms,
    )
    pair = [
        job_for(with_overrides(recipe, iterations=iterations), job.hosts, engine=engine),
        job_for(
            with_overrides(partner, iterations=partner_iterations),
            job.hosts,
            name=f"{partner.name}#partner",
            engine=engine,
        ),
    ]
    for spec, measured in zip(pair, (profile, partner_profile)):  # ranked as `xover run` ranks them
        spec.traits = traits_of(measured.data_ms + measured.compute_ms, measured.comm_ms, spec.recipe.max_slowdown)
    # the partner is stopped when the job ends: its iterations after that would count for nothing
    unit = Unit(pair, Mode.CROSSOVER.value, policy=DEFAULT_POLICY, ends_with=0)
    Scheduler(current.context).run([unit], exclusive=True)
    with store.session() as session, session.begin():
        runs = [session.get_one(Run, run_id) for run_id in unit.run_ids]
        # only the partner can be stopped
        failed = [r for r in runs if r.status not in (RunStatus.FINISHED, RunStatus.STOPPED)]
        if failed:
            refused = shim_refusal(failed[0].error)
            if refused:
                raise XoverError(f"{recipe.label}: {refused}  (logs: {failed[0].log_dir})")
            raise XoverError(
                f"measuring {recipe.name} next to {partner.name} failed ({failed[0].name}: exit "
                f"{failed[0].exit_code}):\n{failed[0].error or ''}\nlogs: {failed[0].log_dir}\n"
                f"(--no-corun skips this measurement)"
            )
        device_ms = _device_ms_beside(session, runs, warmup)
        row = session.get_one(Profile, profile.id)
        reference = job_profile(partner, partner_profile)
        row.corun_partner = partner.name
        row.corun_device_ms = device_ms
        row.corun_partner_link_share = reference.link_share
        row.interference = None if device_ms is None else measured_interference(row.data_ms + row.compute_ms, device_ms)
        session.flush()
        _ = row.recipe  # load it before the session closes
        return row


def _device_ms_beside(session: Session, runs: list[Run], warmup: int) -> float | None:
    """The job's device time per iteration next to its partner (`runs`: the job's run, then the partner's),
    from the iterations each recorded."""
    job_metrics, partner_metrics = (
        list(
            session.scalars(
                select(IterationMetric).where(IterationMetric.run_id == r.id).order_by(IterationMetric.step)
            )
        )
        for r in runs
    )
    partner = runs[1]
    # a partner stopped after its last iteration (while it shut down) did not run beside the job's last ones
    planned = partner.iterations_planned
    still_iterating = partner.status == RunStatus.STOPPED and (planned is None or len(partner_metrics) < planned)
    return corun_device_ms(job_metrics, partner_metrics, warmup, partner_still_iterating=still_iterating)


def _measure_stretch(
    current: Experiment,
    store: Store,
    recipe,
    job,
    profile: Profile,
    iterations: int,
    warmup: int,
    engine: str,
    with_mps: bool,
) -> Profile:
    """Run `recipe` without turns next to a one-rank copy of itself on its first device: a partner
    with no all-reduce, so it computes the whole time. The job's device time there over alone is its
    co-run stretch (time-sliced; then again under a CUDA MPS daemon of the run's own where MPS exists).
    The reporting rank computes on that first device, and the job's ranks run in step."""
    found: dict[str, float | None] = {}
    alone_ms = profile.data_ms + profile.compute_ms
    # the copy computes the whole time (no all-reduce): its iteration is its device time. It is stopped when
    # the job ends, so a generous count costs nothing; it must outlast the job's start-up as well, which on a
    # busy machine can take longer than the copy's whole run (then too few iterations overlap: once more,
    # with twice as many)
    partner_iterations = corun_partner_iterations(
        iterations, profile.iteration_ms, alone_ms, max(alone_ms, 1e-3), profile.startup_ms
    )
    for way in ("corun_stretch", "mps_stretch") if with_mps else ("corun_stretch",):
        for attempt in range(2):
            device_ms = _run_beside_a_computing_copy(
                current, store, recipe, job, iterations, partner_iterations * 2**attempt, warmup, engine, way
            )
            if device_ms is not None:
                break
        found[way] = device_ms / alone_ms if device_ms is not None and alone_ms > 0 else None
    with store.session() as session, session.begin():
        row = session.get_one(Profile, profile.id)
        for way, value in found.items():
            setattr(row, way, value)
        session.flush()
        _ = row.recipe  # load it before the session closes
        return row


def _run_beside_a_computing_copy(
    current: Experiment,
    store: Store,
    recipe,
    job,
    iterations: int,
    partner_iterations: int,
    warmup: int,
    engine: str,
    way: str,
) -> float | None:
    """One run of the stretch's pair; the job's device time per iteration beside the copy (None: fewer
    than 3 of its iterations after warm-up ended while the copy computed)."""
    pair = [
        job_for(with_overrides(recipe, iterations=iterations), job.hosts, engine=engine),
        job_for(
            with_overrides(recipe, iterations=partner_iterations, np=1),
            job.hosts,
            name=f"{recipe.name}#computing",
            engine=engine,
        ),
    ]
    unit = Unit(pair, Mode.CONCURRENT.value, ends_with=0)  # the partner is stopped when the job ends
    with MpsDaemon(current.results_dir / "mps-stretch") if way == "mps_stretch" else contextlib.nullcontext():
        Scheduler(current.context).run([unit], exclusive=True)
    with store.session() as session:
        runs = [session.get_one(Run, run_id) for run_id in unit.run_ids]
        failed = [r for r in runs if r.status not in (RunStatus.FINISHED, RunStatus.STOPPED)]
        if failed:
            raise XoverError(
                f"measuring {recipe.name}'s stretch next to a computing copy failed ({failed[0].name}: "
                f"exit {failed[0].exit_code}):\n{failed[0].error or ''}\nlogs: {failed[0].log_dir}"
            )
        return _device_ms_beside(session, runs, warmup)


def _store_profile(
    store: Store,
    recipe,
    run_id: int,
    link: Link,
    hardware: str,
    warmup: int,
    engine: str,
    load: MachineLoad | None = None,
) -> tuple[Profile, tuple[float, float] | None]:
    """The run's profile, stored, and whether its steps were still settling (`still_settling`)."""
    with store.session() as session, session.begin():
        run = session.get_one(Run, run_id)
        if run.status != RunStatus.FINISHED:
            refused = shim_refusal(run.error)
            if refused:  # what the shim cannot follow: its one line
                raise XoverError(f"{recipe.label}: {refused}  (logs: {run.log_dir})")
            alone = " alone" if recipe.script else ""
            raise XoverError(
                f"profiling {recipe.name} failed{alone} (exit {run.exit_code}):\n{run.error or ''}\nlogs: {run.log_dir}"
            )
        metrics = session.scalars(
            select(IterationMetric).where(IterationMetric.run_id == run_id).order_by(IterationMetric.step)
        ).all()
        if recipe.script and len(metrics) < min(warmup + 3, run.iterations_planned or 0):
            # the script stopped itself (its own step count): xover's --iterations cannot lengthen it
            raise XoverError(
                f"{recipe.label}: the script ended after {len(metrics)} optimizer steps, fewer than a profile "
                f"needs ({warmup} of warm-up, then 3 measured): let it run longer (its own arguments) or lower "
                "--warmup"
            )
        summary = summarise(list(metrics), warmup)
        hosts = len({h for h, _ in parse_hosts(run.hosts)})
        link_ms = link_ms_of(summary, run.gradient_bytes or 0, recipe.np, hosts, link)
        snapshot = snapshot_recipe(session, recipe)  # the recipe as written, not the shortened run
        profile = Profile(
            recipe_id=snapshot.id,
            recipe_hash=recipe.profile_key,
            run_id=run_id,
            name=recipe.name,
            np=recipe.np,
            engine=engine,
            bandwidth=link.key,
            hardware=hardware,
            hosts=hosts,
            iterations=summary["iterations"],
            data_ms=summary["data_ms"],
            compute_ms=summary["compute_ms"],
            comm_ms=summary["comm_ms"],
            iteration_ms=summary["iteration_ms"],
            samples_per_s=summary["samples_per_s"],
            memory_gb=run.peak_memory_gb or 0.0,
            gradient_bytes=run.gradient_bytes or 0,
            spread=summary["spread"],
            link_ms=link_ms,
            checkpoints=run.checkpoints,
            comm_cpu_ms=comm_cpu_ms_of(summary, load, recipe.np, run.device),
            startup_ms=startup_ms_of(run, list(metrics)),
            gpu_busy=busy_in_windows(load.gpu_samples, compute_windows(list(metrics), warmup))
            if load is not None
            else None,
            tuning=tuning_here(),
        )
        session.add(profile)
        session.flush()
        profile.recipe = snapshot
        return profile, still_settling([m.iteration_s for m in metrics], warmup)
