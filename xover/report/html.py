"""One self-contained HTML page: tables and pictures inline (base64 data URIs), no external resources,
so the file can be mailed or archived and still opens in any browser."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from .. import __version__
from ..analysis import report_warnings
from ..console import counted, fmt
from ..results import not_started_lines
from .data import ExperimentBrief, ExperimentReport
from .plots import losses_words
from .tables import (
    ADAPTIVE_COLUMNS,
    DIGITS,
    GROUP_COLUMNS,
    PARITY_COLUMNS,
    POLICY_COLUMNS,
    POLICY_NOTE,
    POLICY_TITLE,
    SHARING_COLUMNS,
    SUMMARY_COLUMNS,
    TIMELINE_COLUMNS,
    TURN_COLUMNS,
    TURN_NOTE,
    TURN_TITLE,
    Columns,
    adaptive_rows,
    display_rows,
    groups_that_ran,
    job_columns,
    job_rows,
    makespan_line,
    never_alone_line,
    policy_table_rows,
    summary_rows,
    timeline_rows,
    turn_rows,
    turns_lost_line,
    turns_taken_back_line,
)

PICTURE_CAPTIONS = {
    "timeline": "What device 0 does over about 8 iterations in the middle of the run: per job, data + compute, "
    "waiting for the previous all-reduce (communication) and waiting for its turn. Under crossover "
    "the compute bars of the jobs alternate.",
    "throughput": "Aggregate throughput by mode, each job normalised by its speed alone (sequential = 1.0), "
    "and the model's ideal gain from the sequential runs' medians.",
    # "losses": plots.losses_words, as what the picture draws ran
    "predicted_vs_measured": "Predicted (plan, or the simulation of the policy from the sequential runs) against "
    "measured crossover gain for every comparison run in the database; this run in red.",
    "adaptive": "Each adaptive group over time: the way it ran in (crossover: turns; concurrent or mps: none), its "
    "warm-up dotted, each probe window hatched with the aggregate it measured, each settled stretch solid.",
}

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f0f0f0; text-align: left; } td.number { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; font-size: 0.9em; }
dt { color: #666; } dd { margin: 0; font-family: ui-monospace, monospace; }
footer { color: #888; font-size: 0.8em; margin-top: 3em; }
"""


