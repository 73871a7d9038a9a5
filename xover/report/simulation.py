"""`xover report` of a simulation (`xover simulate`): every policy's replay side by side.

The same views as a run's report: a table on the terminal, JSON, CSV files, and one HTML page with the
pictures (each policy's JCT distribution, and the devices' use over time).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..console import console, counted, fmt, print_table
from ..replay.metrics import jct_cdf
from ..replay.step import shown_settings
from ..replay.traces import skipped_text
from ..results import ExperimentInfo
from ..store.models import Experiment, Replay, ReplayJob, ReplayUtilisation
from ..writes import write_all_whole
from .data import PicturesNotWritten, ReportError, experiment_row
from .html import _page, embedded_picture, html_table
from .plots import DPI, JOB_COLOURS
from .tables import csv_text

SUMMARY_COLUMNS = [
    ("policy", "policy"),
    ("jobs", "jobs"),
    ("done", "finished"),
    ("avg JCT s", "avg_jct_s"),
    ("median JCT s", "median_jct_s"),
    ("p99 JCT s", "p99_jct_s"),
    ("makespan s", "makespan_s"),
    ("utilisation", "utilisation"),
    ("avg queueing s", "avg_queue_s"),
    ("grouped", "grouped_share"),
    ("by way of sharing", "sharing"),
    ("preemptions", "preemptions"),
    ("replay s", "wall_s"),
]
DIGITS = {
    "avg_jct_s": 0,
    "median_jct_s": 0,
    "p99_jct_s": 0,
    "makespan_s": 0,
    "avg_queue_s": 0,
    "utilisation": 3,
    "grouped_share": 3,
    "wall_s": 1,
}
REPLAY_FIELDS = (
    "experiment",
    "policy",
    "model",
    "trace",
    "trace_format",
    "hosts",
    "devices",
    "jobs",
    "finished",
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "makespan_s",
    "avg_queue_s",
    "utilisation",
    "grouped_share",
    "by_sharing",
    "events",
    "preemptions",
    "wall_s",
    "settings",
)
JOB_FIELDS = (
    "policy",
    "name",
    "kind",
    "gpus",
    "arrival_s",
    "start_s",
    "end_s",
    "jct_s",
    "queued_s",
    "work_s",
    "preemptions",
    "grouped_s",
)
UTILISATION_FIELDS = ("policy", "start_s", "end_s", "busy", "grouped", "waiting", "running")
SIMULATION_PICTURES = ("jct_cdf", "utilisation")  # the PNG files of --format json and html, in the run's folder
PICTURE_CAPTIONS = {
    "jct_cdf": "Share of jobs completed within a time of their arrival (JCT), per policy; log scale.",
    "utilisation": "Share of the cluster's devices busy over the trace (solid) and in groups (dashed), per policy, "
    "averaged over equal spans of time.",
}


@dataclass
class SimulationReport:
    """A simulation: its experiment row, each replay's row, and (per policy) its jobs and utilisation."""

    experiment: ExperimentInfo
    replays: list[dict[str, Any]]
    jobs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    utilisation: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The experiment's id."""
        return self.experiment.id


def gather_simulation(session: Session, experiment: Experiment, with_jobs: bool = True) -> SimulationReport:
    """A simulation's rows from the store (its jobs only `with_jobs`: a trace may hold many)."""
    rows = session.scalars(select(Replay).where(Replay.experiment_id == experiment.id).order_by(Replay.id)).all()
    if not rows:
        raise ReportError(f"experiment {experiment.id} is a simulation with no replay stored")
    replays, jobs, utilisation = [], {}, {}
    for row in rows:
        replay = {key: getattr(row, key) for key in REPLAY_FIELDS if key != "experiment"}
        replay["settings"] = shown_settings(replay["settings"] or {})
        replays.append({"experiment": row.experiment_id, **replay})
        utilisation[row.policy] = [
            {
                "policy": row.policy,
                "start_s": u.start_s,
                "end_s": u.end_s,
                "busy": u.busy,
                "grouped": u.grouped,
                "waiting": u.waiting,
                "running": u.running,
            }
            for u in session.scalars(
                select(ReplayUtilisation).where(ReplayUtilisation.replay_id == row.id).order_by(ReplayUtilisation.id)
            )
        ]
        if with_jobs:
            columns = [getattr(ReplayJob, name) for name in JOB_FIELDS if name not in ("policy", "jct_s", "queued_s")]
            jobs[row.policy] = [
                _job_row(row.policy, values)
                for values in session.execute(
                    select(*columns).where(ReplayJob.replay_id == row.id).order_by(ReplayJob.id)
                ).all()
            ]
    return SimulationReport(experiment_row(experiment), replays, jobs, utilisation)


