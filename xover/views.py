"""How each command's typed result is shown: one JSON object (`--json`), or its tables. The commands
(cli.py) parse, call one library function, and hand what it returns to `show_*` here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from .analysis import faster_than_alone_warnings, length_warnings, loss_not_finite_warnings, overlap_warnings
from .console import LoggedProgress, console, counted, errors, print_json, print_notice, print_table
from .hints import xover_command
from .links import HOST
from .replay.traces import skipped_words
from .report import simulation
from .report.tables import (
    DIGITS,
    POLICY_COLUMNS,
    display_rows,
    failed_jobs,
    failure_line,
    groups_that_ran,
    job_columns,
    job_rows,
    never_alone_line,
    policy_rows,
    print_failures,
    print_not_started,
    print_warnings,
)
from .results import RunResult
from .sharing import ADAPTIVE, CONCURRENT, CROSSOVER

# `xover simulate`'s summary: the report's columns of a simulation, but for what only the report shows
SIMULATE_COLUMNS = [
    column for column in simulation.SUMMARY_COLUMNS if column[1] not in ("jobs", "sharing", "preemptions")
]


GROUP_COLUMNS = [
    ("group", "group"),
    ("jobs", "jobs"),
    (f"{CROSSOVER} policy", "crossover_policy"),
    (f"{CROSSOVER}/sequential", CROSSOVER.compared_as),
    (f"{CONCURRENT}/sequential", CONCURRENT.compared_as),
    (f"{CROSSOVER}/{CONCURRENT}", "crossover_vs_concurrent"),
    (f"{ADAPTIVE}/sequential", ADAPTIVE.compared_as),
    (f"{ADAPTIVE}/best", "adaptive_vs_best"),
    ("predicted gain", "predicted_gain"),
]
PROFILE_COLUMNS = [
    ("job", "name"),
    ("np", "np"),
    ("link", "bandwidth"),
    ("data ms", "data_ms"),
    ("compute ms", "compute_ms"),
    ("comm ms", "comm_ms"),
    ("iter ms", "iteration_ms"),
    ("compute fraction", "compute_fraction"),
    ("samples/s", "samples_per_s"),
    ("memory GB", "memory_gb"),
    ("grad MB", "gradient_mb"),
    ("interference", "interference"),
    ("stretch", "corun_stretch"),
    ("GPU busy", "gpu_busy"),
    ("measured now", "measured_now"),
]
LAUNCHES_SAID = 0.1  # of the one-after-another time, the jobs' launches that a plan's headline says it counts
PLAN_COLUMNS = [
    ("group", "index"),
    ("wave", "wave"),
    ("jobs", "jobs"),
    ("devices", "devices"),
    ("start s", "start_s"),
    ("sharing", "sharing"),
    ("gain", "predicted_gain"),
    ("predicted by sharing (* measured)", "by_sharing"),
    ("fluid bound", "fluid_bound"),
    ("slowdowns", "slowdowns"),
    ("why this sharing", "reason"),
]


def show_train(result: dict[str, Any], as_json: bool) -> None:
    """`xover train`: the job's run."""
    if as_json:
        print_json(result)
        return
    jobs = display_rows(result["jobs"])
    print_table(f"xover train  experiment {result['experiment']}", job_columns(False), jobs, DIGITS)
    print_warnings(loss_not_finite_warnings([RunResult.from_summary(job) for job in result["jobs"]]))
    print_failures(result["jobs"])
    console.print(f"logs: {result['results_dir']}", markup=False)


