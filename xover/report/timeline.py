"""Reconstructing what each job did on the shared devices, second by second, from its iteration rows.

Within one iteration the worker first waits for the previous step's all-reduce (communication),
then for its crossover turn (wait), then loads data and computes; `wall_time` is the end of the
compute. So every iteration splits into three back-to-back-ish intervals that can be drawn.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..analysis import warmup_steps

PHASES = ("compute", "communication", "turn wait")


@dataclass(frozen=True)
class Interval:
    """One phase of one iteration, in wall time."""

    phase: str  # one of PHASES
    start: float  # unix seconds
    end: float


def iteration_intervals(row: dict[str, Any]) -> list[Interval]:
    """An iteration row as its phases back to back: communication, turn wait, then compute (which ends at
    the row's wall time); empty phases left out."""
    end = row["wall_time"]
    start = end - row["iteration_s"]
    communication_end = start + row["communication_s"]
    wait_end = communication_end + row["wait_s"]
    work = row["data_s"] + row["compute_s"]
    intervals = [
        Interval("communication", start, communication_end),
        Interval("turn wait", communication_end, wait_end),
        # anchored at the end: bookkeeping between phases is not in any phase, and would shift it
        Interval("compute", max(end - work, wait_end), end),
    ]
    return [i for i in intervals if i.end > i.start]


def middle_window(runs: list[list[dict[str, Any]]], iterations: int = 8) -> tuple[tuple[float, float], str] | None:
    """A span of about `iterations` periods in the middle of the time all runs were past warm-up,
    and which time that is: "steady", "start-up" or "apart" (the runs never overlapped).

    Start-up skew between launches (a job waiting seconds for its partner's first turn) would
    otherwise dominate the picture, so the window avoids the ends. Short runs may never overlap
    after warm-up: then the overlap of all iterations is used, or failing that the longest run.
    """
    runs = [rows for rows in runs if rows]
    if not runs:
        return None
    steady = [rows[warmup_steps(len(rows)) :] or rows for rows in runs]
    period = max(statistics.median(r["iteration_s"] for r in rows) for rows in steady)
    for when, candidates in (("steady", steady), ("start-up", runs)):  # noqa: B007 - `when` is read after the break
        start, end = _overlap(candidates)
        if end > start:
            break
    else:
        when = "apart"
        longest = max(steady, key=lambda rows: rows[-1]["wall_time"] - _start(rows[0]))
        start, end = _start(longest[0]), longest[-1]["wall_time"]
    span = min(end - start, iterations * period)
    middle = (start + end) / 2
    return (middle - span / 2, middle + span / 2), when


def overlap_fraction(runs: list[list[dict[str, Any]]]) -> float | None:
    """Share of the runs' total time during which all of them were iterating (1.0: fully together).

    Jobs that start at different speeds can miss each other in short runs; then concurrent and
    crossover figures describe jobs that mostly ran alone.
    """
    runs = [rows for rows in runs if rows]
    if len(runs) < 2:
        return None
    start, end = _overlap(runs)
    total = max(rows[-1]["wall_time"] for rows in runs) - min(_start(rows[0]) for rows in runs)
    return max(0.0, end - start) / total if total > 0 else None


def _start(row: dict[str, Any]) -> float:
    return row["wall_time"] - row["iteration_s"]


def _overlap(runs: list[list[dict[str, Any]]]) -> tuple[float, float]:
    """From the latest first iteration's start to the earliest last iteration's end (empty if start >= end)."""
    return max(_start(rows[0]) for rows in runs), min(rows[-1]["wall_time"] for rows in runs)


def intervals_in_window(rows: list[dict[str, Any]], window: tuple[float, float]) -> list[Interval]:
    """The run's intervals that overlap the window, cut to it."""
    low, high = window
    cut = []
    for row in rows:
        for interval in iteration_intervals(row):
            if interval.end > low and interval.start < high:
                cut.append(Interval(interval.phase, max(interval.start, low), min(interval.end, high)))
    return cut
