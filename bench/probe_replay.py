"""Would a round have stopped after its first pair of windows had it weighed what another pair could win against
what it costs? Replayed on the adaptive runs in a store.

Each round of an adaptive group that probed more than one pair and was decided without that rule (its settled
segment's figures hold no `another_pair`) is taken as stored: each window's speeds and error (evaluations
charged), the round's window length, and what ran before where it weighed in. The rule (run/adaptive.py:
`verdict` with `Stakes`, under the default XOVER_ADAPTIVE) is applied to its first pair: the time left is
from the end of the second window to the first job's end, a switch counted at `switch_cost` of the slowest
job's iteration then (the median of its last five). As a check of the replay, the round's own decision is
replayed on all its windows too. Printed: the rounds that would have stopped after one pair, the probe time
that saves, and whether the state taken then agrees with the round's own decision and with the row's columns
(the same comparison's crossover, under its first policy, against concurrent: where the comparison has both).

    .venv/bin/python bench/probe_replay.py [--db results/xover.db]

One machine's store at a time: its windows and switches hold only on the hardware they were measured on.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xover.run.adaptive import RECENT, AdaptiveSettings, Measured, Stakes, verdict
from xover.sharing import CONCURRENT, CROSSOVER
from xover.turns import DEFAULT_POLICY
from xover.turns.protocol import FREE, TURNS

CONFIG = AdaptiveSettings()
RULES = ("clear", "equal", "time", "pairs")  # the rules a round decided without `Stakes` settles by
COLUMNS = (
    "run_id",
    "experiment",
    "group",
    "runs",
    "kind",
    "way",
    "started",
    "ended",
    "window",
    "speeds",
    "aggregate",
    "error",
    "decision",
)  # of a stored segment, as read
JSON_COLUMNS = ("runs", "window", "speeds", "decision")


@dataclass(frozen=True)
class Before:
    """What ran before, as a settled segment's figures recorded it (turns against none, relative, and its
    error): what `verdict` reads of a `MeasuredBefore`."""

    difference: float
    error: float

    def relative_difference(self) -> tuple[float, float]:
        return self.difference, self.error


def window_of(segment: dict) -> Measured:
    """A stored probe window as the rule reads it (its aggregate's error shared evenly among its jobs)."""
    start, end = segment["window"] or (segment["started"], segment["ended"])
    speeds = segment["speeds"]
    share = (segment["error"] or 0.0) / math.sqrt(max(1, len(speeds)))
    return Measured(start, end, dict(speeds), {name: share for name in speeds})


def state_of(way: str) -> str:
    """The state a way of sharing is (run/adaptive.py's `way_of`, the other way round)."""
    return TURNS if way == CROSSOVER.name else FREE


def rounds(segments: Sequence[dict]) -> list[tuple[list[dict], dict]]:
    """The unit's rounds: each its probe windows (the measured ones, in order) and the settled segment that
    decided it."""
    found, probes = [], []
    for segment in segments:
        if segment["kind"] == "probe":
            if segment["aggregate"] is not None:
                probes.append(segment)
        elif segment["kind"] == "settled":
            if probes and (segment["decision"] or {}).get("rule") in (*RULES, "cost"):
                found.append((probes, segment))
            probes = []
        else:
            probes = []
    return found


def slowest_before(db: sqlite3.Connection, runs: Sequence[int], moment: float) -> float:
    """The slowest job's recent iteration at `moment` (the median of its last RECENT), as the controller takes it."""
    slowest = 0.0
    for run in runs:
        recent = [
            seconds
            for (seconds,) in db.execute(
                "SELECT iteration_s FROM iteration_metrics WHERE run_id = ? AND wall_time <= ? "
                "ORDER BY wall_time DESC LIMIT ?",
                (run, moment, RECENT),
            )
        ]
        if recent:
            slowest = max(slowest, statistics.median(recent))
    return slowest


def columns_of(db: sqlite3.Connection, experiment: str, group: int | None) -> tuple[str, float] | None:
    """The comparison's better way of the two, as a state, and crossover's lead over concurrent (None: it has not
    both)."""
    aggregates = dict(
        db.execute(
            "SELECT way, SUM(json_each.value) FROM sharing_measurements, json_each(sharing_measurements.speeds) "
            "WHERE experiment_id = ? AND group_index IS ? AND (way = ? OR (way = ? AND policy = ?)) GROUP BY way",
            (experiment, group, CONCURRENT.name, CROSSOVER.name, DEFAULT_POLICY),
        ).fetchall()
    )
    if not {CROSSOVER.name, CONCURRENT.name} <= set(aggregates):
        return None
    lead = aggregates[CROSSOVER.name] / aggregates[CONCURRENT.name] - 1
    return (TURNS if lead > 0 else FREE), lead


def replay(db: sqlite3.Connection) -> list[dict]:
    """Each round decided without the rule that probed more than one pair: what the rule makes of its first pair."""
    units: dict[int, list[dict]] = {}
    stored = ", ".join(("run_id", "experiment_id", "group_index", *COLUMNS[3:]))
    for row in db.execute(f"SELECT {stored} FROM sharing_segments ORDER BY run_id, seq"):
        segment = dict(zip(COLUMNS, row))
        for key in JSON_COLUMNS:
            segment[key] = json.loads(segment[key]) if segment[key] else None
        units.setdefault(segment["run_id"], []).append(segment)
    found = []
    for segments in units.values():
        first = segments[0]
        runs = [run for run in (first["runs"] or []) if run is not None]
        ends = [
            db.execute("SELECT MAX(wall_time) FROM iteration_metrics WHERE run_id = ?", (run,)).fetchone()[0]
            for run in runs
        ]
        if not ends or None in ends:
            continue
        for probes, settled in rounds(segments):
            decision = settled["decision"] or {}
            if len(probes) < 4 or "another_pair" in decision or decision.get("rule") not in RULES:
                continue
            windows = [(state_of(p["way"]), window_of(p)) for p in probes]
            before = decision.get("measured_before")
            weighed = Before(before["difference"], before["error"]) if before and "combined" in decision else None
            # the check: the round's own decision, on all its windows
            out = decision["rule"] if decision["rule"] in ("time", "pairs") else ""
            again = verdict(windows, CONFIG, out, weighed)  # type: ignore[arg-type]
            second_end = windows[1][1].end
            slowest = slowest_before(db, runs, second_end)
            length = next(
                (p["decision"].get("length_s") for p in probes if (p["decision"] or {}).get("length_s")), CONFIG.window
            )
            stakes = Stakes(max(0.0, min(ends) - second_end), length, CONFIG.switch_cost * slowest)
            after_one = verdict(windows[:2], CONFIG, "", weighed, stakes)  # type: ignore[arg-type]
            found.append(
                {
                    "decided": state_of(settled["way"]),
                    "reproduced": again.state == state_of(settled["way"]),
                    "windows": len(probes),
                    "after_one": after_one,
                    "saved_s": sum(p["ended"] - p["started"] for p in probes[2:] if p["ended"] is not None),
                    "columns": columns_of(db, first["experiment"], first["group"]),
                }
            )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("results/xover.db"), help="the store (SQLite)")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"{args.db}: no such store (run `make bench` first, or give --db)", file=sys.stderr)
        return 2
    found = replay(sqlite3.connect(f"file:{args.db}?mode=ro", uri=True))
    if not found:
        print(f"{args.db}: no round that probed more than one pair, decided without the rule")
        return 0
    stopped = [r for r in found if r["after_one"].rule == "cost"]
    print(
        f"{len(found)} rounds probed more than one pair, decided without the rule; the replay reproduced "
        f"{sum(r['reproduced'] for r in found)} of their own decisions"
    )
    print(
        f"after one pair the rule would have stopped {len(stopped)} of them, saving "
        f"{sum(r['saved_s'] for r in stopped):.1f} s of probing ({sum(r['windows'] - 2 for r in stopped)} windows)"
    )
    same = sum(r["after_one"].state == r["decided"] for r in stopped)
    print(f"  the state taken then: the round's own decision in {same} of {len(stopped)}")
    judged = [r for r in stopped if r["columns"] is not None]
    for label, rows in (
        ("the row's columns' better way", judged),
        ("... where the columns were 3% or more apart", [r for r in judged if abs(r["columns"][1]) >= 0.03]),
    ):
        taken = sum(r["after_one"].state == r["columns"][0] for r in rows)
        decided = sum(r["decided"] == r["columns"][0] for r in rows)
        print(f"  {label}: the state taken after one pair {taken} of {len(rows)}, the round's own decision {decided}")
    print(
        "each stopped round: windows, could win / costs (s), taken after one pair, decided, columns' crossover / "
        "concurrent - 1"
    )
    for r in stopped:
        could_win, costs = r["after_one"].another_pair
        columns = f"{r['columns'][1]:+.1%}" if r["columns"] else "-"
        taken = r["after_one"].state
        print(f"  {r['windows']} windows, {could_win:.2f} / {costs:.2f}, {taken}, {r['decided']}, {columns}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
