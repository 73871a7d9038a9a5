"""Reconstructing what each job did on the shared devices, second by second, from its iteration rows.

Within one iteration the worker first waits for the previous step's all-reduce (communication),
then for its crossover turn (wait), then loads data and computes; `wall_time` is the end of the
compute. So every iteration splits into three back-to-back-ish intervals that can be drawn.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..store.queries import warmup_steps

PHASES = ("compute", "communication", "turn wait")


@dataclass(frozen=True)
class Interval:
    phase: str  # one of PHASES
    start: float  # unix seconds
    end: float


def iteration_intervals(row: dict[str, Any]) -> list[Interval]:
    end = row["wall_time"]
    start = end - row["iteration_s"]
    communication_end = start + row["communication_s"]
    wait_end = communication_end + row["wait_s"]
    work = row["data_s"] + row["compute_s"]
    intervals = [Interval("communication", start, communication_end), Interval("turn wait", communication_end, wait_end),
                 # anchored at the end: bookkeeping between phases is not in any phase, and would shift it
                 Interval("compute", max(end - work, wait_end), end)]
    return [i for i in intervals if i.end > i.start]


def middle_window(runs: list[list[dict[str, Any]]], iterations: int = 8) -> tuple[tuple[float, float], bool] | None:
    """A span of about `iterations` periods in the middle of the time all runs were past warm-up,
    and whether that steady overlap existed.

    Start-up skew between launches (a job waiting seconds for its partner's first turn) would
    otherwise dominate the picture, so the window avoids the ends. Short runs may never overlap
    after warm-up: then the overlap of all iterations is used, or failing that the middle of everything.
    """
    runs = [rows for rows in runs if rows]
    if not runs:
        return None
    steady = [rows[warmup_steps(len(rows)):] or rows for rows in runs]
    period = max(statistics.median(r["iteration_s"] for r in rows) for rows in steady)
    start, end = _overlap(steady)
    settled = end > start
    if not settled:
        start, end = _overlap(runs)
    if end <= start:
        start = min(rows[0]["wall_time"] - rows[0]["iteration_s"] for rows in runs)
        end = max(rows[-1]["wall_time"] for rows in runs)
    span = min(end - start, iterations * period)
    middle = (start + end) / 2
    return (middle - span / 2, middle + span / 2), settled


def _overlap(runs: list[list[dict[str, Any]]]) -> tuple[float, float]:
    """From the latest first iteration's start to the earliest last iteration's end (empty if start >= end)."""
    return (max(rows[0]["wall_time"] - rows[0]["iteration_s"] for rows in runs),
            min(rows[-1]["wall_time"] for rows in runs))


def intervals_in_window(rows: list[dict[str, Any]], window: tuple[float, float]) -> list[Interval]:
    """The run's intervals that overlap the window, cut to it."""
    low, high = window
    cut = []
    for row in rows:
        for interval in iteration_intervals(row):
            if interval.end > low and interval.start < high:
                cut.append(Interval(interval.phase, max(interval.start, low), min(interval.end, high)))
    return cut
