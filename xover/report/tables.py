"""The report as data: rich tables for the terminal, one JSON object, CSV files for pandas.

The column lists here are shared with the HTML page, so every view shows the same figures. Tables and
CSV files render rows: the results' JSON shapes (`to_json()`), which `xover run` and `xover train`
hold already.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.markup import escape

from ..analysis import report_warnings
from ..console import console, print_table
from ..results import NotStarted, RunResult, not_started_lines
from ..run.record import failure_reason
from ..sharing import ADAPTIVE, ALONE, CONCURRENT, CROSSOVER, Mode, RunStatus
from ..writes import write_all_whole
from .data import ITERATION_FIELDS, ExperimentBrief, ExperimentReport, PlanMakespan

Columns = Sequence[tuple[str, str]]  # (header, key)

JOB_COLUMNS: Columns = [
    ("job", "name"),
    ("mode", "mode"),
    ("policy", "policy"),
    ("group", "group"),
    ("status", "status"),
    ("exit", "exit_code"),
    ("iters", "iterations"),
    ("samples/s", "samples_per_s"),
    ("iter ms", "iteration_ms"),
    ("compute ms", "compute_ms"),
    ("comm ms", "communication_ms"),
    ("turn wait ms", "wait_ms"),
    ("slowdown vs alone", "slowdown"),
    ("final loss", "final_loss"),
    ("accuracy", "accuracy"),
]
GROUP_COLUMNS: Columns = [
    ("group", "group"),
    ("jobs", "jobs"),
    ("sequential", "sequential"),
    (CONCURRENT.name, CONCURRENT.compared_as),
    (CROSSOVER.name, CROSSOVER.compared_as),
    (f"{CROSSOVER}/{CONCURRENT}", "crossover_vs_concurrent"),
    (ADAPTIVE.name, ADAPTIVE.compared_as),
    (f"{ADAPTIVE}/best", "adaptive_vs_best"),
    ("predicted gain", "predicted_gain"),
    ("fluid bound", "fluid_bound"),
    ("of bound", "of_fluid_bound"),
    ("measured gain", "measured_gain"),
    ("error %", "gain_error_pct"),
]
SHARING_COLUMNS: Columns = [
    ("group", "group"),
    ("jobs", "jobs"),
    (CONCURRENT.name, CONCURRENT.compared_as),
    (f"{CONCURRENT} predicted", "concurrent_predicted"),
    ("error %", "concurrent_error_pct"),
    (CROSSOVER.name, CROSSOVER.compared_as),
    (f"{CROSSOVER} predicted", "crossover_predicted"),
    ("the plan's pick", "planned_sharing"),
    ("best measured", "best_measured"),
    ("pick / best", "pick_vs_best"),
    ("why the pick", "planned_reason"),
]
ADAPTIVE_COLUMNS: Columns = [
    ("group", "group"),
    ("jobs", "jobs"),
    (ADAPTIVE.name, ADAPTIVE.compared_as),
    (f"vs best of {CROSSOVER}, {CONCURRENT}", "adaptive_vs_best"),
    ("settled in", "adaptive_way"),
    ("time in each way", "time"),
    ("decisions", "decisions"),
]
TIMELINE_COLUMNS: Columns = [
    ("group", "group"),
    ("#", "seq"),
    ("from s", "from_s"),
    ("to s", "to_s"),
    ("what", "kind"),
    ("way", "way"),
    ("aggregate", "aggregate"),
    ("+/-", "error"),
    ("each job's speed", "speeds"),
    ("why", "reason"),
]
POLICY_COLUMNS: Columns = [
    ("group", "group"),
    ("jobs", "jobs"),
    ("policy", "policy"),
    (CROSSOVER.name, "aggregate"),
    (f"vs {CONCURRENT}", "vs_concurrent"),
    ("simulated", "simulated"),
    ("window s", "window_s"),
]
TURN_COLUMNS: Columns = [
    ("group", "group"),
    ("job", "name"),
    ("policy", "policy"),
    ("turn wait p50 ms", "wait_ms"),
    ("p90 ms", "wait_p90_ms"),
    ("yields", "yields"),
    ("rank skew p50 ms", "skew_p50_ms"),
    ("p90 ms ", "skew_p90_ms"),
]
PARITY_COLUMNS: Columns = [
    ("group", "group"),
    ("job", "name"),
    ("mode vs alone", "mode"),
    ("policy", "policy"),
    ("iterations compared", "steps"),
    ("max |loss difference|", "max_abs_loss_diff"),
    ("identical", "identical"),
]
SUMMARY_COLUMNS: Columns = [
    ("experiment", "id"),
    ("kind", "kind"),
    ("status", "status"),
    ("created", "created_at"),
    ("jobs", "jobs"),
    ("runs", "runs"),
    ("modes", "modes"),
    ("best crossover gain", "best_crossover_gain"),
]
DIGITS = {
    "accuracy": 3,
    "final_loss": 4,
    "samples_per_s": 1,
    "samples_per_s_shared": 1,
    "gain_error_pct": 1,
    "window_s": 1,
    "concurrent_error_pct": 1,
}
JOB_CSV_FIELDS = (
    "experiment",
    "run_id",
    "name",
    "recipe",
    "mode",
    "policy",
    "group",
    "slot",
    "engine",
    "np",
    "status",
    "exit_code",
    "iterations",
    "iterations_planned",
    "samples_per_s",
    "samples_per_s_shared",
    "speed",
    "iteration_ms",
    "data_ms",
    "compute_ms",
    "communication_ms",
    "wait_ms",
    "wait_p90_ms",
    "skew_p50_ms",
    "skew_p90_ms",
    "yields",
    "slowdown",
    "final_loss",
    "accuracy",
    "started_at",
    "ended_at",
    "wall_s",
    "log_dir",
    "error",
)


# the tables by turn policy and of turns: their titles and what they show, on the terminal and the HTML page
POLICY_TITLE, POLICY_NOTE = "crossover by turn policy", "simulated: the model on the jobs' runs alone"
TURN_TITLE, TURN_NOTE = (
    "turns under crossover",
    "waiting for the turn per iteration, yields to a job ranked first, and the skew between one iteration's first "
    "grants on the job's devices",
)


# what a group's runs measured: a group with none of them and no run that finished (every run failed) would be
# a row of dashes in every table of groups
MEASURED_GROUP_FIGURES = (
    "sequential",
    CONCURRENT.compared_as,
    CROSSOVER.compared_as,
    ADAPTIVE.compared_as,
    "crossover_vs_concurrent",
    "measured_gain",
)
TURN_FIGURES = ("wait_ms", "wait_p90_ms", "yields", "skew_p50_ms", "skew_p90_ms")


def groups_that_ran(groups: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups with a figure measured or a run that finished (the others are left out of the tables of groups;
    a planned run's group, which no job ran alone, has no figure but the plan's)."""
    finished = {job.get("group") for job in jobs if job.get("status") == RunStatus.FINISHED}
    return [
        g for g in groups if g["group"] in finished or any(g.get(key) is not None for key in MEASURED_GROUP_FIGURES)
    ]


