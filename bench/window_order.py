"""Does a probe window's place in its round bias what it measures? Read from `make bench` logs.

An adaptive round probes in the order A B B A (A: the state it began in), which cancels a machine drifting
linearly, but a 15 s bench row mostly has time for one pair, A B, and its first window opens right after the
group's warm-up (two iterations of every job), when the jobs' own starts may still slow the group. Two checks
of every adaptive row's first round, as the bench logs print its segments:

- settled / window: where the group settled in the way of the round's first window, its first settled stretch
  (the same way, seconds later) over that window; where it settled in the second window's way, over the
  second. Both ratios lean below 1 by selection alone (a window is taken for measuring its way high), so
  a first window measured low by its place would show as the first ratio above the second.
- rounds of one pair: the second window over the first, by the state the round began in. Both orders
  together give the place's own lean (the square root of the product of the two geometric means: 1 where
  neither place is favoured) apart from which way is ahead.

    .venv/bin/python bench/window_order.py results/bench-*.log

Give one machine's logs at a time: a measurement holds only on the hardware it was taken on.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ADAPTIVE = re.compile(r"\s+adaptive [\d.]+: [\d.]+ of the best")
SEGMENT = re.compile(r"^    (warm-up|probe|settled|alone)\s+(\S+)\s+([\d.]+|-)\s+(.*)$")
FIRST_WINDOW = "round 1, window 1"


def timelines(path: Path) -> Iterator[list[tuple[str, str, float | None, str]]]:
    """Each adaptive row's segments as the log prints them: (kind, way, aggregate or None, reason)."""
    timeline: list[tuple[str, str, float | None, str]] | None = None
    for line in path.read_text(errors="replace").splitlines():
        if ADAPTIVE.match(line):
            if timeline:
                yield timeline
            timeline = []
            continue
        found = SEGMENT.match(line)
        if found and timeline is not None:
            aggregate = None if found.group(3) == "-" else float(found.group(3))
            timeline.append((found.group(1), found.group(2), aggregate, found.group(4)))
        elif timeline is not None:
            if timeline:
                yield timeline
            timeline = None
    if timeline:
        yield timeline


def first_round(timeline: Sequence[tuple[str, str, float | None, str]]) -> dict | None:
    """The first round's two first windows, whether the round was of one pair, and the first settled stretch after
    them (None where the row did not probe two measured windows)."""
    probes = [index for index, segment in enumerate(timeline) if segment[0] == "probe"]
    if len(probes) < 2 or FIRST_WINDOW not in timeline[probes[0]][3]:
        return None
    first, second = timeline[probes[0]], timeline[probes[1]]
    if not first[2] or not second[2]:
        return None
    settled = next((s for s in timeline[probes[1] + 1 :] if s[0] == "settled" and s[2]), None)
    after = timeline[probes[1] + 1 : probes[1] + 2]
    one_pair = probes[1] == probes[0] + 1 and not (after and after[0][0] == "probe")
    return {"first": first, "second": second, "settled": settled, "one_pair": one_pair}


def geometric(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(value) for value in values))


def summary(label: str, values: Sequence[float]) -> str:
    if not values:
        return f"{label}: none"
    above = sum(value > 1 for value in values)
    return (
        f"{label}: {len(values)} rows, geometric mean {geometric(values):.3f}, median {statistics.median(values):.3f}, "
        f"above 1 in {above}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="make bench logs (results/bench-*.log)")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.logs if not path.is_file()]
    if missing:
        print(f"no such log: {', '.join(missing)}", file=sys.stderr)
        return 2
    rounds = [found for path in args.logs for timeline in timelines(path) if (found := first_round(timeline))]
    in_first, in_second = [], []
    one_pair: dict[str, list[float]] = {}
    for found in rounds:
        first, second, settled = found["first"], found["second"], found["settled"]
        if settled is not None and settled[1] == first[1]:
            in_first.append(settled[2] / first[2])
        elif settled is not None and settled[1] == second[1]:
            in_second.append(settled[2] / second[2])
        if found["one_pair"]:
            one_pair.setdefault(first[1], []).append(second[2] / first[2])
    print(f"{len(rounds)} adaptive rows whose first round measured two windows, in {len(args.logs)} logs")
    print(summary("settled in the first window's way, settled / first window", in_first))
    print(summary("settled in the second window's way, settled / second window", in_second))
    for way, values in sorted(one_pair.items()):
        print(summary(f"rounds of one pair begun in {way}, second window / first", values))
    if len(one_pair) == 2:
        lean = math.sqrt(math.prod(geometric(values) for values in one_pair.values()))
        print(f"the second place over the first, whichever way is ahead: {lean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
