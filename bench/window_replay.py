"""Do adaptive's probe windows read a way as whole runs of it do? Two checks on the `make bench` rows of a store.

- replayed: short windows placed as the controller places them (each opening at an iteration end of the row's
  slowest job, from its fourth on: the first window opens right after a warm-up of two iterations and a third;
  each closing where every job's iterations have passed 0.8 of its length, at the last end the lagging job
  reported) and measured as it measures them (each job's rate, interpolated between the ends of its
  iterations, times its time alone: run/adaptive.py), on the row's fixed runs, over the aggregate of the
  whole stretch both jobs ran. 1: a window reads its way as the whole run does; below 1: the estimator, or a
  window's place, reads it low.
- adaptive's own: each probe window of the row's adaptive run, measured the same way, over its way's column;
  and each job's compute per iteration in the turns windows over the crossover column's at the same steps.
  What the replay does not explain is the adaptive run itself: its state, its switches, or the machine's minute.

A job's time alone is the row's sequential run's (the median of its iterations from the fourth on), as the
bench's columns have it. Rows whose fixed runs are not all there (a failed run) are left out.

    .venv/bin/python bench/window_replay.py [--db results/xover.db] [--length 1.5] [--rows]

One machine's store at a time: what a window reads holds only on the hardware it ran on.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xover.run.adaptive import COVERED, Point, rate_between  # noqa: E402

WARMED = 3  # the slowest job's iterations before a first window opens (warm-up 2, then one more)
CROSSOVER = "crossover:work-conserving"  # the bench's crossover column (its default policy)
FIXED = (CROSSOVER, "concurrent")


def aggregate(
    points: Mapping[str, Sequence[Point]], solo_s: Mapping[str, float], start: float, end: float
) -> float | None:
    """The jobs' speeds relative to alone summed over [start, end], as a probe window is measured; None where a
    job's iterations do not cover it."""
    total = 0.0
    for name, job in points.items():
        rate = rate_between(job, start, end)
        if rate is None:
            return None
        total += rate * solo_s[name]
    return total


def controller_windows(points: Mapping[str, Sequence[Point]], length: float) -> list[tuple[float, float]]:
    """Windows of `length` seconds as the controller places them, one opening at each iteration end of the
    slowest job from its WARMED-th on, up to where the jobs last ran together."""
    slowest = max(points, key=lambda name: (points[name][-1][0] - points[name][0][0]) / max(1, len(points[name]) - 1))
    finish = min(job[-1][0] for job in points.values())
    windows = []
    for opened, _ in points[slowest][WARMED:]:
        target = opened + COVERED * length
        passed = [next((end for end, _ in job if end >= target), None) for job in points.values()]
        if any(end is None for end in passed):
            break
        seen = max(end for end in passed if end is not None)
        # what every job's iterations tell at that moment: the last end the lagging job reported
        closed = min(max(end for end, _ in job if end <= seen) for job in points.values())
        if closed > finish:
            break
        windows.append((opened, closed))
    return windows


def replay(
    points: Mapping[str, Sequence[Point]], solo_s: Mapping[str, float], length: float
) -> tuple[float, list[float]] | None:
    """A fixed run's whole aggregate (from every job's WARMED-th iteration end to where they last ran together)
    and each replayed window's aggregate over it; None where the run is too short for one window."""
    if any(len(job) <= WARMED + 1 for job in points.values()):
        return None
    begin = max(job[WARMED][0] for job in points.values())
    finish = min(job[-1][0] for job in points.values())
    whole = aggregate(points, solo_s, begin, finish) if finish > begin else None
    if not whole:
        return None
    reads = [found / whole for a, b in controller_windows(points, length) if (found := aggregate(points, solo_s, a, b))]
    return (whole, reads) if reads else None


def spread(values: Sequence[float]) -> str:
    """Geometric mean, its standard error (of the logs, as a factor's) and the count."""
    if len(values) < 2:
        return f"{values[0]:.3f} (1)" if values else "-"
    logs = [math.log(value) for value in values]
    error = statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{statistics.geometric_mean(values):.3f} (standard error {error:.3f}, {len(values)})"