def policy_table_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's table by turn policy: a row per group and policy, where crossover ran under more than one
    policy (else none: the groups' table says it all)."""
    rows = policy_rows(groups)
    return rows if len({row["policy"] for row in rows}) > 1 else []


def turn_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's table of turns: each job's run that took turns (crossover) and has a figure of them."""
    return [
        job for job in jobs if job["mode"] == Mode.CROSSOVER and any(job.get(key) is not None for key in TURN_FIGURES)
    ]


def policy_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per group and turn policy that crossover ran under."""
    return [
        {
            "group": g["group"],
            "jobs": g["jobs"],
            "policy": policy,
            **entry,
            "simulated": (g.get("simulated") or {}).get(policy, {}).get("gain"),
        }
        for g in groups
        for policy, entry in sorted(g.get("policies", {}).items())
    ]


def adaptive_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per group that ran adaptive: its gain, against the better fixed way, where it settled, the
    share of its time in each way and how many decisions it made."""
    return [
        {
            **g,
            "time": ", ".join(f"{way} {share:.0%}" for way, share in g["adaptive_time"].items()),
            "decisions": sum(1 for segment in g["adaptive_timeline"] if segment["kind"] == "settled"),
        }
        for g in groups
        if g.get("adaptive_timeline")
    ]


def timeline_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every segment of every adaptive group's timeline, its times in seconds from the group's first."""
    rows = []
    for g in groups:
        timeline = g.get("adaptive_timeline") or []
        origin = min((segment["started"] for segment in timeline), default=0.0)
        for segment in timeline:
            rows.append(
                {
                    "group": g["group"],
                    **segment,
                    "from_s": segment["started"] - origin,
                    "to_s": segment["ended"] - origin if segment["ended"] is not None else None,
                    "speeds": ", ".join(f"{name} {speed:.2f}" for name, speed in (segment["speeds"] or {}).items()),
                    "reason": segment["reason"] + _decided_on(segment.get("decision")),
                }
            )
    return rows


def _decided_on(decision: dict[str, Any] | None) -> str:
    """A segment's figures, in words: a settled one's aggregate of each way and the difference with its
    error, what whole runs measured before where it weighed in, and what another pair could win and cost where
    the round weighed one; the seconds of evaluations a measured one left out and what it charged for them; the
    jobs whose speed is relative to a stand-in for their time alone."""
    words = ""
    if decision and "ways" in decision:
        ways = ", ".join(f"{way} {value:.3f}" for way, value in decision["ways"].items())
        words = f" ({ways}; difference {decision['difference']:+.3f} +/- {decision['difference_error']:.3f})"
    if decision and "measured_before" in decision and "combined" in decision:
        before, combined = decision["measured_before"], decision["combined"]
        words += (
            f"; turns against none, as whole runs measured them before: {before['difference']:+.1%} +/-"
            f" {before['error']:.1%}, weighed in with the windows: {combined['difference']:+.1%}"
            f" +/- {combined['error']:.1%}"
        )
    another = (decision or {}).get("another_pair")
    if another:  # the round weighed another pair of windows (run/adaptive.py, `Stakes`)
        words += f"; another pair could win {another['could_win_s']:.2f} s and cost {another['costs_s']:.2f} s"
    evaluations = (decision or {}).get("evaluations") or {}
    left_out = max((evaluations.get("left_out_s") or {}).values(), default=0.0)
    factors = {name: factor for name, factor in (evaluations.get("charged") or {}).items() if factor != 1.0}
    if left_out:
        words += f"; {left_out:.1f} s held up by an evaluation left out"
    if factors:
        words += "; evaluations charged: " + ", ".join(f"{name} x{factor:.3f}" for name, factor in factors.items())
    stand_ins = (decision or {}).get("relative_to_fastest_seen") or []
    if stand_ins:
        words += (
            f"; no time alone known for {', '.join(stand_ins)} (profile at this link, or run alone beside it): speed"
            " relative to its pace when first measured, not to alone"
        )
    return words


def job_rows(jobs: Iterable[dict[str, Any]], not_started: Iterable[NotStarted] = ()) -> list[dict[str, Any]]:
    """Jobs' rows as tables show them (`display_rows`), a job alone in its group (of the jobs that ran and of the
    units not started) shown `alone`: it ran by itself, as its plan said, not one after another (its JSON keeps the
    mode it ran in, sequential)."""
    jobs = list(jobs)
    names: dict[Any, set[Any]] = {}
    for job in jobs:
        if job.get("group") is not None:
            names.setdefault(job["group"], set()).add(job.get("name"))
    for unit in not_started:
        if unit.group in names:
            names[unit.group].update(unit.jobs)
    return display_rows(
        {**job, "mode": ALONE.name}
        if job.get("mode") == Mode.SEQUENTIAL and job.get("group") is not None and len(names[job["group"]]) == 1
        else job
        for job in jobs
    )


def display_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with lists joined, tiny loss differences readable (0.00 would hide a 1e-7 drift) and a NaN final loss
    said (a cell shows NaN as "-", the mark of no value)."""
    shown = []
    for row in rows:
        row = dict(row)
        if isinstance(row.get("jobs"), list):
            row["jobs"] = " + ".join(row["jobs"])
        if isinstance(row.get("final_loss"), float) and math.isnan(row["final_loss"]):
            row["final_loss"] = "nan"
        if isinstance(row.get("max_abs_loss_diff"), float):
            difference = row["max_abs_loss_diff"]
            row["max_abs_loss_diff"] = "0.0" if difference == 0 else f"{difference:.3g}"
        if isinstance(row.get("identical"), bool):
            row["identical"] = "yes" if row["identical"] else "no"
        shown.append(row)
    return shown


def job_columns(comparison: bool) -> Columns:
    """Train and profile runs have no groups, turns or partners: leave those columns out. A comparison's
    samples/s are those the slowdown compares: over the time the group's jobs ran together (the overlap
    window; alone, the whole run). The whole run's stay in JSON and CSV (`samples_per_s`)."""
    if comparison:
        return [
            ("samples/s together", "samples_per_s_shared") if key == "samples_per_s" else (header, key)
            for header, key in JOB_COLUMNS
        ]
    return [c for c in JOB_COLUMNS if c[1] not in ("group", "wait_ms", "slowdown")]


