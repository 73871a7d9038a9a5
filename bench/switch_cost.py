"""What a switch between turns and none costs a job, measured on the adaptive runs in a store.

For each switch an adaptive group made (the turn servers' `switched` events: the iteration each job switched
at, the state it switched to), each job's first K iterations in the new state are set against its pace there
once settled in (the median of its next ten): their excess, in iterations of its own pace, is what the switch
cost it. Printed by engine and by the state switched to. XOVER_ADAPTIVE's `switch_cost` (run/adaptive.py:
how many of the slowest job's iterations a switch is counted at, when a round weighs another pair of windows)
is read against it (docs/design.md, *The rule*).

    .venv/bin/python bench/switch_cost.py [--db results/xover.db] [--iterations 6]

One machine's store at a time: a switch's cost holds only on the hardware it was measured on.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

STEADY = 10  # iterations after the first K that give the job's pace in the new state


def excess(durations: Sequence[float], first: int) -> float | None:
    """The first `first` iterations' time beyond the pace of the ones after (their median), in iterations of
    that pace; None where too few iterations came after the switch to tell a pace."""
    if len(durations) < first + STEADY // 2:
        return None
    pace = statistics.median(durations[first : first + STEADY])
    return sum(seconds - pace for seconds in durations[:first]) / pace if pace > 0 else None


def switch_costs(db: sqlite3.Connection, first: int) -> dict[tuple[str, str], list[float]]:
    """Each switch of each job of an adaptive group: its excess (`excess`), by (engine, state switched to)."""
    switched: dict[tuple[str, int | None, int, int], tuple[int, str]] = {}
    for experiment, group, slot, detail in db.execute(
        "SELECT experiment_id, group_index, slot, detail FROM turn_events WHERE kind = 'switched'"
    ):
        event = json.loads(detail)
        # every device of a job reports the same iteration (the switch is made at one): the first says it
        switched.setdefault((experiment, group, event["switch"], slot), (int(event["iteration"]), event["state"]))
    costs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (experiment, group, _, slot), (iteration, state) in sorted(switched.items(), key=str):
        run = db.execute(
            "SELECT id, engine FROM runs WHERE experiment_id = ? AND mode = 'adaptive' "
            "AND group_index IS ? AND slot = ?",
            (experiment, group, slot),
        ).fetchone()
        if run is None:
            continue
        # the iteration a job switched at is the acquire that starts it: step iteration - 1
        durations = [
            seconds
            for (seconds,) in db.execute(
                "SELECT iteration_s FROM iteration_metrics WHERE run_id = ? AND step >= ? ORDER BY step LIMIT ?",
                (run[0], iteration - 1, first + STEADY),
            )
        ]
        found = excess(durations, first)
        if found is not None:
            costs[(run[1], state)].append(found)
    return costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("results/xover.db"), help="the store (SQLite)")
    parser.add_argument("--iterations", type=int, default=6, help="of each job after a switch counted as its cost")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"{args.db}: no such store (run `make bench` first, or give --db)", file=sys.stderr)
        return 2
    if args.iterations < 1:
        print("--iterations: at least 1", file=sys.stderr)
        return 2
    costs = switch_costs(sqlite3.connect(f"file:{args.db}?mode=ro", uri=True), args.iterations)
    if not costs:
        print(f"{args.db}: no switch of an adaptive group with {args.iterations + STEADY // 2} iterations after it")
        return 0
    print(
        f"a switch's cost to each job: its first {args.iterations} iterations after it beyond its pace there, "
        "in iterations of that pace"
    )
    print(f"{'engine':8} {'to':6} {'switches':>8} {'median':>7} {'mean':>6} {'p90':>6}")
    everything: list[float] = []
    for (engine, state), found in sorted(costs.items()):
        everything += found
        ordered = sorted(found)
        print(
            f"{engine:8} {state:6} {len(found):8d} {statistics.median(found):7.2f} {statistics.mean(found):6.2f} "
            f"{ordered[int(0.9 * (len(ordered) - 1))]:6.2f}"
        )
    print(f"{'all':15} {len(everything):8d} {statistics.median(everything):7.2f} {statistics.mean(everything):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
