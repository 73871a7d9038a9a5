"""Per-tick cost of a settled adaptive group's drift check (run/adaptive.py, `AdaptiveController._watch`): the
list scan of a job's iterations since it settled that it had until 2026-11-29, against the bisection it has, at
1k, 10k and 100k iterations kept (a job keeps up to MAX_POINTS, 100,000). Each is one job's cost per tick; a
group's controller ticks every 0.2-0.25 s.

    .venv/bin/python bench/drift_check_cost.py
"""

import bisect
import statistics
import timeit
from functools import partial

from xover.run.adaptive import RECENT


def scan(durations: list[tuple[float, float]], since: float) -> tuple[float, float]:
    fresh = [seconds for ended, seconds in durations if ended > since]
    return statistics.median(fresh[:RECENT]), statistics.median(fresh[-RECENT:])


def bisected(durations: list[tuple[float, float]], since: float) -> tuple[float, float]:
    first = bisect.bisect_right(durations, since, key=lambda iteration: iteration[0])
    return (
        statistics.median(seconds for _, seconds in durations[first : first + RECENT]),
        statistics.median(seconds for _, seconds in durations[-RECENT:]),
    )


def main() -> None:
    for count in (1_000, 10_000, 100_000):
        durations = [(1000.0 + i * 0.01, 0.01 + (i % 7) * 1e-4) for i in range(count)]
        since = 1000.0 + 0.3 * count * 0.01  # settled after 30% of them
        assert scan(durations, since) == bisected(durations, since)
        before = min(timeit.repeat(partial(scan, durations, since), number=20, repeat=5)) / 20
        after = min(timeit.repeat(partial(bisected, durations, since), number=200, repeat=5)) / 200
        print(
            f"{count:>7} iterations: scan {before * 1e3:.3f} ms, bisection {after * 1e3:.4f} ms per job per tick "
            f"({before / after:.0f}x)"
        )


if __name__ == "__main__":
    main()