def print_report_tables(report: ExperimentReport, pictures: dict[str, str]) -> None:
    """The report on the terminal: jobs, groups, sharing, policies, turns, parity, then warnings, failures
    and where the pictures are."""
    experiment = report.experiment
    jobs, every_group = [job.to_json() for job in report.jobs], [group.to_json() for group in report.groups]
    groups = groups_that_ran(every_group, jobs)
    print_table(
        f"xover report  experiment {report.id}  ({experiment.kind}, {experiment.status}, "
        f"{experiment.created_at}, link {experiment.bandwidth or 'host network'})",
        job_columns(report.is_comparison),
        job_rows(jobs, report.not_started),
        DIGITS,
    )
    print_not_started(report.not_started)
    if report.makespan is not None:
        console.print(makespan_line(report.makespan), markup=False, highlight=False, soft_wrap=True)
    if groups:
        print_table(
            "aggregate throughput over the time the jobs shared the devices, each job normalised by its "
            "speed alone (sequential = 1.0); gains are crossover vs sequential",
            GROUP_COLUMNS,
            display_rows(groups),
            DIGITS,
        )
        never_alone = never_alone_line(report.groups, report.jobs)
        if never_alone is not None:
            console.print(never_alone, markup=False, highlight=False, soft_wrap=True)
        print_table(
            "each way of sharing predicted against measured, and the plan's pick against the best mode "
            "measured (concurrent: under MPS where its runs had MPS)",
            SHARING_COLUMNS,
            display_rows(groups),
            DIGITS,
        )
        policies = policy_table_rows(groups)
        if policies:
            print_table(f"{POLICY_TITLE} ({POLICY_NOTE})", POLICY_COLUMNS, display_rows(policies), DIGITS)
    adaptive = adaptive_rows(every_group)  # a timeline's decisions, even where its runs failed before a figure
    if adaptive:
        print_table(
            "adaptive: each group measured turns against none while it ran and settled on the better "
            "(docs/design.md, Adaptive)",
            ADAPTIVE_COLUMNS,
            display_rows(adaptive),
            DIGITS,
        )
        print_table(
            "adaptive, its timeline: warm-up, probe windows (each job's speed over the window relative to its "
            "iteration alone as the group knew it while it ran - its profile's, else its run alone here - so not "
            "always the run alone the table above sets it against), and each decision with the figures it was made on",
            TIMELINE_COLUMNS,
            display_rows(timeline_rows(every_group)),
            {**DIGITS, "from_s": 1, "to_s": 1, "aggregate": 3, "error": 3},
        )
    turns = turn_rows(jobs)
    if turns:
        print_table(f"{TURN_TITLE}: {TURN_NOTE}", TURN_COLUMNS, turns, DIGITS)
    if report.parity:
        print_table(
            "accuracy parity: largest per-iteration |loss difference| from the job alone (expected 0.0 on CPU)",
            PARITY_COLUMNS,
            display_rows(p.to_json() for p in report.parity),
            DIGITS,
        )
    elif report.is_comparison:
        console.print("accuracy parity: no job ran both alone and shared, nothing to compare")
    print_warnings(report_warnings(report.jobs, report.groups, report.experiment.lengths_in_seconds))
    print_failures(jobs)
    for name, path in pictures.items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True, markup=False)


