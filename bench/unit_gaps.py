"""The time between two units on the same devices: from one unit's last job's end to the next unit's start, as
the store recorded them (a run's `ended_at` is its launchers' exit; `started_at` is once every launcher of the
unit has started). In a comparison the units run one at a time, so each boundary is the teardown of one unit
(its leftovers swept on every host) and the start of the next (its link, its turn servers, each job's private
settings on every host, its launchers). A planned run's groups on the same devices follow each other the same
way; units that ran side by side are not boundaries.

    .venv/bin/python bench/unit_gaps.py [--db results/xover.db] [--experiment ID]   (default: the newest)

To measure one, on the emulated cluster (`xover cluster up --hosts 2 --devices-per-host 1 --bandwidth 1gbit`):

    .venv/bin/xover run --group mlp-synthetic mlp-balanced -H xo-h1:1,xo-h2:1 \\
        --mode sequential,concurrent,crossover --iterations 12
    .venv/bin/python bench/unit_gaps.py
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple


class Run(NamedTuple):
    """One run as the store keeps it: which unit it belongs to, and when it started and ended (unix time)."""

    run_id: int
    group: int | None
    mode: str
    policy: str | None
    started: float
    ended: float


class Gap(NamedTuple):
    """A boundary between two units: the mode before, the mode after, and the seconds between them."""

    before: str
    after: str
    seconds: float


def units_of(runs: Sequence[Run]) -> list[tuple[str, float, float]]:
    """Each unit (a run alone, or a group's runs in one mode and policy) as (mode, first start, last end), in
    the order they started."""
    grouped: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        key = (run.run_id,) if run.mode == "sequential" else (run.group, run.mode, run.policy)
        grouped[key].append(run)
    units = [(found[0].mode, min(r.started for r in found), max(r.ended for r in found)) for found in grouped.values()]
    return sorted(units, key=lambda unit: unit[1])


def gaps_of(runs: Sequence[Run]) -> list[Gap]:
    """The boundaries between units that followed each other (the next started after the one before ended)."""
    units = units_of(runs)
    return [
        Gap(before[0], after[0], after[1] - before[2])
        for before, after in zip(units, units[1:])
        if after[1] >= before[2]
    ]


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def read_runs(db: sqlite3.Connection, experiment: str) -> list[Run]:
    """The experiment's finished runs."""
    return [
        Run(run_id, group, mode, policy, _seconds(started), _seconds(ended))
        for run_id, group, mode, policy, started, ended in db.execute(
            "SELECT id, group_index, mode, policy, started_at, ended_at FROM runs "
            "WHERE experiment_id = ? AND started_at IS NOT NULL AND ended_at IS NOT NULL ORDER BY id",
            (experiment,),
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("results/xover.db"), help="the store (SQLite)")
    parser.add_argument("--experiment", help="the experiment's id (default: the newest)")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"{args.db}: no such store (run `xover run` first, or give --db)", file=sys.stderr)
        return 2
    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    experiment = args.experiment
    if experiment is None:
        newest = db.execute("SELECT id FROM experiments ORDER BY created_at DESC LIMIT 1").fetchone()
        if newest is None:
            print(f"{args.db}: no experiment in the store", file=sys.stderr)
            return 2
        experiment = newest[0]
    gaps = gaps_of(read_runs(db, experiment))
    if not gaps:
        print(f"experiment {experiment}: no unit followed another on the same devices")
        return 0
    print(f"experiment {experiment}: seconds from one unit's end to the next one's start")
    for gap in gaps:
        print(f"  {gap.before:>11} -> {gap.after:<11} {gap.seconds:6.2f}")
    print(f"  mean {statistics.mean(gap.seconds for gap in gaps):.2f} s over {len(gaps)} boundaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