def html_table(columns: Columns, rows: Iterable[dict[str, Any]], digits: dict[str, int] | None = None) -> str:
    """Rows as an HTML table, every value escaped, numbers right-aligned as on the terminal."""
    rows = list(rows)
    header = "".join(f"<th>{escape(title)}</th>" for title, _ in columns)
    body = []
    for row in rows:
        cells = []
        for _, key in columns:
            value = row.get(key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            text = escape(fmt(value, (digits or {}).get(key, 2)))
            cells.append(f"<td class=number>{text}</td>" if numeric else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def embedded_picture(name: str, path: str, caption: str | None = None) -> str:
    """A PNG embedded in the page (the file stands alone), with its caption."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    caption = caption or PICTURE_CAPTIONS.get(name, name)
    return (
        f'<figure id="{escape(name)}"><img alt="{escape(name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def _capitalised(words: str) -> str:
    """A terminal table's title (or what it shows) as the page's heading (or sentence) begins."""
    return words[:1].upper() + words[1:]


def _page(title: str, sections: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width, initial-scale=1'><title>{escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{''.join(sections)}"
        f"<footer>written by xover {escape(__version__)} (xover report)</footer></body></html>\n"
    )


def report_html(report: ExperimentReport, pictures: dict[str, str]) -> str:
    """One experiment's report as a page that stands alone: the same tables as the terminal's, and the
    pictures embedded."""
    experiment = report.experiment
    details = [
        ("kind", experiment.kind),
        ("status", experiment.status),
        ("created", experiment.created_at),
        ("ended", experiment.ended_at),
        ("command", experiment.command),
        ("link", experiment.bandwidth or "host network"),
        ("hosts", experiment.hosts),
        ("plan", experiment.plan_id),
    ]
    jobs = [job.to_json() for job in report.jobs]
    sections = [
        "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(fmt(v))}</dd>" for k, v in details) + "</dl>",
        "<h2>Jobs</h2>",
        html_table(job_columns(report.is_comparison), job_rows(jobs, report.not_started), DIGITS),
        *(f"<p>{escape(line)}</p>" for line in not_started_lines(report.not_started)),
        *([f"<p>{escape(makespan_line(report.makespan))}</p>"] if report.makespan is not None else []),
    ]
    every_group = [group.to_json() for group in report.groups]
    shown = groups_that_ran(every_group, jobs)
    if shown:
        never_alone = never_alone_line(report.groups, report.jobs)
        sections += [
            "<h2>Groups: aggregate throughput and gain</h2>",
            "<p>Each job normalised by its speed alone (sequential = 1.0); gains are crossover vs "
            "sequential; error is measured vs the plan's prediction.</p>",
            html_table(GROUP_COLUMNS, display_rows(shown), DIGITS),
            *([f"<p>{escape(never_alone)}</p>"] if never_alone is not None else []),
            "<h2>Ways of sharing: predicted against measured, and the plan's pick</h2>",
            "<p>Concurrent (no coordination; under MPS where its runs had MPS) and crossover, each predicted "
            "and measured; the plan's pick beside the best mode measured.</p>",
            html_table(
                SHARING_COLUMNS,
                display_rows(shown),
                {**DIGITS, "concurrent_error_pct": 1},
            ),
        ]
        policies = policy_table_rows(shown)
        if policies:
            sections += [
                f"<h2>{escape(_capitalised(POLICY_TITLE))}</h2>",
                f"<p>{escape(_capitalised(POLICY_NOTE))}.</p>",
                html_table(POLICY_COLUMNS, display_rows(policies), DIGITS),
            ]
    if adaptive_rows(every_group):  # a timeline's decisions, even where its runs failed before a figure
        sections += [
            "<h2>Adaptive: the way each group ran in, and why</h2>",
            "<p>Each group measured turns against none while it ran (probe windows) and settled on the better; "
            "each decision is shown with the figures it was made on.</p>",
            html_table(ADAPTIVE_COLUMNS, display_rows(adaptive_rows(every_group)), DIGITS),
            html_table(
                TIMELINE_COLUMNS,
                display_rows(timeline_rows(every_group)),
                {**DIGITS, "from_s": 1, "to_s": 1, "aggregate": 3, "error": 3},
            ),
        ]
    turns = turn_rows(jobs)
    if turns:
        sections += [
            f"<h2>{escape(_capitalised(TURN_TITLE))}</h2>",
            f"<p>{escape(_capitalised(TURN_NOTE))}.</p>",
            html_table(TURN_COLUMNS, turns, DIGITS),
        ]
    sections += [
        f"<p><strong>Warning:</strong> {escape(w)}</p>"
        for w in report_warnings(report.jobs, report.groups, report.experiment.lengths_in_seconds)
    ]
    if report.parity:
        sections += [
            "<h2>Accuracy parity</h2>",
            "<p>Largest per-iteration |loss difference| between each job alone and shared (expected 0.0 on CPU).</p>",
            html_table(PARITY_COLUMNS, display_rows(parity.to_json() for parity in report.parity), DIGITS),
        ]
    for job in report.jobs:
        if job.turns_lost:
            sections.append(
                f"<h2>{escape(job.name or '')} ({escape(job.mode or '')}) gave up crossover turns</h2>"
                f"<p>{escape(turns_lost_line(job.to_json()))}</p>"
            )
        taken_back = turns_taken_back_line(job.to_json())
        if taken_back is not None:
            sections.append(
                f"<h2>{escape(job.name or '')} ({escape(job.mode or '')}): a turn taken back</h2>"
                f"<p>{escape(taken_back)}</p>"
            )
        if job.error:  # failed, or ended otherwise (timeout, stopped, ...) with why: its status says which
            sections.append(
                f"<h2>{escape(job.name or '')} ({escape(job.mode or '')}): {escape(str(job.status or 'failed'))}</h2>"
                f"<pre>{escape(job.error)}</pre>"
            )
    if pictures:
        sections.append("<h2>Pictures</h2>")
        sections += [
            embedded_picture(name, path, losses_words(report)[1] if name == "losses" else None)
            for name, path in pictures.items()
        ]
    return _page(f"xover report: experiment {report.id}", sections)


def summary_html(briefs: list[ExperimentBrief], pictures: dict[str, str]) -> str:
    """`xover report all` as a page that stands alone, with the predicted-against-measured picture."""
    sections = [
        f"<p>{counted(len(briefs), 'experiment')}, newest first.</p>",
        html_table(SUMMARY_COLUMNS, summary_rows(briefs), DIGITS),
    ]
    sections += [
        embedded_picture(
            name,
            path,
            "Predicted (plan, or the simulation of the policy from the sequential runs) against "
            "measured crossover gain for every comparison run in the database.",
        )
        for name, path in pictures.items()
    ]
    return _page("xover report: every experiment", sections)