def never_alone_line(groups: Iterable[Any], jobs: Iterable[RunResult]) -> str | None:
    """Under the groups' table: the groups none of whose jobs ran alone in the experiment (a plan's run in one way),
    which is why their measured cells are empty; None where every group has its runs alone. `groups` have a
    `group` (their index): a report's, or a run's comparisons."""
    jobs = list(jobs)
    never_alone = [
        str(group.group)
        for group in groups
        if not any(job.group == group.group and job.mode == Mode.SEQUENTIAL for job in jobs)
    ]
    if not never_alone:
        return None
    return (
        f"group{'s' if len(never_alone) > 1 else ''} {', '.join(never_alone)}: no job ran alone in this experiment, "
        "so no gain is measured (a job's speed is relative to its run alone; `xover run ... --mode all` runs its "
        "jobs alone first, then every way side by side)"
    )


def makespan_line(makespan: PlanMakespan) -> str:
    """A plan's run in one way: its makespan measured, beside the same plan's run of the other kind (shared, or
    one after another), also measured, and the plan's prediction."""
    kind = "its jobs one after another" if makespan.one_after_another else "the plan's jobs sharing devices"
    if makespan.measured_s is None:
        why = "still running" if makespan.running else "a job did not finish"
        return f"makespan ({kind}): not measured, {why}"
    line = f"makespan {makespan.measured_s:.1f} s measured ({kind}, first job's start to last job's end)"
    if makespan.predicted_s is not None:
        line += f"; the plan predicted {makespan.predicted_s:.1f} s"
    other = "as planned" if makespan.one_after_another else "its jobs one after another"
    if makespan.other_experiment is None:
        how = "`xover run PLAN`" if makespan.one_after_another else "`xover run PLAN --mode sequential`"
        return line + (
            f"; no run of this plan {'as planned' if makespan.one_after_another else 'one after another'} with the "
            f"same jobs, lengths and link to set beside it ({how} with the same options)"
        )
    if makespan.other_s is None:
        return line + f"; {other} in {makespan.other_experiment}: not measured, a job did not finish"
    shared, alone = (
        (makespan.other_s, makespan.measured_s)
        if makespan.one_after_another
        else (makespan.measured_s, makespan.other_s)
    )
    verdict = f"{alone / shared:.2f}x faster shared" if shared < alone else "NOT faster shared"
    return line + f"; {other}: {makespan.other_s:.1f} s measured in {makespan.other_experiment} ({verdict})"