def show_run(result: Any, as_json: bool) -> None:
    """`xover run`: each job's run (and the runs not started, as `xover report` says them), the groups' aggregate
    throughput (by turn policy where several ran), and a plan's makespans. `result` is a RunOutcome."""
    shown = result.to_json()
    if as_json:
        print_json(shown)
        for job in failed_jobs(shown["jobs"]):  # stdout is the JSON: why a job failed goes to stderr too
            print_notice(failure_line(job))
        return
    print_table(
        f"xover run  experiment {result.experiment}  link {result.link.rate or 'host network'}",
        job_columns(True),
        job_rows(shown["jobs"], result.not_started),
        DIGITS,
    )
    print_not_started(result.not_started)
    print_warnings(
        length_warnings(result.jobs)
        + overlap_warnings(result.groups, lengths_in_seconds=result.seconds is not None, jobs=result.jobs)
        + faster_than_alone_warnings(result.jobs)
        + loss_not_finite_warnings(result.jobs)
    )
    print_failures(shown["jobs"])
    measured = groups_that_ran(shown["groups"], shown["jobs"])
    if measured:
        rows = [{**g, "jobs": " + ".join(g["jobs"])} for g in measured]
        print_table(
            "aggregate throughput while the jobs shared the devices (each job normalised by its speed alone)",
            GROUP_COLUMNS,
            rows,
        )
        shown_groups = {group["group"] for group in measured}
        never_alone = never_alone_line([g for g in result.groups if g.group in shown_groups], result.jobs)
        if never_alone is not None:
            console.print(never_alone, markup=False, highlight=False, soft_wrap=True)
        if len(result.policies) > 1:
            # the model's simulated gains come with `xover report`, which reads the jobs' runs alone
            print_table(
                f"{CROSSOVER} by turn policy",
                [c for c in POLICY_COLUMNS if c[1] != "simulated"],
                display_rows(policy_rows(shown["groups"])),
            )
    if result.schedule is not None:
        schedule = result.schedule
        other_lengths = (
            "the plan's predicted makespans are for its jobs' planned lengths, and this run gave them others"
        )
        measured_s = schedule["measured_makespan_s"]
        # as `xover report` says it (report/tables.makespan_line): a job that did not finish leaves no makespan
        makespan = "makespan: not measured, a job did not finish"
        if measured_s is not None:
            makespan = f"makespan {measured_s:.1f} s measured"
        if schedule.get("one_after_another"):
            planned = (
                f"the plan predicted {schedule['sequential_makespan_s']:.1f} s for them"
                if schedule["lengths_as_planned"]
                else other_lengths
            )
            line = (
                f"{makespan} (its jobs one after another; {planned}; `{xover_command('report', result.experiment)}` "
                "sets it beside the same plan's run as planned, `xover run PLAN` with the same options)"
            )
        else:
            predicted = (
                f"the plan predicted {schedule['predicted_makespan_s']:.1f} s, and "
                f"{schedule['sequential_makespan_s']:.1f} s for its jobs one after another: predictions"
                if schedule["lengths_as_planned"]
                else other_lengths
            )
            overlapping = schedule["groups_overlapping"]
            line = (
                f"{makespan}; up to {overlapping} group{'' if overlapping == 1 else 's'} ran at once ({predicted}; "
                "`xover run PLAN --mode sequential` with the same options runs its jobs one after another, as "
                "`make demo` does to set the two side by side)"
            )
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"logs: {result.results_dir}")


def show_profiles(results: list[dict[str, Any]], as_json: bool) -> None:
    """`xover profile`: one row per job, compute-heavy first."""
    results = sorted(results, key=lambda r: r["compute_fraction"], reverse=True)
    if as_json:
        print_json(results)
        return
    print_table(
        "xover profile  (sorted: compute-heavy first, communication-heavy last)",
        PROFILE_COLUMNS,
        # what of each profile this command measured: alone, the interference next to the partner, the stretch
        [{**row, "measured_now": ", ".join(row.get("measured") or ["nothing (reused)"])} for row in results],
        digits={"compute_fraction": 2, "memory_gb": 3, "interference": 2, "corun_stretch": 2, "gpu_busy": 2},
    )
    print_warnings(
        [
            f"{row['name']}: {row['busy_before']:.0%} of this machine's cores were busy with other work as its "
            "profile began: that load is left out of its communication's CPU, but its figures are those of a busy "
            "machine, not of the job alone (profile again with --force when the machine is quiet)"
            for row in results
            if row.get("busy_before") is not None
        ]
        + [
            f"{row['name']}: its steps were still getting faster after the warm-up ({row['settling'][0]:.0f} ms a step "
            f"at first, {row['settling'][1]:.0f} ms at the end): its figures are not its steady pace; profile again "
            "with a longer warm-up (--warmup and --iterations, --force)"
            for row in results
            if row.get("settling")
        ]
    )


def show_plan(result: Any, as_json: bool) -> None:
    """`xover plan`: its groups, what was left unplaced, the predicted gain and makespan, and where the plan
    file is. `result` is a PlanWritten."""
    if as_json:
        print_json(result.to_dict())
        return
    plan = result.plan
    rows = [
        {
            "index": i,
            "jobs": " + ".join(job.name for job in g.jobs),
            "devices": ",".join(g.devices),
            "wave": g.wave,
            "sharing": g.sharing,
            "predicted_gain": g.predicted_gain,
            "predicted_period_ms": g.predicted_period_ms,
            "fluid_bound": g.fluid_bound,
            "start_s": g.predicted_start_ms / 1000,
            "slowdowns": ", ".join(f"{k} {v:.2f}x" for k, v in g.predicted_slowdown.items()),
            "by_sharing": ", ".join(
                f"{k} {v:.2f}{'*' if g.predicted_from.get(k) == 'measured' else ''}"
                for k, v in g.predicted_by_sharing.items()
            ),
            "reason": g.sharing_reason,
        }
        for i, g in enumerate(plan.groups)
    ]
    from_engine = f", {result.engine} profiles" if result.engine else ""
    print_table(
        f"xover plan  ({plan.algo}; each group shares its devices the way predicted best, or {ADAPTIVE} where the "
        f"best two are closer than the model's error or where it measured ahead; {CROSSOVER} under the "
        f"{plan.policy} turn policy, "
        f"link {(result.link or HOST).key}{from_engine})",
        PLAN_COLUMNS,
        rows,
    )
    for name, reason in plan.unplaced:
        console.print(f"[yellow]unplaced[/] {escape(name)}: {escape(reason)}")
    # two ratios: the gain counts device time (each group's jobs alone over the group's time), the makespans also
    # count groups running side by side on other devices
    # (only where two groups have devices apart: 14 groups all on localhost:0,1 run one after another)
    apart = any(
        not set(one.devices) & set(other.devices)
        for index, one in enumerate(plan.groups)
        for other in plan.groups[index + 1 :]
    )
    side_by_side = ": groups on other devices also run side by side" if apart else ""
    makespan_ratio = (
        f" ({plan.sequential_makespan_ms / plan.predicted_makespan_ms:.2f}x{side_by_side})"
        if plan.predicted_makespan_ms > 0
        else ""
    )
    console.print(
        f"predicted aggregate gain {plan.predicted_aggregate_gain:.2f}x (each group's jobs alone over the group's "
        f"time sharing its devices); makespan {plan.predicted_makespan_ms / 1000:.1f} s vs "
        f"{plan.sequential_makespan_ms / 1000:.1f} s one after another{makespan_ratio}{_launches_counted(plan)}"
    )
    # a plan has a group: one that would place no job is refused before it is written (plan/step.py)
    run_it = xover_command("run", str(result.path))
    # soft_wrap: a command to paste is never broken across lines by rich (the terminal wraps it, as one)
    console.print(f"plan written to {result.path}  (run it: {run_it})", markup=False, highlight=False, soft_wrap=True)


