"""What runs measured, computed one way for `xover run`, `xover report` and the benchmarks.

* a job's summary: steady-state medians and throughput (warm-up left out), turn waiting and rank
  skew, final loss and accuracy;
* group comparisons: jobs sharing devices are compared only over the time all of them were running
  (the *overlap window*): a job that finishes early leaves its partners alone, and their iterations
  after that say nothing about sharing. Each job's speed in that window is normalised by its speed
  alone (its sequential run), and a mode's aggregate throughput is the sum: 1.0 is no better than one
  job after the other. Crossover is compared per turn policy;
* accuracy parity: the largest per-iteration loss difference from the job alone;
* the model's figures for a group from its jobs measured alone: the fluid bound and each policy's
  simulated speeds.

The store (store/queries.py) supplies the rows; results are typed (results.py). A job's summary is
made as a dict (`job_summary`, the names of its JSON) and read into a RunResult; `xover train` compares its
job alone as a comparison does, and hands it on as its JSON (RunResult.to_json).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .links import Link
from .plan import InvalidJobProfile, JobProfile, fluid_gain, predict_group
from .plan.model import checkpoint_interval_ms, link_busy_ms
from .plan.predict import sharings_for
from .results import (
    FASTER_THAN_ALONE,
    GroupComparison,
    GroupModel,
    GroupReport,
    ParityResult,
    PolicyResult,
    RunResult,
    SimulatedGain,
    faster_than_alone,
)
from .settings import settings
from .sharing import ALONE_MODES, CONCURRENT, CROSSOVER, OPEN_STATUSES, Mode, RunStatus, adapts, turn_taking
from .store.models import Evaluation, Experiment, Profile
from .store.queries import iteration_rows, run_fields

Row = dict[str, Any]  # an iteration: wall_time (end), iteration_s, samples, the phase times, loss


# ------------------------------------------------------------------------------------ iterations


def warmup_steps(iterations: int) -> int:
    """Iterations left out of steady-state figures (start-up, first all-reduces, caches)."""
    return min(5, max(1, iterations // 10))


def steady(rows: Sequence[Row], warmup: int | None = None) -> list[Row]:
    """The iterations after warm-up (`warmup` of them where given: a profile's own; all of them when nothing would
    be left)."""
    return list(rows[warmup_steps(len(rows)) if warmup is None else warmup :] or rows)


def span(rows: Sequence[Row]) -> tuple[float, float] | None:
    """Start of the first and end of the last steady iteration (wall time)."""
    rows = steady(rows)
    if not rows:
        return None
    return rows[0]["wall_time"] - rows[0]["iteration_s"], rows[-1]["wall_time"]


def rows_of(iterations: Mapping[int, list[Row]], job: RunResult) -> list[Row]:
    """A job's iteration rows (none for a job read back without its run id)."""
    return iterations.get(job.run_id, []) if job.run_id is not None else []


def overlap_window(runs: Sequence[Sequence[Row]]) -> tuple[float, float] | None:
    """The time every run was past its warm-up and not yet done, or None if they never overlapped."""
    spans = [s for s in map(span, runs) if s is not None]
    if not spans or len(spans) < len(runs):
        return None
    start, end = max(s[0] for s in spans), min(s[1] for s in spans)
    return (start, end) if end > start else None


def samples_per_s(
    rows: Sequence[Row], window: tuple[float, float] | None = None, warmup: int | None = None
) -> float | None:
    """Throughput over the steady iterations (after `warmup`, where given); inside `window`: the iterations that
    started and ended in it."""
    rows = steady(rows, warmup)
    if window is not None:
        rows = [
            r
            for r in rows
            if r["wall_time"] - r["iteration_s"] >= window[0] - 1e-6 and r["wall_time"] <= window[1] + 1e-6
        ]
    seconds = sum(r["iteration_s"] for r in rows)
    return sum(r["samples"] for r in rows) / seconds if rows and seconds > 0 else None