def failed_jobs(jobs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs that ended badly and say why: failed ones, and the other unfinished ones with an error."""
    return [
        job
        for job in jobs
        if job.get("status") != RunStatus.FINISHED and (job.get("status") == RunStatus.FAILED or job.get("error"))
    ]


def turns_lost_line(job: dict[str, Any]) -> str:
    """One line: a job recorded as crossover whose ranks gave up turns part-way, where and why."""
    lost = job["turns_lost"]
    devices = sorted({str(note.get("device")) for note in lost})
    return (
        f"{job.get('name')} ({job.get('mode')}) gave up crossover turns on device {', '.join(devices)} "
        f"({lost[0].get('why')}); from then on it ran without turns: its figures are not crossover's"
    )


def turns_taken_back_line(job: dict[str, Any]) -> str | None:
    """One line, for a job a turn server took a turn back from at its lease (a hung rank, or a collective of the
    script's own inside the turn): where, after how long, and what its figures are then; None for another job."""
    stats = job.get("turn_stats") or {}
    taken = stats.get("taken_back") or []
    if not taken:
        return None
    hosts = {note.get("host") for note in taken}
    devices = sorted(
        {f"{note.get('host')}:{note.get('device')}" if len(hosts) > 1 else str(note.get("device")) for note in taken}
    )
    longest = max(float(note.get("held_s") or 0.0) for note in taken)
    count = max(len(taken), int(stats.get("revoked") or 0))  # the notes stop at a cap
    times = "once" if count == 1 else f"{count} times"
    line = (
        f"{job.get('name')} ({job.get('mode')}) held its turn past its lease on device {', '.join(devices)} "
        f"({times}, the longest {longest:.1f} s), and the turn was taken back so that its partners could go on"
    )
    if any(note.get("in_a_ring") for note in taken):
        line += (
            ": its ranks held one device while waiting for another that a partner held, and it did not give the turn "
            "up when asked, as a rank in a collective of the script's own inside the turn cannot (docs/design.md, "
            "A hung turn)"
        )
    return line + "; the rest of that compute phase ran without a turn"


def failure_line(job: dict[str, Any]) -> str:
    """One line (plain text) of why a job did not finish: job, mode, reason, and its log folder."""
    mode = job.get("mode") or "?"
    if job.get("policy"):
        mode += f", {job['policy']}"
    reason = failure_reason(job.get("error"))
    if reason is None:
        reason = (
            f"exit code {job['exit_code']}, nothing on its stderr"
            if job.get("exit_code") is not None
            else "no error recorded"
        )
    return f"{job.get('name')} ({mode}) {job.get('status')}: {reason}  (log: {job.get('log_dir') or '-'})"


def print_warnings(warnings: Iterable[str]) -> None:
    """Each of what makes the figures above less sure, on its own line."""
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def print_not_started(units: Iterable[NotStarted]) -> None:
    """Under a table of jobs (`xover report`'s, `xover run`'s): the runs the scheduler did not start, and why
    (why the table has fewer rows than the modes asked)."""
    for line in not_started_lines(list(units)):
        console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)


def print_failures(jobs: Iterable[dict[str, Any]]) -> None:
    """Under a table of jobs: why each one that did not finish failed (the whole text is in the JSON,
    the HTML report and the rank logs); each job whose ranks gave up crossover turns part-way, and each one a
    turn was taken back from at its lease."""
    jobs = list(jobs)
    for job in failed_jobs(jobs):
        console.print(failure_line(job), style="red", markup=False, highlight=False, soft_wrap=True)
    for job in jobs:
        if job.get("turns_lost"):
            console.print(turns_lost_line(job), style="yellow", markup=False, highlight=False, soft_wrap=True)
        taken_back = turns_taken_back_line(job)
        if taken_back is not None:
            console.print(taken_back, style="yellow", markup=False, highlight=False, soft_wrap=True)


def print_summary_table(briefs: list[ExperimentBrief]) -> None:
    """`xover report all` on the terminal, newest first."""
    print_table(
        f"xover report all  ({len(briefs)} experiment{'s' if len(briefs) != 1 else ''}, newest first)",
        SUMMARY_COLUMNS,
        summary_rows(briefs),
        DIGITS,
    )


def summary_rows(briefs: list[ExperimentBrief]) -> list[dict[str, Any]]:
    """One summary row per experiment, as the JSON writes it."""
    return [brief.summary().to_json() for brief in briefs]


def report_dict(report: ExperimentReport, pictures: dict[str, str] | None) -> dict[str, Any]:
    """The report as `xover report --format json` writes it; `pictures` None (null) where they could not be
    written."""
    return {
        "experiment": report.experiment.to_json(),
        "jobs": [job.to_json() for job in report.jobs],
        "groups": [group.to_json() for group in report.groups],
        "parity": [parity.to_json() for parity in report.parity],
        "pictures": pictures,
        "not_started": [unit.to_json() for unit in report.not_started],
        "makespan": report.makespan.to_json() if report.makespan is not None else None,
    }


def summary_dict(briefs: list[ExperimentBrief]) -> dict[str, Any]:
    """`xover report all` as its JSON writes it."""
    return {"experiments": summary_rows(briefs)}


# A cell a spreadsheet would read as a formula (`=cmd|...`, `+`, `-`, `@`, or a tab or CR before one)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell that would start a formula, kept as text by a leading `'` (a trace named `=cmd|calc!A1.csv`
    became a live formula in the simulation's CSV); numbers, and text that is a number, as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def write_csv(stream: TextIO, fields: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Rows as CSV under a header of `fields`; keys not among them are left out; no cell a formula."""
    writer = csv.DictWriter(stream, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: spreadsheet_safe(value) for key, value in row.items()} for row in rows)


def csv_text(fields: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """Rows as CSV text (write_csv)."""
    buffer = io.StringIO()
    write_csv(buffer, fields, rows)
    return buffer.getvalue()


def write_report_csv(report: ExperimentReport, jobs_path: Path, iterations_path: Path) -> list[Path]:
    """One row per job and mode, and every iteration of rank 0 of every run; the two files replaced together."""
    for path in (jobs_path, iterations_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    iteration_rows = [row for run_id in sorted(report.iterations) for row in report.iterations[run_id]]
    files = {
        jobs_path: csv_text(JOB_CSV_FIELDS, [job.to_json() for job in report.jobs]),
        iterations_path: csv_text(ITERATION_FIELDS, iteration_rows),
    }
    write_all_whole(files)  # both replaced, or neither: never this run's jobs beside another's iterations
    return list(files)
