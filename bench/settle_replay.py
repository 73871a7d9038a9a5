"""Would an adaptive row have chosen right had it settled on what ran before? Replayed on `make bench` logs.

For each adaptive row of the logs (in the order given), its pair's figures before it are the mean of the
newest three earlier rows of the same pair and engine (crossover work-conserving, and concurrent), as the store
gives a plan. The earlier mean's lead of one way over the other is set against the row's own two columns:
does the row put the same way ahead? Printed by the earlier lead's size and by how many rows were before it,
so that the threshold of `MeasuredBefore.verdict` (run/adaptive.py) can be read against it
(docs/design.md, *Measured before*). Then the rows whose adaptive group ran one way all its time: that way
measured twice in one row, and how often it met 0.98 x the better column (what the bench's noise leaves of
issue 60's first target).

    .venv/bin/python bench/settle_replay.py results/bench-2026-11-28-adaptive.log ... results/bench-2026-11-29d.log

Give one machine's logs at a time: a measurement holds only on the hardware it was taken on.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

GROUP = re.compile(r"\$ xover run --group (\S+) (\S+) .*--engine (\S+)")
COLUMNS = re.compile(r"\s+sequential 1.00 \| concurrent ([\d.]+) \| crossover work-conserving ([\d.]+)")
ADAPTIVE = re.compile(r"\s+adaptive ([\d.]+): ([\d.]+) of the best(?:.*; time (\w+) 100%$)?")
BANDS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.10)
EARLIER = 3  # store/measured.py: RECENT_MEASUREMENTS


def rows(path: Path) -> Iterator[dict]:
    """Each adaptive row of one bench log: its pair, engine, the two columns and adaptive over the best."""
    pair = engine = None
    columns: tuple[float, float] | None = None
    for line in path.read_text().splitlines():
        if found := GROUP.match(line):
            pair, engine = f"{found.group(1)} + {found.group(2)}", found.group(3)
        elif found := COLUMNS.match(line):
            columns = float(found.group(1)), float(found.group(2))
        elif (found := ADAPTIVE.match(line)) and columns is not None:
            yield {
                "pair": pair,
                "engine": engine,
                "concurrent": columns[0],
                "crossover": columns[1],
                "of_best": float(found.group(2)),
                "adaptive": float(found.group(1)),
                "one_way": found.group(3),  # the way adaptive ran all its time in (None: it ran both)
            }
            columns = None


def band_of(lead: float) -> str:
    low = max(b for b in BANDS if abs(lead) >= b)
    high = next((b for b in BANDS if b > low), None)
    return f"{low:.0%}-{high:.0%}" if high is not None else f"{low:.0%} and more"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="make bench logs of one machine, oldest first")
    args = parser.parse_args(argv)
    history: dict[tuple, list[dict]] = defaultdict(list)
    table: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    against: list[tuple[int, float, float]] = []
    count = 0
    for path in args.logs:
        if not path.is_file():
            print(f"settle_replay: no such log: {path}", file=sys.stderr)
            return 2
        for row in rows(path):
            count += 1
            key = (row["engine"], row["pair"])
            earlier = history[key][-EARLIER:]
            history[key].append(row)
            if not earlier:
                continue
            lead = (
                statistics.mean(r["crossover"] for r in earlier) / statistics.mean(r["concurrent"] for r in earlier) - 1
            )
            own = row["crossover"] / row["concurrent"] - 1
            cell = table[(len(earlier), band_of(lead))]
            cell[0] += 1
            if lead * own < 0:
                cell[1] += 1
                against.append((len(earlier), lead, own))
    print(
        f"{count} adaptive rows in {len(args.logs)} logs; rows with earlier ones of their pair: "
        f"{sum(t for t, _ in table.values())}"
    )
    print("earlier rows | earlier lead | rows | own columns the other way round")
    for (earlier, band), (total, wrong) in sorted(
        table.items(), key=lambda item: (item[0][0], float(item[0][1].split("%")[0]))
    ):
        print(f"{earlier:12d} | {band:12s} | {total:4d} | {wrong}")
    for band_low in BANDS[1:]:
        above = [(t, w) for (_, band), (t, w) in table.items() if float(band.split("%")[0]) / 100 >= band_low]
        print(
            f"earlier lead {band_low:.0%} or more: {sum(w for _, w in above)} of {sum(t for t, _ in above)} "
            "the other way round"
        )
    if against:
        largest = sorted(against, key=lambda item: -abs(item[1]))[:5]
        print(
            "largest earlier leads the row's columns went against (earlier rows, earlier lead, own lead): "
            + "; ".join(f"{n}, {lead:+.1%}, {own:+.1%}" for n, lead, own in largest)
        )
    print_one_way_throughout([row for path in args.logs for row in rows(path)])
    return 0


def print_one_way_throughout(found: list[dict]) -> None:
    """The rows whose adaptive group ran one way all its time (it never probed): that way measured twice in one
    row. How far adaptive lands from that way's own column, and how often it still meets 0.98 x the better of
    the two columns: how often a perfect adaptive could on this machine's noise (docs/measurements.md)."""
    ratios, best = [], 0
    for row in found:
        if row["one_way"] in ("crossover", "concurrent"):
            ratios.append(row["adaptive"] / row[row["one_way"]])
            best += row["of_best"] >= 0.98
    if len(ratios) > 1:
        print(
            f"rows whose adaptive ran one way throughout: {len(ratios)}; adaptive over that way's own column "
            f"{statistics.fmean(ratios):.3f} (standard deviation {statistics.stdev(ratios):.3f}); >= 0.98 x the "
            f"better of crossover and concurrent: {best} of {len(ratios)}"
        )


if __name__ == "__main__":
    sys.exit(main())
