"""The report's pictures, as PNG files: timeline, throughput by mode, loss curves, predicted vs measured, and an
adaptive group's ways over time.

Figures are built with matplotlib's object API (no pyplot), so nothing needs a display and no
global state leaks between reports; saving a Figure to PNG uses the Agg renderer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import rows_of
from ..results import GainPoint, GroupReport, RunResult, mode_rank
from ..sharing import ADAPTIVE, CONCURRENT, CROSSOVER, MPS, SHARED_MODES, Mode
from .data import ExperimentReport, PicturesNotWritten
from .timeline import PHASES, intervals_in_window, middle_window

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PHASE_COLOURS = {"compute": "#3b6fb6", "communication": "#e8893a", "turn wait": "#c9c9c9"}
MODE_COLOURS = {
    Mode.SEQUENTIAL: "#8c8c8c",
    Mode.CONCURRENT: "#e8893a",
    Mode.CROSSOVER: "#3b6fb6",
    Mode.ADAPTIVE: "#2a9d8f",
    MPS.name: "#6a994e",
    "fluid bound": "#ffffff",
}
JOB_COLOURS = ["#3b6fb6", "#d1495b", "#2a9d8f", "#8e6bb8", "#e8893a", "#6a994e", "#b5838d", "#457b9d"]
TIMELINE_ITERATIONS = 8
SHOWN_NAME_CHARS = 40
DPI = 110


def picture_names(report: ExperimentReport) -> tuple[str, ...]:
    """The pictures make_pictures may draw for `report`, each FOLDER/<name>.png."""
    if not report.is_comparison:  # a lone job has no modes or gains to compare
        return ("losses",)
    if not report.groups:  # no group of its own to place among the store's: the picture would show only others'
        return ("timeline", "throughput", "losses", "adaptive")
    return ("timeline", "throughput", "losses", "predicted_vs_measured", "adaptive")


def picture_paths(report: ExperimentReport, folder: Path) -> list[Path]:
    """The PNG files make_pictures may write into `folder` (checked before the first is written)."""
    return [folder / f"{name}.png" for name in picture_names(report)]


def make_pictures(report: ExperimentReport, points: list[GainPoint], folder: Path) -> dict[str, str]:
    """Every picture that the experiment has data for; name -> path of the PNG written."""
    makers = {
        "timeline": lambda path: timeline_picture(report, path),
        "throughput": lambda path: throughput_picture(report.groups, report.id, path),
        "losses": lambda path: losses_picture(report, path),
        "predicted_vs_measured": lambda path: predicted_vs_measured_picture(points, report.id, path),
        "adaptive": lambda path: adaptive_picture(report.groups, report.id, path),
    }
    written = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in picture_names(report):
            path = folder / f"{name}.png"
            if makers[name](path):
                written[name] = str(path)
    except OSError as error:
        raise PicturesNotWritten(folder, error) from None
    return written


def _figure(**options: Any) -> Figure:
    """A new matplotlib Figure (matplotlib is loaded with the first picture, not with the report)."""
    from matplotlib.figure import Figure

    return Figure(**options)


def _save(figure: Figure, path: Path) -> bool:
    figure.savefig(path, dpi=DPI)
    return True


# ---------------------------------------------------------------------------------------- timeline


def timeline_picture(report: ExperimentReport, path: Path) -> bool:
    """Device 0 over ~8 iterations of the first group's crossover run (and concurrent run, if any)."""
    shared = [j for j in report.jobs if j.mode in SHARED_MODES and j.group is not None]
    if not shared:
        return False
    group = min(j.group for j in shared if j.group is not None)
    panels = []
    for mode in reversed(SHARED_MODES):  # crossover first
        jobs = sorted(
            (j for j in shared if j.group == group and j.mode == mode),
            key=lambda j: (j.slot if j.slot is not None else 0, j.name),
        )
        rows = [rows_of(report.iterations, j) for j in jobs]
        found = middle_window(rows, TIMELINE_ITERATIONS)
        if found is not None:
            window, when = found
            note = {
                "steady": f"~{TIMELINE_ITERATIONS} iterations mid-run",
                "start-up": "the jobs overlapped only during warm-up (short run)",
                "apart": "the jobs never ran at the same time (short run): the longest one shown",
            }[when]
            panels.append((mode, jobs, rows, window, note))
    if not panels:
        return False
    heights = [max(1, len(jobs)) for _, jobs, _, _, _ in panels]
    figure = _figure(figsize=(11, 1.0 + 0.75 * sum(heights) + 0.6 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (mode, jobs, rows, window, note) in zip(axes, panels):
        for lane, job_rows in enumerate(rows[: len(jobs)]):
            for phase in PHASES:
                spans = [
                    ((i.start - window[0]) * 1000, (i.end - i.start) * 1000)
                    for i in intervals_in_window(job_rows, window)
                    if i.phase == phase
                ]
                ax.broken_barh(
                    spans, (lane - 0.35, 0.7), facecolors=PHASE_COLOURS[phase], edgecolor="white", linewidth=0.4
                )
        ax.set_yticks(range(len(jobs)), [_job_label(j) for j in jobs])
        ax.set_ylim(len(jobs) - 0.5, -0.5)
        ax.set_xlim(0, (window[1] - window[0]) * 1000)
        ax.set_title(f"{mode}: device 0 (rank 0 of each job), {note}", loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("time in the window (ms)")
    handles = [_patch(PHASE_COLOURS[p], p if p != "compute" else "data + compute") for p in PHASES]
    figure.legend(handles=handles, loc="outside upper right", ncols=3, frameon=False, fontsize=9)
    figure.suptitle(f"Who uses the device when - experiment {report.id}, group {group}", x=0.01, ha="left", fontsize=11)
    return _save(figure, path)


def _job_label(job: RunResult) -> str:
    return _shown(job.name or "") + (f"  (turn {job.slot})" if job.slot is not None else "")


def _shown(name: str) -> str:
    """A job's name as a picture shows it: one of up to 200 characters squeezed the plot into a sliver (and
    matplotlib warned on every report); its start and its end (a copy's #2) kept."""
    return name if len(name) <= SHOWN_NAME_CHARS else f"{name[: SHOWN_NAME_CHARS - 13]}...{name[-10:]}"


def _patch(colour: str, label: str):
    from matplotlib.patches import Patch

    return Patch(facecolor=colour, edgecolor="#555555", linewidth=0.5, label=label)


# ---------------------------------------------------------------------------------------- throughput


def throughput_picture(groups: list[GroupReport], experiment_id: str, path: Path) -> bool:
    """Aggregate throughput per mode, each job normalised by its speed alone (sequential = 1.0)."""
    series = [
        (Mode.SEQUENTIAL.value, "sequential"),
        (CONCURRENT.name, CONCURRENT.compared_as),
        (CROSSOVER.name, CROSSOVER.compared_as),
        ("fluid bound", "fluid_bound"),
    ]
    if any(ADAPTIVE.name in g.measured for g in groups):
        series.insert(3, (ADAPTIVE.name, "adaptive_gain"))
    # without the jobs' speed alone nothing can be normalised (e.g. a crossover-only or failed run)
    groups = [g for g in groups if g.sequential is not None and any(getattr(g, k) for _, k in series[1:])]
    if not groups:
        return False
    figure = _figure(figsize=(max(6.0, 1.2 + 2.8 * len(groups)), 4.2), layout="constrained")
    ax = figure.subplots()
    width = 0.8 / len(series)
    for index, (label, key) in enumerate(series):
        xs = [g_index + (index - (len(series) - 1) / 2) * width for g_index in range(len(groups))]
        values = [getattr(group, key) for group in groups]
        bars = ax.bar(
            [x for x, v in zip(xs, values) if v is not None],
            [v for v in values if v is not None],
            width * 0.92,
            color=MODE_COLOURS[label],
            edgecolor="#333333",
            linewidth=0.7,
            hatch="//" if label == "fluid bound" else None,
            label=label,
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.axhline(1.0, color="#333333", linewidth=0.8, linestyle=":")
    labels = [f"group {g.group}\n" + " + ".join(map(_shown, g.jobs)) for g in groups]
    ax.set_xticks(range(len(groups)), labels, fontsize=8)
    ax.set_ylabel("aggregate throughput (jobs' worth, alone = 1)")
    ax.set_ylim(0, max(1.2, *(getattr(g, k) or 0 for g in groups for _, k in series)) * 1.18)
    ax.legend(ncols=4, fontsize=8, loc="upper left", frameon=False)
    ax.set_title(f"Throughput by mode - experiment {experiment_id}", loc="left", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    return _save(figure, path)


# ---------------------------------------------------------------------------------------- losses


def loss_jobs(report: ExperimentReport) -> list[RunResult]:
    """The runs the losses picture draws: each job alone, and under crossover or adaptive (taking turns), those
    with iterations; concurrent runs are left out (the accuracy parity table compares their losses)."""
    return [
        j
        for j in report.jobs
        if (j.is_alone or j.mode in (Mode.CROSSOVER, Mode.ADAPTIVE)) and rows_of(report.iterations, j)
    ]


def losses_words(report: ExperimentReport) -> tuple[str, str]:
    """The losses picture's title and caption, as what it draws ran: alone only (a run of sequential and
    concurrent, a training run) says nothing of crossover."""
    jobs = loss_jobs(report)
    shared = sorted({j.mode for j in jobs if not j.is_alone and j.mode is not None}, key=mode_rank)
    if shared:
        under = " and ".join(shared)
        return (
            f"Loss alone and under {under}",
            f"Training loss per iteration of each job alone and under {under}: taking turns must not change the "
            "training, so the curves coincide.",
        )
    alone = ", ".join(sorted({j.mode for j in jobs if j.mode is not None}, key=mode_rank)) or "alone"
    caption = f"Training loss per iteration of each job alone ({alone})"
    if report.is_comparison:
        caption += "; no run of this experiment took turns (crossover or adaptive)"
        if any(j.mode == Mode.CONCURRENT for j in report.jobs):
            caption += ", and its concurrent runs are not drawn (the accuracy parity table compares their losses)"
    return "Loss alone", caption + "."


def losses_picture(report: ExperimentReport, path: Path) -> bool:
    """Each job's loss per iteration alone (solid) and under crossover or adaptive (dashed): they should
    coincide."""
    jobs = loss_jobs(report)
    if not jobs:
        return False
    figure = _figure(figsize=(8, 4.2), layout="constrained")
    ax = figure.subplots()
    names = list(dict.fromkeys(j.name for j in jobs))
    for job in jobs:
        rows = rows_of(report.iterations, job)
        colour = JOB_COLOURS[names.index(job.name) % len(JOB_COLOURS)]
        alone = job.is_alone
        ax.plot(
            [r["step"] for r in rows],
            [r["loss"] for r in rows],
            color=colour,
            linestyle="-" if alone else "--",
            linewidth=2.2 if alone else 1.2,
            alpha=0.55 if alone else 1.0,
            marker=None if alone else "x",
            markersize=4,
            label=f"{_shown(job.name or '')} ({job.mode})",
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss (rank 0)")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"{losses_words(report)[0]} - experiment {report.id}", loc="left", fontsize=11)
    ax.grid(alpha=0.3)
    return _save(figure, path)


# ---------------------------------------------------------------------------------------- predicted vs measured


def predicted_vs_measured_picture(points: list[GainPoint], highlight: str | None, path: Path) -> bool:
    """Every comparison run's crossover gain: model/plan prediction against the measurement."""
    if not points:
        return False
    figure = _figure(figsize=(5.8, 5.4), layout="constrained")
    ax = figure.subplots()
    values = [p.predicted_gain for p in points] + [p.measured_gain for p in points]
    low, high = min(0.5, *values) * 0.9, max(1.5, *values) * 1.1
    ax.plot([low, high], [low, high], color="#555555", linewidth=0.8, linestyle="--", label="measured = predicted")
    for source, marker in (("plan", "o"), ("model", "s")):
        for current in (False, True):
            chosen = [p for p in points if p.predicted_from == source and (p.experiment == highlight) == current]
            if not chosen:
                continue
            ax.scatter(
                [p.predicted_gain for p in chosen],
                [p.measured_gain for p in chosen],
                marker=marker,
                s=60 if current else 30,
                color="#d1495b" if current else "#3b6fb6",
                edgecolor="#222222",
                linewidth=0.5,
                zorder=3,
                label=f"{'this run' if current else 'other runs'} (predicted by the {source})",
            )
    for point in points:
        if point.experiment == highlight:
            ax.annotate(
                " + ".join(map(_shown, point.jobs)),
                (point.predicted_gain, point.measured_gain),
                fontsize=7,
                textcoords="offset points",
                xytext=(5, 4),
            )
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted crossover gain (x sequential)")
    ax.set_ylabel("measured crossover gain (x sequential)")
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    ax.set_title(
        f"Predicted vs measured gain ({len(points)} group{'s' if len(points) != 1 else ''})", loc="left", fontsize=11
    )
    ax.grid(alpha=0.3)
    return _save(figure, path)


# ---------------------------------------------------------------------------------------- adaptive


def adaptive_picture(groups: list[GroupReport], experiment_id: str, path: Path) -> bool:
    """Each adaptive group's timeline: the way it ran in over time (a probe window hatched, with its measured
    aggregate; a settled stretch solid, with the figures of its decision), and its share of time in each way."""
    shown = [g for g in groups if g.timeline]
    if not shown:
        return False
    figure = _figure(figsize=(11, 1.2 + 1.5 * len(shown)), layout="constrained")
    axes = figure.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, group in zip(axes, shown):
        origin = min(segment["started"] for segment in group.timeline)
        end = max((segment["ended"] or segment["started"]) for segment in group.timeline)
        for segment in group.timeline:
            start = segment["started"] - origin
            length = (segment["ended"] if segment["ended"] is not None else end) - segment["started"]
            colour = MODE_COLOURS.get(segment["way"], "#999999")
            ax.broken_barh(
                [(start, max(length, 1e-3))],
                (0.15, 0.7),
                facecolors=colour,
                edgecolor="white",
                linewidth=0.6,
                hatch="//" if segment["kind"] == "probe" else ("..") if segment["kind"] == "warm-up" else None,
                alpha=0.55 if segment["kind"] in ("warm-up", "alone") else 1.0,
            )
            if segment.get("aggregate") is not None and segment["kind"] == "probe":
                ax.text(start + length / 2, 0.5, f"{segment['aggregate']:.2f}", ha="center", va="center", fontsize=7)
        shares = ", ".join(f"{way} {share:.0%}" for way, share in group.time_in_ways.items())
        jobs = " + ".join(map(_shown, group.jobs))
        ax.set_title(
            f"group {group.group} ({jobs}): settled in {group.adaptive_way or '-'}; time: {shares}",
            loc="left",
            fontsize=9,
        )
        ax.set_yticks([])
        ax.set_xlim(0, max(end - origin, 1e-3))
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds from the group's first iteration (hatched: a probe window and its aggregate)")
    ways = sorted({segment["way"] for group in shown for segment in group.timeline})
    figure.legend(
        handles=[_patch(MODE_COLOURS.get(way, "#999999"), way) for way in ways],
        loc="outside upper right",
        ncols=len(ways),
        frameon=False,
        fontsize=9,
    )
    figure.suptitle(f"Adaptive: the way each group ran in - experiment {experiment_id}", x=0.01, ha="left", fontsize=11)
    return _save(figure, path)
