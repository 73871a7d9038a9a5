"""What a replay shows: job completion times, makespan, the devices' use over time, queueing, sharing.

* JCT: a job's arrival to its completion; average, median, and p99 (nearest rank: the smallest JCT that
  at least 99% of the jobs reach, as Muri's `calc.py` picks it).
* makespan: the first arrival to the last completion.
* utilisation: busy device-seconds over the cluster's device-seconds in the makespan; over time, the
  time-averaged share of devices busy (and in groups) in each of up to `BUCKETS` equal spans.
* queueing delay: arrival to first start, averaged.
* sharing: the share of busy device-seconds spent in groups, and in each way of sharing (alone,
  crossover, concurrent, mps, interleaved).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from ..sharing import ALONE
from .engine import ReplayOutcome

BUCKETS = 400  # points of the utilisation over time a replay keeps
CDF_POINTS = 200  # points of the JCT distribution a report draws


@dataclass(frozen=True)
class ReplaySummary:
    """One policy's replay in figures (seconds)."""

    policy: str
    jobs: int
    finished: int
    avg_jct_s: float
    median_jct_s: float
    p99_jct_s: float
    makespan_s: float
    avg_queue_s: float
    utilisation: float
    grouped_share: float
    by_sharing: dict[str, float] = field(default_factory=dict)
    events: int = 0
    preemptions: int = 0

    def to_json(self) -> dict[str, Any]:
        """Its fields, as JSON takes them."""
        return asdict(self)


@dataclass(frozen=True)
class UtilisationPoint:
    """The cluster over one span of time: devices busy and in groups (shares of all), jobs waiting and
    running (time-averaged)."""

    start_s: float
    end_s: float
    busy: float
    grouped: float
    waiting: float
    running: float


def nearest_rank(values: list[float], fraction: float) -> float:
    """The smallest value that at least `fraction` of `values` are at or below (values sorted)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(fraction * len(values)) - 1))]


def summarise(outcome: ReplayOutcome) -> ReplaySummary:
    """A replay's figures."""
    done = [job for job in outcome.jobs if not math.isnan(job.end_s)]
    jcts = sorted(job.jct_s for job in done)
    first = min((job.arrival_s for job in outcome.jobs), default=0.0)
    last = max((job.end_s for job in done), default=first)
    makespan = last - first
    busy = sum(outcome.device_s_by_sharing.values())
    shares = {sharing: seconds / busy for sharing, seconds in sorted(outcome.device_s_by_sharing.items()) if busy}
    return ReplaySummary(
        policy=outcome.policy,
        jobs=len(outcome.jobs),
        finished=len(done),
        avg_jct_s=statistics.fmean(jcts) if jcts else math.nan,
        median_jct_s=statistics.median(jcts) if jcts else math.nan,
        p99_jct_s=nearest_rank(jcts, 0.99),
        makespan_s=makespan,
        avg_queue_s=statistics.fmean(job.queued_s for job in done) if done else math.nan,
        utilisation=busy / (outcome.devices * makespan) if makespan > 0 else math.nan,
        grouped_share=1.0 - shares.get(ALONE.name, 0.0) if busy else 0.0,  # no time alone: all of it grouped
        by_sharing=shares,
        events=outcome.events,
        preemptions=sum(job.preemptions for job in outcome.jobs),
    )


def utilisation_over_time(outcome: ReplayOutcome, buckets: int = BUCKETS) -> list[UtilisationPoint]:
    """The timeline, time-averaged into up to `buckets` equal spans from the first arrival to the last
    completion."""
    timeline = outcome.timeline
    times = list(timeline.time_s)
    if not times:
        return []
    start = min(job.arrival_s for job in outcome.jobs)
    end = max((job.end_s for job in outcome.jobs if not math.isnan(job.end_s)), default=times[-1])
    if end <= start:
        return []
    width = (end - start) / buckets
    series = (timeline.busy, timeline.grouped, timeline.waiting, timeline.running)
    points = []
    for bucket in range(buckets):
        low, high = start + bucket * width, start + (bucket + 1) * width
        sums = [0.0, 0.0, 0.0, 0.0]
        index = max(0, bisect.bisect_right(times, low) - 1)
        at = low
        while at < high:
            following = times[index + 1] if index + 1 < len(times) else math.inf
            until = min(high, following)
            if times[index] <= at:
                for which, values in enumerate(series):
                    sums[which] += values[index] * (until - at)
            at = until
            index += 1
            if index >= len(times):
                break
        busy, grouped, waiting, running = (value / width for value in sums)
        # shares of the devices: at most all of them, whatever the float sums of the spans say
        busy_share, grouped_share = (min(1.0, devices / outcome.devices) for devices in (busy, grouped))
        points.append(UtilisationPoint(low, high, busy_share, grouped_share, waiting, running))
    return points


def jct_cdf(jcts: list[float], points: int = CDF_POINTS) -> list[tuple[float, float]]:
    """(JCT, share of jobs done within it) at up to `points` quantiles."""
    ordered = sorted(value for value in jcts if not math.isnan(value))
    if not ordered:
        return []
    count = len(ordered)
    steps = min(points, count)
    at = [min(count - 1, math.ceil(step * count / steps) - 1) for step in range(1, steps + 1)]
    return [(ordered[index], step / steps) for step, index in enumerate(at, start=1)]