def quantile(values: Sequence[float], q: float) -> float | None:
    """The value at quantile `q` of `values` (nearest rank, no interpolation), or None for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _median_ms(rows: Sequence[Row], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) * 1000 if values else None


# ------------------------------------------------------------------------------------ one job


def job_summary(
    run: dict[str, Any], rows: Sequence[Row], evaluations: Sequence[tuple[int, str, float]], warmup: int | None = None
) -> dict[str, Any]:
    """One job in one mode, in the names scripts rely on (`xover run --json`, `xover report`).

    `run` holds the run's own fields (run_id, name, mode, status, ...), `rows` its iterations in step
    order, `evaluations` its (step, metric, value); `warmup` the iterations left out of its figures where its
    own are known (a profile's run: `profile --warmup`), else `warmup_steps`."""
    stable = steady(rows, warmup)
    last_step = max((step for step, _, _ in evaluations), default=None)
    final_eval = {metric: value for step, metric, value in evaluations if step == last_step}
    waits = [r["wait_s"] * 1000 for r in stable if r.get("wait_s") is not None]
    stats = run.get("turn_stats") or {}
    return {
        **run,
        "iterations": len(rows),
        "samples_per_s": samples_per_s(rows, warmup=warmup),
        "iteration_ms": _median_ms(stable, "iteration_s"),
        "compute_ms": _median_ms(stable, "compute_s"),
        "data_ms": _median_ms(stable, "data_s"),
        "communication_ms": _median_ms(stable, "communication_s"),
        "wait_ms": _median_ms(stable, "wait_s"),
        "wait_p90_ms": quantile(waits, 0.9),
        "link_ms": _median_ms(stable, "link_s"),
        "comm_cpu_ms": _median_ms(stable, "comm_cpu_s"),
        # none for a run without iterations (it failed first): not "0 yields"
        "yields": sum(r.get("yields") or 0 for r in rows) if rows else None,
        "skew_p50_ms": stats.get("skew_p50_ms"),
        "skew_p90_ms": stats.get("skew_p90_ms"),
        # the last one known: a second optimizer stepped after the same backward is an iteration without one
        "final_loss": next((r["loss"] for r in reversed(rows) if r.get("loss") is not None), None),
        "loss_not_finite": loss_not_finite(rows),
        "accuracy": final_eval.get("test_accuracy", final_eval.get("test_token_accuracy")),
        "evaluations": final_eval,
        "speed": 1.0 if run.get("mode") in ALONE_MODES and rows else None,
    }


def loss_not_finite(rows: Sequence[Row]) -> dict[str, Any] | None:
    """Where a job's loss was first NaN or infinite (it diverged): that step, that loss as text ('nan', 'inf',
    '-inf') and how many iterations had one; None where every loss known was finite."""
    diverged = [r for r in rows if r.get("loss") is not None and not math.isfinite(r["loss"])]
    if not diverged:
        return None
    return {"step": diverged[0]["step"], "loss": str(diverged[0]["loss"]), "iterations": len(diverged)}


def variant(job: RunResult) -> str:
    """How a job ran: sequential / concurrent / crossover:<policy> / adaptive (or solo, profile). Crossover
    runs recorded before policies existed took strict round-robin turns. Adaptive is one way whatever its
    policy (it runs under one)."""
    if turn_taking(job.mode) and not adapts(job.mode):
        return f"{job.mode}:{job.policy or 'round-robin'}"
    return job.mode or "?"


# ------------------------------------------------------------------------------------ groups


def _whole(job: RunResult) -> bool:
    """Whether a run's figures may stand for its way: it finished (a run that failed, timed out or was stopped
    part-way is no measurement of its way: its aggregate is none, shown '-', and no plan learns it). A summary
    without a status (an older JSON) counts as before."""
    return job.status in (None, RunStatus.FINISHED)


def _cut_short(job: RunResult) -> bool:
    """Whether a run ended without finishing (failed, timed out, interrupted, stopped, cancelled, lost): its
    throughput is no measurement of its way, in any view (a run still going keeps its figures so far)."""
    return not _whole(job) and job.status not in OPEN_STATUSES


def compare(
    jobs: Sequence[RunResult], iterations: dict[int, list[Row]], default_policy: str = "work-conserving"
) -> tuple[list[RunResult], list[GroupComparison]]:
    """Per group: each shared mode's aggregate speed over its overlap window (and per policy for
    crossover), against the jobs alone. Returns the jobs with their `speed`, `slowdown` and
    `samples_per_s_shared` set (in the same order), and the groups in index order."""
    alone = {(j.group, j.name): j.samples_per_s for j in jobs if j.is_alone and j.samples_per_s and _whole(j)}
    names: dict[int, list[str]] = {}
    by_variant: dict[tuple[int, str], list[int]] = {}
    for position, job in enumerate(jobs):
        if job.is_shared and job.group is not None:
            group_names = names.setdefault(job.group, [])
            if job.name is not None and job.name not in group_names:
                group_names.append(job.name)
            by_variant.setdefault((job.group, variant(job)), []).append(position)
    compared = list(jobs)
    entries: dict[int, dict[str, PolicyResult]] = {index: {} for index in names}  # concurrent, crossover:<policy>
    for (index, kind), positions in by_variant.items():
        runs = [rows_of(iterations, jobs[p]) for p in positions]
        together = overlap_window(runs) if len(positions) > 1 else None
        window = together
        if window is not None and any(_inside(rows, window) < MIN_WINDOW_ITERATIONS for rows in runs):
            window = None  # too short to say anything: whole runs, and the overlap warning says so
        total = 0.0
        overlap = _overlap(runs, together if len(runs) > 1 else None)
        # jobs that never ran together past their warm-up (one ended before another began) shared nothing: each
        # near its speed alone, their sum would read as a gain (2.54 of a bound of 1.77, the best way measured);
        # nor did jobs that ran together for too short a window and a small part of their runs, whose whole runs,
        # mostly alone, would be compared instead (docs/measurements.md, *A tenth round of probes*)
        apart = len(positions) > 1 and (
            together is None or (window is None and overlap is not None and overlap < LEAST_OVERLAP)
        )
        complete = not apart
        for position, rows in zip(positions, runs):
            job = jobs[position]
            if apart:  # nor is any job's speed a speed shared: each ran near alone
                continue
            solo, shared = alone.get((index, job.name)), samples_per_s(rows, window)
            if solo and shared and _whole(job):
                compared[position] = dataclasses.replace(
                    job, samples_per_s_shared=shared, speed=shared / solo, slowdown=solo / shared
                )
                total += shared / solo
            else:
                compared[position] = dataclasses.replace(job, samples_per_s_shared=shared)
                complete = False
        entries[index][kind] = PolicyResult(
            aggregate=total if complete else None,
            window_s=window[1] - window[0] if window else None,
            overlap=overlap,
            starts_apart_s=_starts_apart(runs) if len(runs) > 1 else None,
        )
    groups = []
    for index in sorted(names):
        concurrent_entry = entries[index].get(CONCURRENT.name)
        concurrent = concurrent_entry.aggregate if concurrent_entry else None
        policies = {
            kind.partition(":")[2]: entry
            for kind, entry in entries[index].items()
            if kind.partition(":")[0] == CROSSOVER.name
        }
        policies = {
            policy: dataclasses.replace(
                entry, vs_concurrent=entry.aggregate / concurrent if entry.aggregate and concurrent else None
            )
            for policy, entry in policies.items()
        }
        chosen = default_policy if default_policy in policies else next(iter(sorted(policies)), None)
        # each way measured under one entry: crossover under the chosen policy, the others as they ran
        by_way = {kind: entry for kind, entry in entries[index].items() if ":" not in kind}
        if chosen:
            by_way[CROSSOVER.name] = policies[chosen]
        ways = [
            CONCURRENT.name,
            CROSSOVER.name,
            *(way for way in by_way if way not in (CONCURRENT.name, CROSSOVER.name)),
        ]
        groups.append(
            GroupComparison(
                group=index,
                jobs=names[index],
                policies=policies,
                sequential=1.0 if all((index, name) in alone for name in names[index]) else None,
                measured={way: by_way[way].aggregate if way in by_way else None for way in ways},
                overlaps={way: by_way[way].overlap if way in by_way else None for way in ways},
                crossover_policy=chosen,
                windows={way: by_way[way].window_s if way in by_way else None for way in ways},
                starts_apart={way: by_way[way].starts_apart_s if way in by_way else None for way in ways},
            )
        )
    for position, job in enumerate(compared):
        if _cut_short(job):  # '-' in the table, empty in JSON and CSV (its iterations stay, as they were)
            compared[position] = dataclasses.replace(
                job, samples_per_s=None, samples_per_s_shared=None, speed=None, slowdown=None
            )
        elif job.is_alone and job.samples_per_s and _whole(job):  # alone, its whole run is its window
            compared[position] = dataclasses.replace(job, slowdown=1.0, samples_per_s_shared=job.samples_per_s)
    return compared, groups


MIN_WINDOW_ITERATIONS = 3
# Below this share of a mode's time together, its figures are said to rest on a short window; with a window too
# short to measure in as well, the mode has no figure.
LEAST_OVERLAP = 0.5


def _inside(rows: Sequence[Row], window: tuple[float, float]) -> int:
    return sum(
        1
        for r in steady(rows)
        if r["wall_time"] - r["iteration_s"] >= window[0] - 1e-6 and r["wall_time"] <= window[1] + 1e-6
    )


def _overlap(runs: Sequence[Sequence[Row]], window: tuple[float, float] | None) -> float | None:
    """The share of the mode's time (first start to last end) that every job ran together."""
    spans = [s for s in map(span, runs) if s is not None]  # a run with rows has a span
    if not spans:
        return None
    if window is None:
        return 0.0 if len(runs) > 1 else 1.0  # they never ran together past their warm-up
    whole = max(s[1] for s in spans) - min(s[0] for s in spans)
    return (window[1] - window[0]) / whole if whole > 0 else None


def _starts_apart(runs: Sequence[Sequence[Row]]) -> float | None:
    """How far apart the runs' first iterations started (None unless every run has one)."""
    starts = [rows[0]["wall_time"] - rows[0]["iteration_s"] for rows in runs if rows]
    return max(starts) - min(starts) if len(starts) == len(runs) and starts else None


# A run alone whose device time differs from its profile's by more than this: the machine's speed
# changed between them (a shared machine can run the same job alone far slower for minutes).
ALONE_DRIFT = 0.2


def alone_vs_profile(job: RunResult, profile_device_ms: float | None) -> float | None:
    """A job's device time per iteration in its run alone over its profile's (1.0: the machine as fast
    as when profiled); None without a profile or a measured run."""
    if not profile_device_ms or job.compute_ms is None:
        return None
    return ((job.data_ms or 0.0) + job.compute_ms) / profile_device_ms


def report_warnings(
    jobs: Sequence[RunResult], groups: Sequence[GroupReport], lengths_in_seconds: bool = False
) -> list[str]:
    """What makes a report's figures less sure: a job shorter than it was given, a short overlap window (its
    advice for a run given --seconds where `lengths_in_seconds`), a run alone off its profile."""
    return (
        length_warnings(jobs)
        + overlap_warnings(groups, lengths_in_seconds=lengths_in_seconds, jobs=jobs)
        + drift_warnings(groups)
        + faster_than_alone_warnings(jobs)
        + loss_not_finite_warnings(jobs)
    )


def loss_not_finite_warnings(jobs: Sequence[RunResult]) -> list[str]:
    """A warning per job whose loss became NaN or infinite (it diverged: its final loss and accuracy are no trained
    model's, though the run finished, as torchrun's would): one line per job, the step and modes of each. A job
    whose later losses are finite again did not diverge: a batch it skipped itself (`if torch.isfinite(norm):
    optimizer.step()`) has its loss summed into the next step's iteration (docs/reference.md), and is said so."""
    diverged: dict[str, dict[str, list[str]]] = {}
    for job in jobs:
        if job.name is not None and job.loss_not_finite:
            first = job.loss_not_finite
            counted = f"{first['iterations']} of {job.iterations} iterations"
            if job.iterations is not None and first["iterations"] < job.iterations - first["step"]:
                where = (
                    f"at step {first['step']} ({first['loss']}, {counted}), finite after it (a batch the script "
                    "skipped, its loss summed into the iteration of its next step?)"
                )
            else:
                where = f"from step {first['step']} ({first['loss']}, {counted})"
            diverged.setdefault(job.name, {}).setdefault(where, []).append(_mode_words(job))
    return [
        f"{name}: loss not finite " + "; ".join(f"{where} in {', '.join(modes)}" for where, modes in places.items())
        for name, places in diverged.items()
    ]


def faster_than_alone_warnings(jobs: Sequence[RunResult], tolerance: float = FASTER_THAN_ALONE) -> list[str]:
    """A warning per job that ran faster next to others than alone, by more than `tolerance`: sharing never
    speeds a job up, so its run alone was slower than the job is (a short run's start, a machine busy then),
    and its speed relative to alone, and its group's gain, read high by as much. One line per job, its modes
    named."""
    fast: dict[str, list[RunResult]] = {}
    for job in jobs:
        if job.name is not None and job.mode is not None and faster_than_alone(job.speed, tolerance):
            fast.setdefault(job.name, []).append(job)
    return [
        f"{name} ran {max(run.speed or 0.0 for run in runs):.2f}x its speed alone next to other jobs "
        f"({', '.join(sorted({_mode_words(run) for run in runs}))}): sharing never makes a job faster, so its run "
        "alone was slowed (its start weighing on a short run, or the machine busy then), and its speed relative to "
        "alone and its group's gain read high by as much (run the comparison again, longer: more --iterations "
        "or --seconds)"
        for name, runs in fast.items()
    ]


def _mode_words(job: RunResult) -> str:
    return f"{job.mode} ({job.policy})" if job.policy and job.mode == CROSSOVER.name else str(job.mode)


def length_warnings(jobs: Sequence[RunResult]) -> list[str]:
    """A warning per job that finished before the iterations it was given (a script whose own count, from
    its arguments, is below the job's length): the length sized the group's overlap and the plan's
    figures, so both hold for less than they say. One line per job, naming the modes it happened in."""
    short: dict[str, list[RunResult]] = {}
    for job in jobs:
        if (
            job.name is not None
            and job.status == RunStatus.FINISHED
            and job.iterations_planned
            and job.iterations is not None
            and 0 < job.iterations < job.iterations_planned
        ):
            short.setdefault(job.name, []).append(job)
    warnings = []
    for name, runs in short.items():
        made = sorted({run.iterations for run in runs if run.iterations is not None})
        given = max(run.iterations_planned or 0 for run in runs)
        modes = sorted({run.mode for run in runs if run.mode is not None})
        warnings.append(
            f"{name} finished on its own after {'/'.join(map(str, made))} of the {given} iterations it was "
            f"given ({', '.join(modes)}): its script stopped itself first (its own count, from the arguments it "
            "is given, or a condition of its own, such as a target loss), so what that length sized (a group's "
            "time together, --seconds, the plan's figures) does not hold (give the script a count above the job's "
            "length in its arguments, or the job fewer --iterations / --seconds)"
        )
    return warnings


def _ended_short(jobs: Sequence[RunResult], group: int, mode: str, policy: str | None) -> str:
    """The jobs of a group's run in `mode` (under `policy`) that did not run to their end, with how each ended
    ('b failed'); a job `stopped` only because its partner's end ended the unit is not one."""
    return ", ".join(
        f"{job.name} {job.status}"
        for job in jobs
        if job.group == group
        and job.mode == mode
        and (policy is None or job.policy == policy)
        and job.status not in (None, RunStatus.FINISHED, RunStatus.STOPPED, RunStatus.RUNNING, RunStatus.PENDING)
    )


def drift_warnings(groups: Sequence[GroupReport], tolerance: float = ALONE_DRIFT) -> list[str]:
    """A warning per job whose run alone drifted from its profile by more than `tolerance`: its speeds and
    the predictions are off by as much."""
    warnings = []
    for group in groups:
        for name, ratio in sorted(group.alone_vs_profile.items()):
            if abs(ratio - 1.0) > tolerance:
                warnings.append(
                    f"group {group.group}: {name}'s run alone needed {abs(ratio - 1.0):.0%} "
                    f"{'more' if ratio > 1 else 'less'} device time per iteration than its profile: the "
                    "machine's speed changed between them, so speeds relative to alone (and predictions "
                    "from the profile) are off by about as much (run the comparison again, or re-profile "
                    "with --force)"
                )
    return warnings


def overlap_warnings(
    groups: Sequence[GroupComparison],
    least: float = LEAST_OVERLAP,
    lengths_in_seconds: bool = False,
    jobs: Sequence[RunResult] = (),
) -> list[str]:
    """A warning per shared mode whose jobs ran together for less than `least` of its run, with what to do about
    it: for a run given --seconds (`lengths_in_seconds`), what else than --seconds would help; where a job of it
    (of `jobs`, the runs) did not run to its end, that is the cause, not the lengths."""
    warnings = []
    for group in groups:
        # each way as measured (crossover under its chosen policy), then crossover under its other policies
        shared = [
            (
                f"{mode} ({group.crossover_policy})" if mode == CROSSOVER.name and group.crossover_policy else mode,
                overlap,
                group.windows.get(mode),
                group.starts_apart.get(mode),
                _ended_short(jobs, group.group, mode, group.crossover_policy if mode == CROSSOVER.name else None),
            )
            for mode, overlap in group.overlaps.items()
        ]
        shared += [
            (
                f"{CROSSOVER} ({policy})",
                entry.overlap,
                entry.window_s,
                entry.starts_apart_s,
                _ended_short(jobs, group.group, CROSSOVER.name, policy),
            )
            for policy, entry in group.policies.items()
            if policy != group.crossover_policy
        ]
        for named, overlap, window, apart, short in shared:
            if overlap is not None and overlap < least:
                what = [f"first iterations {apart:.1f} s apart"] if apart is not None else []
                what.append(f"a window of {window:.1f} s" if window else "too short a window: whole runs compared")
                if short:  # a job that failed (or was cut short) is the cause, whatever the lengths were
                    cause = f"a job did not run to its end: {short}; see why below"
                    said = f"({'; '.join(what[:-1]) or 'no window'})" if overlap == 0.0 else f"({'; '.join(what)})"
                    warnings.append(
                        f"group {group.group}: the {named} jobs "
                        + (
                            "never ran at the same time past their warm-up"
                            if overlap == 0.0
                            else f"ran at the same time for only {overlap:.0%} of that run"
                        )
                        + f" {said}, so "
                        + (
                            "nothing of this mode is a measurement of sharing"
                            if overlap == 0.0 or not window
                            else "its figures rest on a short window"
                        )
                        + f" ({cause})"
                    )
                    continue
                # the late start is the cause where it is most of the time the jobs did not run together
                late_start = apart is not None and window is not None and apart > (window / overlap - window) / 2
                cause = (
                    "mostly a late start: a job that starts slowly, as a script loading its data does, leaves its "
                    "partners alone meanwhile"
                    if late_start
                    else "mostly an early end: the faster job was done long before the others"
                )
                if not lengths_in_seconds:
                    advice = f"{cause}; give the faster job more iterations, or use --seconds"
                elif late_start:
                    advice = f"{cause}; a longer --seconds leaves the start a smaller share of the run"
                else:  # --seconds gave each job the same time alone: sharing slowed them unequally
                    advice = (
                        f"{cause}; --seconds gave each job the iterations it does in that time alone, and sharing "
                        "slowed them unequally; run without --seconds, giving the job that ended first more "
                        "iterations"
                    )
                if overlap == 0.0:
                    warnings.append(
                        f"group {group.group}: the {named} jobs never ran at the same time past their warm-up "
                        f"({'; '.join(what[:-1]) or 'no window'}), so nothing of this mode is a measurement of "
                        f"sharing: no figure for it ({advice})"
                    )
                    continue
                if not window:  # whole runs, mostly alone: no figure (compare)
                    warnings.append(
                        f"group {group.group}: the {named} jobs ran at the same time for only {overlap:.0%} of that "
                        f"run ({'; '.join(what[:-1] + ['too short a window to measure in'])}), so nothing of this "
                        f"mode is a measurement of sharing: no figure for it ({advice})"
                    )
                    continue
                warnings.append(
                    f"group {group.group}: the {named} jobs ran at the same time for only "
                    f"{overlap:.0%} of that run ({'; '.join(what)}), so its figures rest on a short window ({advice})"
                )
    return warnings


# ------------------------------------------------------------------------------------ parity


def loss_parity(jobs: Sequence[RunResult], iterations: dict[int, list[Row]]) -> list[ParityResult]:
    """Per job shared with others: the largest per-iteration |loss difference| from the same job alone.

    Taking turns must not change what is computed, so on deterministic devices this is exactly 0.
    """
    alone = {(j.group, j.name): j for j in jobs if j.mode == Mode.SEQUENTIAL}
    parity = []
    for job in jobs:
        reference = alone.get((job.group, job.name))
        if not job.is_shared or reference is None or job.name is None or job.mode is None:
            continue
        alone_losses = {row["step"]: row["loss"] for row in rows_of(iterations, reference)}
        shared_losses = {row["step"]: row["loss"] for row in rows_of(iterations, job)}
        # unmodified scripts report no loss (they print their own): nothing to compare for them
        steps = sorted(
            s
            for s in alone_losses.keys() & shared_losses.keys()
            if alone_losses[s] is not None and shared_losses[s] is not None
        )
        largest = max((loss_difference(shared_losses[s], alone_losses[s]) for s in steps), default=None)
        parity.append(
            ParityResult(
                group=job.group,
                name=job.name,
                mode=job.mode,
                policy=job.policy,
                steps=len(steps),
                max_abs_loss_diff=largest,
                identical=largest == 0.0 if steps else None,
            )
        )
    return parity


def loss_difference(shared: float, alone: float) -> float:
    """|shared - alone|, a loss not finite counted too: 0.0 for the same kind on both sides (NaN and NaN, inf and
    inf: the job diverged alike), inf where one side is not finite and the other is not the same."""
    if math.isfinite(shared) and math.isfinite(alone):
        return abs(shared - alone)
    return 0.0 if str(shared) == str(alone) else math.inf


# ------------------------------------------------------------------------------------ the model


def profile_of_run(job: RunResult | Mapping[str, Any], link: Link) -> JobProfile | None:
    """A planner JobProfile from a job's run alone: its medians, and its link time from its gradient
    bytes at the run's link rate (its exposed communication on the host network). The run/ commands
    pass a job summary as a dict."""
    if not isinstance(job, RunResult):
        job = RunResult.from_summary(job)
    if job.compute_ms is None or job.communication_ms is None or job.name is None or job.np is None:
        return None
    link_ms = job.communication_ms
    if link.bits_per_s and job.gradient_bytes:
        hosts = len({h.split(":")[0] for h in (job.hosts or "localhost:1").split(",")})
        estimate = link_busy_ms(job.gradient_bytes, job.np, hosts, link.bits_per_s)
        span_ms = job.link_ms
        link_ms = max(link_ms, min(estimate, span_ms) if span_ms else estimate)
    on_gpu = (job.device or "").startswith("cuda")
    # on a GPU the communication threads' CPU is not device time (as profiler.comm_cpu_ms_of has it)
    comm_cpu = min(1.0, job.comm_cpu_ms / link_ms) if job.comm_cpu_ms and link_ms > 0 and not on_gpu else 0.0
    try:
        return JobProfile(
            name=job.name,
            devices=job.np,
            compute_ms=job.compute_ms,
            comm_ms=job.communication_ms,
            memory_gb=0.0,
            data_ms=job.data_ms or 0.0,
            link_ms=link_ms,
            comm_cpu=comm_cpu,
            # how soon it yields a turn, as the planner has it from a profile
            checkpoint_ms=checkpoint_interval_ms(
                (job.data_ms or 0.0) + job.compute_ms, job.checkpoints, on_gpu=on_gpu, synced=settings().checkpoint_sync
            ),
            interference=job.interference or 0.0,
            interference_link_share=job.interference_link_share,
        )
    except InvalidJobProfile:  # a job that failed before its first iteration has no medians
        return None


def group_model(alone_jobs: Sequence[RunResult], link: Link, policies: Sequence[str]) -> GroupModel:
    """The fluid bound and each policy's simulated gain for a group, from its jobs measured alone."""
    profiles = [p for p in (profile_of_run(job, link) for job in alone_jobs) if p is not None]
    if not profiles or len(profiles) < len(alone_jobs):
        return GroupModel()
    return model_of_profiles(profiles, policies)


def model_of_profiles(profiles: Sequence[JobProfile], policies: Sequence[str]) -> GroupModel:
    """The fluid bound and each policy's simulated gain for a group of jobs (from their profiles, or
    from their runs alone: `group_model`)."""
    predicted = {}
    for policy in policies:
        prediction = predict_group(profiles, policy)
        predicted[policy] = SimulatedGain(gain=prediction.gain, speeds=prediction.speeds)
    without_turns = {}
    for sharing in sharings_for(profiles):
        if not turn_taking(sharing):
            prediction = predict_group(profiles, sharing=sharing)
            without_turns[sharing] = SimulatedGain(gain=prediction.gain, speeds=prediction.speeds)
    return GroupModel(fluid_bound=fluid_gain(profiles), predicted=predicted, without_turns=without_turns)


def experiment_jobs(
    session: Session, experiment_id: str, iterations: dict[int, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Every run of the experiment summarised (analysis.job_summary), in run order."""
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        return []
    runs = list(experiment.runs)
    if iterations is None:
        iterations = iteration_rows(session, [run.id for run in runs])
    evaluations: dict[int, list[tuple[int, str, float]]] = {run.id: [] for run in runs}
    for evaluation in session.scalars(
        select(Evaluation).where(Evaluation.run_id.in_([r.id for r in runs])).order_by(Evaluation.step)
    ):
        evaluations[evaluation.run_id].append((evaluation.step, evaluation.metric, evaluation.value))
    # a profile's run: the warm-up it was measured after (its steps less those its profile kept), so that its
    # report shows the figures `xover profile` printed and stored
    kept = dict(
        session.execute(select(Profile.run_id, Profile.iterations).where(Profile.run_id.in_(evaluations))).all()
    )
    return [
        job_summary(
            run_fields(run),
            iterations.get(run.id, []),
            evaluations[run.id],
            _profile_warmup(len(iterations.get(run.id, [])), kept.get(run.id)),
        )
        for run in runs
    ]


def _profile_warmup(steps: int, kept: int | None) -> int | None:
    """The warm-up of a profile's run of `steps` iterations whose profile kept `kept` of them; None for another run
    (or where its rows do not add up: fewer recorded than the profile kept)."""
    return steps - kept if kept is not None and 0 <= steps - kept < steps else None