def _job_row(policy: str, values: Any) -> dict[str, Any]:
    row = dict(values._mapping)
    done = row["end_s"] is not None
    started = row["start_s"] is not None
    return {
        "policy": policy,
        **row,
        "jct_s": row["end_s"] - row["arrival_s"] if done else None,
        "queued_s": row["start_s"] - row["arrival_s"] if started else None,
    }


def summary_rows(report: SimulationReport) -> list[dict[str, Any]]:
    """One row per policy, for the table."""
    return [
        {
            **replay,
            "sharing": ", ".join(f"{name} {share:.0%}" for name, share in replay["by_sharing"].items()),
        }
        for replay in report.replays
    ]


def describe(report: SimulationReport) -> list[tuple[str, str]]:
    """What was replayed how: the trace, the cluster, the model, the semantics."""
    first = report.replays[0]
    settings = first["settings"]
    placement = ", ".join(sorted({f"{r['policy']}: {r['settings'].get('placement')}" for r in report.replays}))
    lines = [
        ("trace", f"{first['trace']} ({first['trace_format']}, {counted(first['jobs'], 'job')})"),
        ("cluster", f"{first['hosts']} ({counted(first['devices'], 'device')})"),
        ("model", first["model"]),
        (
            "semantics",
            f"{settings.get('semantics')}: {settings.get('reschedule')} at each event, restart "
            f"{settings.get('restart')}, a job alone at 1/{settings.get('alone_factor')}",
        ),
        ("placement", placement),
        (
            "grouping",
            f"up to {counted(settings.get('max_group', 0), 'job')}, at least {settings.get('min_gain'):.0%} gain",
        ),
    ]
    if settings.get("notes"):
        lines.append(("notes", "; ".join(settings["notes"])))
    if settings.get("skipped"):
        lines.append(("skipped", skipped_text(settings["skipped"])))
    return lines


def shown_digits(rows: list[dict[str, Any]]) -> dict[str, int]:
    """DIGITS, but two decimals in a column of seconds that holds a time under ten (jobs of a second's length:
    a JCT of 0.129 s read 0)."""
    short = {
        column
        for column, digits in DIGITS.items()
        if digits == 0 and any(isinstance(row.get(column), float) and 0 < abs(row[column]) < 10 for row in rows)
    }
    return {**DIGITS, **dict.fromkeys(short, 2)}


def print_simulation_tables(report: SimulationReport, pictures: dict[str, str]) -> None:
    """The terminal's view."""
    rows = summary_rows(report)
    print_table(f"xover report: simulation {report.id}", SUMMARY_COLUMNS, rows, shown_digits(rows))
    for label, text in describe(report):
        console.print(f"{label}: {text}", highlight=False, soft_wrap=True, markup=False)
    for name, where in pictures.items():
        console.print(f"{name}: {where}", highlight=False, soft_wrap=True, markup=False)


def simulation_dict(report: SimulationReport, pictures: dict[str, str] | None) -> dict[str, Any]:
    """The JSON: the experiment, each replay's figures (`utilisation` one figure, as in the table and `xover
    simulate --json`) and settings, its utilisation over time (`utilisation_series`) and its JCT distribution
    (at up to 200 quantiles)."""
    return {
        "experiment": report.experiment.to_json(),
        "replays": [
            {
                **replay,
                "utilisation_series": report.utilisation.get(replay["policy"], []),
                "jct_cdf": [{"jct_s": jct, "share": share} for jct, share in _cdf(report, replay["policy"])],
            }
            for replay in report.replays
        ],
        "pictures": pictures,
    }


def _cdf(report: SimulationReport, policy: str) -> list[tuple[float, float]]:
    return jct_cdf([job["jct_s"] for job in report.jobs.get(policy, []) if job["jct_s"] is not None])


def simulation_csv_paths(folder: Path, stem: str | None = None) -> dict[str, Path]:
    """The files write_simulation_csv writes: part -> path (simulation, jobs, utilisation)."""
    return {
        part: folder / (f"{part}.csv" if not stem else f"{stem}.csv" if part == "simulation" else f"{stem}-{part}.csv")
        for part in ("simulation", "jobs", "utilisation")
    }


def simulation_picture_paths(folder: Path) -> list[Path]:
    """The PNG files simulation_pictures may write into `folder`."""
    return [folder / f"{name}.png" for name in SIMULATION_PICTURES]