class Store:
    """The rows of `make bench` in a store: per (experiment, group), each mode's runs (their iterations)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.rows: dict[tuple[str, int], dict[str, dict[str, int]]] = {}
        for run, experiment, group, name, mode in db.execute(
            "SELECT id, experiment_id, group_index, name, mode || COALESCE(':' || policy, '') FROM runs "
            "WHERE status = 'finished' AND group_index IS NOT NULL ORDER BY id"
        ):
            self.rows.setdefault((experiment, group), {}).setdefault(mode, {})[name] = run

    def iterations(self, run: int) -> list[tuple[int, float, float, float]]:
        """(step, wall time it ended, its seconds, its compute seconds), in order."""
        return self.db.execute(
            "SELECT step, wall_time, iteration_s, compute_s FROM iteration_metrics WHERE run_id = ? ORDER BY step",
            (run,),
        ).fetchall()

    def points(self, runs: Mapping[str, int]) -> dict[str, list[Point]]:
        return {name: [(ended, step + 1.0) for step, ended, _, _ in self.iterations(run)] for name, run in runs.items()}

    def solo_s(self, modes: Mapping[str, Mapping[str, int]]) -> dict[str, float] | None:
        alone = {
            name: [seconds for _, _, seconds, _ in self.iterations(run)[WARMED:]]
            for name, run in modes.get("sequential", {}).items()
        }
        if len(alone) < 2 or not all(alone.values()):
            return None
        return {name: statistics.median(found) for name, found in alone.items()}

    def segments(self, run: int) -> list[tuple[str, str, tuple[float, float]]]:
        """The adaptive run's segments with a window: (kind, way, window)."""
        found = []
        for kind, way, window in self.db.execute(
            "SELECT kind, way, window FROM sharing_segments WHERE run_id = ? ORDER BY seq", (run,)
        ):
            span = json.loads(window) if window else None
            if span:
                found.append((kind, way, (float(span[0]), float(span[1]))))
        return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("results/xover.db"), help="the store (SQLite)")
    parser.add_argument(
        "--length", type=float, default=1.5, help="the replayed windows' length, seconds (adaptive's shortest: 1.5)"
    )
    parser.add_argument(
        "--rows", action="store_true", help="each adaptive row too: its order of modes, its windows over the columns"
    )
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"{args.db}: no such store (run `make bench` first, or give --db)", file=sys.stderr)
        return 2
    if not args.length > 0:
        print("--length: seconds, above 0", file=sys.stderr)
        return 2
    store = Store(sqlite3.connect(f"file:{args.db}?mode=ro", uri=True))
    replayed: dict[str, list[float]] = {mode: [] for mode in FIXED}
    first: dict[str, list[float]] = {mode: [] for mode in FIXED}
    columns: dict[tuple[str, int], dict[str, float]] = {}
    solos: dict[tuple[str, int], dict[str, float]] = {}
    counted = 0
    for key, modes in store.rows.items():
        solo = store.solo_s(modes)
        if solo is None or not all(len(modes.get(mode, {})) == 2 for mode in FIXED):
            continue
        found = {mode: replay(store.points(modes[mode]), solo, args.length) for mode in FIXED}
        if any(value is None for value in found.values()):
            continue
        counted += 1
        solos[key] = solo
        for mode, value in found.items():
            assert value is not None
            whole, reads = value
            columns.setdefault(key, {})[mode] = whole
            replayed[mode].append(statistics.fmean(reads))
            first[mode].append(reads[0])
    if not counted:
        print(f"{args.db}: no row with two jobs in sequential, crossover and concurrent runs (run `make bench` first)")
        return 0
    print(
        f"replayed windows of {args.length:g} s on the fixed runs of {counted} rows: "
        "a window's aggregate over its run's whole"
    )
    for mode in FIXED:
        print(f"  {mode:26} every window {spread(replayed[mode])}; the first {spread(first[mode])}")
    pairs = [
        (x / c, fx / fc)
        for x, c, fx, fc in zip(replayed[CROSSOVER], replayed["concurrent"], first[CROSSOVER], first["concurrent"])
    ]
    print(
        f"  crossover / concurrent in the windows over the columns': every window {spread([a for a, _ in pairs])}; "
        f"the first {spread([b for _, b in pairs])}"
    )
    probes: dict[str, list[float]] = {"crossover": [], "concurrent": []}
    compute: list[float] = []
    for key, modes in store.rows.items():
        adaptive = next((runs for mode, runs in modes.items() if mode.startswith("adaptive")), None)
        if key not in solos or adaptive is None or len(adaptive) != 2:
            continue
        solo = solos[key]
        iterations = {name: store.iterations(run) for name, run in adaptive.items()}
        points = {name: [(ended, step + 1.0) for step, ended, _, _ in rows] for name, rows in iterations.items()}
        row: dict[str, list[float]] = {"crossover": [], "concurrent": [], "compute": []}
        column = {name: {step: c for step, _, _, c in store.iterations(run)} for name, run in modes[CROSSOVER].items()}
        for kind, way, (start, end) in store.segments(min(adaptive.values())):
            if kind != "probe" or way not in probes:
                continue
            found = aggregate(points, solo, start, end)
            if found:
                row[way].append(found / columns[key][CROSSOVER if way == "crossover" else "concurrent"])
            if way != "crossover":
                continue
            for name, rows in iterations.items():
                inside = [(step, c) for step, ended, _, c in rows if start < ended <= end and step in column[name]]
                theirs = [column[name][step] for step, _ in inside]
                if inside and statistics.fmean(theirs) > 0.002:  # a job whose compute is too short to time is left out
                    row["compute"].append(statistics.fmean(c for _, c in inside) / statistics.fmean(theirs))
        for way in probes:
            probes[way] += row[way]
        compute += row["compute"]
        if args.rows and any(row.values()):
            order = ",".join(
                mode.replace(":", "/") for mode in sorted(modes, key=lambda mode: min(modes[mode].values()))
            )
            shown = "; ".join(f"{name} {spread(found)}" for name, found in row.items())
            print(f"row {key[0]} ({order}): windows over their column, {shown}")
    if any(probes.values()):
        print("adaptive's own probe windows, each over its way's column (the same row's whole run)")
        for way, found in probes.items():
            print(f"  {way:26} {spread(found)}")
        print(
            "  each job's compute per iteration in the turns windows over the crossover column's at the same steps: "
            f"{spread(compute)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