def _launches_counted(plan: Any) -> str:
    """Where the jobs' launches are a good part of the plan's time (short jobs): both figures count each job's
    launch one after another and a group's once, and so lead the gain column, steady training alone (a probe,
    2026-12-07: 1.53x beside a group's 1.24, the run measuring 1.17x)."""
    launches_ms = sum(job.startup_ms for job in plan.jobs)
    if plan.sequential_makespan_ms <= 0 or launches_ms < LAUNCHES_SAID * plan.sequential_makespan_ms:
        return ""
    return (
        f"; {launches_ms / 1000:.1f} s of the {plan.sequential_makespan_ms / 1000:.1f} s are the jobs' launches, "
        "which a group's jobs make side by side: longer jobs gain nearer the gain column"
    )


def show_doctor(diagnosis: Any, as_json: bool) -> None:
    """`xover doctor`: each check, and whether jobs can run here."""
    if as_json:
        print_json(diagnosis.to_dict())
        return
    rows = [
        {
            "check": c.name,
            "ok": "ok" if c.ok else ("FAIL" if c.required else "no"),
            "detail": c.detail + (f"  -> {c.fix}" if c.fix and not c.ok else ""),
        }
        for c in diagnosis.checks
    ]
    print_table("xover doctor", [("check", "check"), ("", "ok"), ("detail", "detail")], rows)
    console.print("jobs can run here" if diagnosis.can_run_jobs else "[red]jobs cannot run here: fix the FAIL lines[/]")


def show_simulation(result: Any, as_json: bool) -> None:
    """`xover simulate`: each policy's JCTs, makespan, utilisation, queueing and sharing side by side, the
    model, what the trace's reading noted or skipped, and the experiment it is stored as. `result` is a
    replay.step.SimulationResult."""
    if as_json:
        print_json(result.to_dict())
        return
    rows = [{**item.summary.to_json(), "wall_s": item.wall_s} for item in result.replays]
    devices = sum(slots for _, slots in result.hosts)
    print_table(
        f"xover simulate  ({counted(len(result.trace.instances), 'job')} of {result.trace.path}, "
        f"{result.trace.format}; {counted(len(result.hosts), 'host')}, {counted(devices, 'device')}; "
        f"{result.settings['semantics']} semantics)",
        SIMULATE_COLUMNS,
        rows,
        simulation.shown_digits(rows),
    )
    console.print(f"model: {result.model}", highlight=False, soft_wrap=True, markup=False)
    for note in result.trace.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True, markup=False)
    for why, count in result.trace.skipped.items():
        console.print(f"[yellow]skipped[/] {escape(skipped_words(why, count))}")
    for item in result.replays:
        if item.unfinished:
            console.print(
                f"[yellow]{escape(item.summary.policy)}[/]: {counted(len(item.unfinished), 'job')} never finished"
            )
    console.print(
        f"stored as experiment {result.experiment_id}: {xover_command('report', result.experiment_id)} "
        "(--format html draws "
        "the JCT distribution and the utilisation)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


@contextlib.contextmanager
def replay_progress(quiet: bool) -> Iterator[Callable[[str, int, int | None], None]]:
    """A progress bar per policy replayed (on stderr; none with `quiet`): yields the callback the replay
    calls with (policy, jobs done, jobs in all; None while not known)."""
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs done"),
        TimeElapsedColumn(),
        console=errors,
        transient=False,
        disable=quiet,
    )
    tasks: dict[str, TaskID] = {}
    logged = LoggedProgress(bars)

    def progress(name: str, done: int, total: int | None) -> None:
        if not tasks:
            logged.start()  # at the first bar: an option refused before the replay began is not behind an empty line
        if name not in tasks:
            tasks[name] = bars.add_task(name, total=total)
        bars.update(tasks[name], completed=done, total=total)  # reading's total is known once the file is parsed
        logged.tick()

    try:
        yield progress
    finally:
        if tasks:
            logged.stop()