def write_simulation_csv(report: SimulationReport, folder: Path, stem: str | None = None) -> list[Path]:
    """simulation.csv (a row per policy; its settings and sharing as JSON), jobs.csv (every job of every
    policy), utilisation.csv; with `stem`: STEM.csv, STEM-jobs.csv and STEM-utilisation.csv."""
    named = simulation_csv_paths(folder, stem)
    folder.mkdir(parents=True, exist_ok=True)
    replays = [
        {key: json.dumps(value) if isinstance(value, (dict, list)) else value for key, value in replay.items()}
        for replay in report.replays
    ]
    files = {
        named["simulation"]: csv_text(REPLAY_FIELDS, replays),
        named["jobs"]: csv_text(JOB_FIELDS, [job for jobs in report.jobs.values() for job in jobs]),
        named["utilisation"]: csv_text(
            UTILISATION_FIELDS, [point for points in report.utilisation.values() for point in points]
        ),
    }
    write_all_whole(files)  # the three replaced together, or none of them
    return list(files)


def simulation_pictures(report: SimulationReport, folder: Path) -> dict[str, str]:
    """The JCT distributions and the utilisation over time, as PNG files; name -> path."""
    written = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        makers = {"jct_cdf": _jct_cdf_picture, "utilisation": _utilisation_picture}
        for name in SIMULATION_PICTURES:
            path = folder / f"{name}.png"
            if makers[name](report, path):
                written[name] = str(path)
    except OSError as error:
        raise PicturesNotWritten(folder, error) from None
    return written


def _jct_cdf_picture(report: SimulationReport, path: Path) -> bool:
    curves = {
        policy: jct_cdf([job["jct_s"] for job in jobs if job["jct_s"] is not None and job["jct_s"] > 0])
        for policy, jobs in report.jobs.items()
    }
    curves = {policy: curve for policy, curve in curves.items() if curve}
    if not curves:
        return False
    from matplotlib.figure import Figure  # matplotlib loads when a picture is drawn, not with every command

    figure = Figure(figsize=(7.5, 4.5))
    axes = figure.add_subplot()
    for index, (policy, curve) in enumerate(curves.items()):
        axes.step(
            [jct for jct, _ in curve],
            [share for _, share in curve],
            where="post",
            label=policy,
            color=JOB_COLOURS[index % len(JOB_COLOURS)],
        )
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (s)")
    axes.set_ylabel("share of jobs")
    axes.set_ylim(0, 1.01)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right")
    axes.set_title(f"JCT distribution, simulation {report.id}")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return True


def _utilisation_picture(report: SimulationReport, path: Path) -> bool:
    series = {policy: points for policy, points in report.utilisation.items() if points}
    if not series:
        return False
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.5))
    axes = figure.add_subplot()
    for index, (policy, points) in enumerate(series.items()):
        colour = JOB_COLOURS[index % len(JOB_COLOURS)]
        middles = [(p["start_s"] + p["end_s"]) / 2 / 3600 for p in points]
        axes.plot(middles, [p["busy"] for p in points], color=colour, label=f"{policy} busy")
        if any(p["grouped"] > 0 for p in points):
            axes.plot(middles, [p["grouped"] for p in points], color=colour, linestyle="--", label=f"{policy} grouped")
    axes.set_xlabel("time since the first arrival (h)")
    axes.set_ylabel("share of devices")
    axes.set_ylim(0, 1.05)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower left", fontsize="small", ncol=2)
    axes.set_title(f"Utilisation over time, simulation {report.id}")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return True


def simulation_html(report: SimulationReport, pictures: dict[str, str]) -> str:
    """The simulation's report as a page that stands alone."""
    details = [("created", report.experiment.created_at), ("command", report.experiment.command), *describe(report)]
    rows = summary_rows(report)
    sections = [
        "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(fmt(v))}</dd>" for k, v in details) + "</dl>",
        "<h2>Policies side by side</h2>",
        "<p>JCT: arrival to completion; makespan: first arrival to last completion; utilisation: busy device-time "
        "over the cluster's; queueing: arrival to first start; grouped: share of busy device-time in groups.</p>",
        html_table(SUMMARY_COLUMNS, rows, shown_digits(rows)),
    ]
    if pictures:
        sections.append("<h2>Pictures</h2>")
        sections += [embedded_picture(name, where, PICTURE_CAPTIONS.get(name)) for name, where in pictures.items()]
    return _page(f"xover report: simulation {report.id}", sections)
