"""`adaptive`: a group that measures turns against no turns while it runs, and settles on the better.

The launcher's side of an adaptive unit (the turn servers' side, their free state, is turns/server.py).
One controller per group, on the host that launched it (under Slurm, the group's first node), sees every
job's iterations (the records the scheduler hands the sinks) and drives every host's turn server:

    warm-up    the group starts in its prior (the plan's better prediction, or its profiles' without a plan; else
               without turns) until every job has done WARMUP iterations: starts and first all-reduces are
               not what either way does; a group whose two states an earlier comparison measured on the same
               jobs (`MeasuredBefore`), further apart than z standard errors of their difference, then
               settles in the better without probing (XOVER_ADAPTIVE measured=probe: it probes anyway)
    probing    windows in the two states, in the order A B B A (A: the state the round began in), each as
               long as every job takes for `iterations` iterations, but no longer than lets the first pair
               take at most `share` of the time left to the job that ends first; after each pair (and
               during a B window, from half its length on, as soon as the difference is already clear)
               the rule below is applied
    settled    in the better state, until something changes: a job of the group ends (or one starts
               late: it joins), a job's iteration time drifts by `drift` from what it was when the group
               settled, or `recheck` seconds pass; then a new round of probing

Every switch is made at one iteration of each job on all its devices and hosts (TurnService.counts, then
.switch): each host's server says how many iterations each job has asked for there, and every server is
told the iteration after the most any host has seen, plus a margin for the commands' way there; between
the two, a device that reaches the iteration after its host's count waits for the command, so every device
of a job switches at the iteration it was told however slow the command is (up to the server's FENCE_S). A
window is measured from the moment every device of every job has switched, up to where every job's
iterations tell (the last end of an iteration of the job that reported last), so a decision waits for no
iteration to end.

Measured per job: its progress over the window (iterations done, interpolated between the ends of its
iterations: a job of 1 s iterations in a 2 s window is not rounded to 2 or 3), times its iteration alone
(its profile's, or its run alone in the same comparison): its speed relative to alone; a group's
aggregate is the sum, as `xover report` has it. The noise of a job's speed over a window of W seconds
is cv * sqrt(T / W) of it (T its iteration, cv the spread of its iterations - in the window, else in the
same state this round, else its last ten -: a renewal count's), the aggregate's the jobs' together;
windows in one state pool, and where a state has several windows their spread counts too (phases that
drift apart and together), never less than `floor`. A job's evaluation (an iteration whose model evaluated
for as long as one of its iterations takes, `held_by_evaluation`: a recipe's evaluation, or a script's forwards
without gradients) is left out of a window, with every job's iterations it held up, and each state is
charged what evaluations cost it over a long run (`charge_evaluations`): a second-long evaluation in a
second-long window would otherwise stand for one every window.

The rule (`verdict`): the difference of the two states' aggregates counts once it is `z` standard errors;
then the better state is chosen. Where the error is down to its floor and the difference still does not
count, more windows would not tell them apart: they are equal, and the better estimate is taken. Out of
pairs (`pairs`), or of probing time (all of a round's windows within `probe_share` of the round's whole
time as it looks at the end of each pair, and another pair no more than `share` of what is left), or where
another pair could win less than it costs (`Stakes`: what deciding now is expected to lose over the time
left, against a window in the worse state and one more switch; `until=sure` probes on regardless), the
better estimate is taken, where turns must lead by `margin` (without turns is what a user has without
xover). Where the group's two states were measured before by whole runs of it, but too close to settle on,
that difference weighs in with the windows', each by its precision (`weigh_in`): the windows are a second or
two after a switch, and on this machine they favoured free against the whole runs (docs/design.md). Each
window and each decision is a segment (`Segment`), recorded with the figures it was made on (run/record.py)
and announced to the sinks.
"""

from __future__ import annotations

import bisect
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..errors import XoverError
from ..records import IterationRecord, MetricRecord, StartRecord
from ..settings import ADAPTIVE_MEASURED, ADAPTIVE_UNTIL
from ..sharing import CONCURRENT, CROSSOVER, MPS
from ..turns.protocol import FREE, TURNS

STATES = (TURNS, FREE)
WARMUP = "warm-up"
PROBE = "probe"
SETTLED = "settled"
ALONE = "alone"
SWITCH_TIMEOUT_S = 10.0  # beyond a few of the slowest iterations: a switch every device never made voids the round
RECENT = 5  # iterations a job's recent time is the median of
DRIFT_SPAN = 2.0  # of the slowest job's iterations: the time a job's pace is taken over when its drift is checked
MAX_POINTS = 100_000  # iterations of a job kept (its oldest half goes past it)
EVALUATION_AT_LEAST = 1.0  # of a job's recent iteration: an iteration that evaluated this long was held up by it
COVERED = 0.8  # of a window's length the jobs' iterations must tell to end it (a slow job's last one ends late)
EARLY = 0.5  # of a window's length: where a difference already clear may end the round's second window
EQUAL_ERROR = 1.1  # times the floor's own error: more windows would not tell the two apart any better
WARMUP_WAIT_S = 60.0  # for a job that has not started: then the others probe, and it joins them later
SETTLE, PROBE_ANYWAY = ADAPTIVE_MEASURED  # XOVER_ADAPTIVE measured=: the words settings.py checks
WORTH, SURE = ADAPTIVE_UNTIL  # XOVER_ADAPTIVE until=


@dataclass(frozen=True)
class AdaptiveSettings:
    """How adaptive probes (XOVER_ADAPTIVE=key=value,...; docs/reference.md). The defaults are sized for
    runs of tens of seconds on a noisy machine (docs/design.md, *Adaptive*)."""

    window: float = 1.5  # the shortest probe window, seconds (after every device switched)
    max_window: float = 10.0  # the longest
    iterations: int = 3  # of every job in a window, where the time left allows
    share: float = 0.2  # of the time left to the first job to end: the most the first pair of windows takes
    probe_share: float = 0.5  # ... and every window of a round together
    pairs: int = 3  # the most pairs of windows in a round
    z: float = 2.0  # standard errors a difference must be to count
    floor: float = 0.01  # relative noise of an aggregate no window length removes
    margin: float = 0.005  # relative: how far turns must lead to be chosen on an undecided estimate
    drift: float = 0.25  # relative: a job's recent iteration this far from its settled one probes again
    recheck: float = 300.0  # seconds settled before probing again
    warmup: int = 2  # iterations of every job before the first window (then one more: it is measured from there)
    start: str = ""  # the prior: turns or free; empty: the plan's better prediction, else free
    measured: str = SETTLE  # both states measured on these jobs before, clearly apart: settle there, or probe
    until: str = WORTH  # probe while another pair could win more than it costs, or until the rule is sure
    switch_cost: float = 1.0  # of the slowest job's recent iterations: what one switch costs the group

    @classmethod
    def of(cls, given: Mapping[str, str] | None) -> AdaptiveSettings:
        """From XOVER_ADAPTIVE's pairs (settings.py checked the keys and numbers): an XoverError naming the key
        for a value out of its range."""
        values: dict[str, Any] = {}
        for key, text in (given or {}).items():
            if key == "start":
                if text not in ("", TURNS, FREE):
                    raise XoverError(f"XOVER_ADAPTIVE start={text}: expected {TURNS} or {FREE}")
                values[key] = text
            elif key == "measured":
                if text not in ADAPTIVE_MEASURED:
                    raise XoverError(f"XOVER_ADAPTIVE measured={text}: expected {' or '.join(ADAPTIVE_MEASURED)}")
                values[key] = text
            elif key == "until":
                if text not in ADAPTIVE_UNTIL:
                    raise XoverError(f"XOVER_ADAPTIVE until={text}: expected {' or '.join(ADAPTIVE_UNTIL)}")
                values[key] = text
            elif key in ("iterations", "pairs", "warmup"):
                values[key] = int(float(text))
            else:
                values[key] = float(text)
        made = cls(**values)
        problem = made.problem()
        if problem:
            raise XoverError(f"XOVER_ADAPTIVE: {problem}")
        return made

    def problem(self) -> str | None:
        """What is out of range, in words (None: nothing)."""
        if not 0 < self.window <= self.max_window:
            return "window and max_window: seconds, 0 < window <= max_window"
        if self.iterations < 1 or self.pairs < 1 or self.warmup < 0:
            return "iterations and pairs at least 1, warmup at least 0"
        if not (0 < self.share <= 1 and 0 < self.probe_share <= 1):
            return "share and probe_share: fractions of the time left, above 0 and at most 1"
        if self.z <= 0 or self.drift <= 0 or self.recheck <= 0:
            return "z, drift and recheck above 0"
        if not all(0 <= value < 1 for value in (self.floor, self.margin)):
            return "floor and margin: fractions from 0 to below 1"
        if self.switch_cost < 0:
            return "switch_cost: iterations, at least 0"
        return None


def way_of(state: str, under_mps: bool = False) -> str:
    """The way of sharing a state is: turns are crossover's, none concurrent's (MPS's under an MPS daemon)."""
    if state == TURNS:
        return CROSSOVER.name
    return MPS.name if under_mps else CONCURRENT.name


def other(state: str) -> str:
    """The state that is not `state`."""
    return FREE if state == TURNS else TURNS


# ------------------------------------------------------------------------------------ measuring a window

Point = tuple[float, float]  # (wall time an iteration ended, iterations done by then)


def progress_at(points: Sequence[Point], moment: float) -> float | None:
    """Iterations done by `moment`, interpolated between the ends of the iterations around it; None outside
    the points (before the first end, or after the last)."""
    if not points or moment < points[0][0] or moment > points[-1][0]:
        return None
    low, high = 0, len(points) - 1
    while high - low > 1:
        middle = (low + high) // 2
        if points[middle][0] <= moment:
            low = middle
        else:
            high = middle
    (t0, done0), (t1, done1) = points[low], points[high]
    if t1 <= t0 or moment <= t0:
        return done0
    return done0 + (moment - t0) / (t1 - t0) * (done1 - done0)


def rate_between(points: Sequence[Point], start: float, end: float) -> float | None:
    """Iterations per second from `start` to `end`; None where either is outside the points."""
    first, last = progress_at(points, start), progress_at(points, end)
    if first is None or last is None or end <= start:
        return None
    return (last - first) / (end - start)


DEFAULT_CV = 0.2  # the spread of a job's iterations assumed where a window holds too few to tell


def pace_s(seconds: Sequence[float]) -> float:
    """A job's pace over some of its iterations, as its drift is checked: their mean without the tenth at each end
    (one at least, of three or more). Not their median: beside a slow partner a short job's times are two paces
    mixed (the partner's compute, its all-reduce), and a median jumps from one to the other as their shares move."""
    ordered = sorted(seconds)
    cut = max(1, len(ordered) // 10) if len(ordered) >= 3 else 0
    kept = ordered[cut : len(ordered) - cut]
    return statistics.fmean(kept)


def relative_noise(durations: Sequence[float], window_s: float) -> float:
    """The relative standard error of a job's rate over `window_s` from the spread of its iterations in it:
    cv * sqrt(T / W), a renewal count's (DEFAULT_CV where fewer than three iterations tell the spread)."""
    if window_s <= 0 or not durations:
        return 1.0
    mean = statistics.fmean(durations)
    cv = statistics.stdev(durations) / mean if len(durations) >= 3 and mean > 0 else DEFAULT_CV
    return cv * math.sqrt(min(1.0, mean / window_s)) if mean > 0 else 1.0


Span = tuple[float, float]  # (from, to), wall time


def clipped(spans: Sequence[Span], start: float, end: float) -> list[Span]:
    """`spans` cut to [start, end], overlapping ones merged, in order."""
    inside = sorted((max(a, start), min(b, end)) for a, b in spans if b > start and a < end)
    merged: list[Span] = []
    for a, b in inside:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


@dataclass(frozen=True)
class Measured:
    """A window (or a settled stretch) measured: each job's speed relative to alone and its standard error.
    `left_out_s`: per job, the seconds of its iterations left out as evaluations' (`Evaluations`);
    `charged`: per job, the factor its speed was multiplied by for the evaluations (`charge_evaluations`);
    `against_stand_in`: the jobs with no time alone known, whose speed is relative to a stand-in (their
    pace at the start of their first round: the same in every window and segment, so they compare, but not a
    speed relative to alone)."""

    start: float
    end: float
    speeds: dict[str, float]
    errors: dict[str, float]
    left_out_s: dict[str, float] = field(default_factory=dict)
    charged: dict[str, float] = field(default_factory=dict)  # per job: the factor evaluations' cost put on it
    against_stand_in: tuple[str, ...] = ()

    @property
    def aggregate(self) -> float:
        """The sum of the jobs' speeds."""
        return sum(self.speeds.values())

    @property
    def error(self) -> float:
        """The aggregate's standard error."""
        return math.sqrt(sum(error * error for error in self.errors.values()))


def measure(
    points: Mapping[str, Sequence[Point]],
    durations: Mapping[str, Sequence[tuple[float, float]]],
    solo_s: Mapping[str, float],
    start: float,
    end: float,
    spread: Mapping[str, Sequence[float]] | None = None,
    left_out: Mapping[str, Sequence[Span]] | None = None,
) -> Measured | None:
    """Each job's speed relative to alone over [start, end] (its rate times its iteration alone), and its
    error; None unless every job's iterations cover the window. `durations`: (end, seconds) per iteration;
    `spread`: per job, the iterations its spread is taken from where the window holds too few (a slow job's
    iterations in the same state earlier); `left_out`: per job, spans of whole iterations of it that are not
    measured (its rate is over the rest of the window: the iterations an evaluation held up)."""
    speeds, errors, left = {}, {}, {}
    for name, job_points in points.items():
        gaps = clipped((left_out or {}).get(name, ()), start, end)
        whole = rate_between(job_points, start, end)
        if whole is None:
            return None
        done, seconds_measured = whole * (end - start), end - start
        for a, b in gaps:
            # whole iterations: interpolated progress over a gap is exactly the iterations it covers
            done -= (progress_at(job_points, b) or 0.0) - (progress_at(job_points, a) or 0.0)
            seconds_measured -= b - a
        if seconds_measured <= 0:
            return None
        rate = max(0.0, done) / seconds_measured
        speed = rate * solo_s[name]
        inside = [
            seconds
            for ended, seconds in durations.get(name, ())
            if start < ended <= end and not any(a < ended <= b for a, b in gaps)
        ]
        if len(inside) < 3 and spread is not None and len(spread.get(name, ())) >= 3:
            mean = 1.0 / rate if rate > 0 else seconds_measured
            cv = statistics.stdev(spread[name]) / statistics.fmean(spread[name])
            errors[name] = speed * cv * math.sqrt(min(1.0, mean / seconds_measured))
        else:
            pace = [1.0 / rate if rate > 0 else seconds_measured]
            errors[name] = speed * relative_noise(inside or pace, seconds_measured)
        speeds[name] = speed
        if gaps:
            left[name] = sum(b - a for a, b in gaps)
    return Measured(start, end, speeds, errors, left_out_s=left)


@dataclass(frozen=True)
class Evaluations:
    """A job's periodic evaluations, as its iterations' records tell them: one every `interval` iterations, each
    taking `alone_s` seconds with the device to itself."""

    interval: int
    alone_s: float

    def per_iteration(self, solo_s: float) -> float:
        """Its evaluations' time per iteration, relative to an iteration alone."""
        return self.alone_s / (self.interval * solo_s) if self.interval > 0 and solo_s > 0 else 0.0


def held_by_evaluation(record: IterationRecord, pace: float | None) -> bool:
    """Whether an evaluation held up the iteration of `record`: its model evaluated (`evaluation_s`: a recipe's
    evaluation, a script's forwards without gradients) for at least `EVALUATION_AT_LEAST` of the job's recent
    iterations (`pace`). A shorter one moves no window by much; a script that runs its model without
    gradients within every step (a target computed with it) evaluates for a part of each of its iterations,
    which its pace already holds."""
    return (
        pace is not None
        and record.step > 0
        and record.evaluation_s is not None
        and record.evaluation_s >= EVALUATION_AT_LEAST * pace
    )


def charge_evaluations(
    measured: Measured, state: str, evaluations: Mapping[str, Evaluations], solo_s: Mapping[str, float]
) -> Measured:
    """A window measured without the iterations evaluations held up, as a long run of the state would be,
    evaluations and all, relative to each job alone (evaluations and all: as `xover report` has it).

    A window is a second or two; an evaluation comes every few seconds and takes most of one. Held in a
    window, it would count many times over; left out, not at all. Without turns an evaluation shares the
    device as the job's iterations do, and is slowed as much: its job's speed relative to alone stays what
    its iterations' is, and the others go on beside it, so the window stands as measured. With turns it
    runs in its job's turn, with the device to itself, as fast as alone, and every other job waits for it:
    each job k's speed is v_k (1 + e_k) / (1 + sum_j v_j e_j), e_j the time job j's evaluations take per
    iteration relative to an iteration alone (`Evaluations.per_iteration`), v its speed in the window."""
    if state != TURNS:
        return measured
    per_iteration = {
        name: evaluations[name].per_iteration(solo_s.get(name) or 0.0)
        for name in measured.speeds
        if name in evaluations
    }
    per_iteration = {name: value for name, value in per_iteration.items() if value > 0}
    if not per_iteration:
        return measured
    waited = 1.0 + sum(measured.speeds[name] * value for name, value in per_iteration.items())
    factor = {name: (1.0 + per_iteration.get(name, 0.0)) / waited for name in measured.speeds}
    return Measured(
        measured.start,
        measured.end,
        {name: speed * factor[name] for name, speed in measured.speeds.items()},
        {name: error * factor[name] for name, error in measured.errors.items()},
        measured.left_out_s,
        {name: round(value, 4) for name, value in factor.items()},
        measured.against_stand_in,
    )


# ------------------------------------------------------------------------------------ the rule


@dataclass(frozen=True)
class Verdict:
    """What the windows so far say: the state to settle in (None: keep probing), by which rule, and the
    figures it was made on (each state's aggregate and error, the difference and its error)."""

    state: str | None
    rule: str  # clear | equal | time | pairs | cost | no windows
    aggregates: dict[str, float]
    errors: dict[str, float]
    difference: float  # turns' aggregate minus free's
    error: float
    # where what ran before weighed in (`weigh_in`): its difference and the combined one, each relative to free's
    # aggregate, with their standard errors
    before: tuple[float, float] | None = None
    combined: tuple[float, float] | None = None
    # where the round weighed another pair (`Stakes`): the most it could win and what it would cost, seconds
    another_pair: tuple[float, float] | None = None

    def figures(self) -> dict[str, Any]:
        """The figures, as recorded."""
        figures: dict[str, Any] = {
            "rule": self.rule,
            "aggregate": {state: round(value, 4) for state, value in self.aggregates.items()},
            "error": {state: round(value, 4) for state, value in self.errors.items()},
            "difference": round(self.difference, 4),
            "difference_error": round(self.error, 4),
        }
        if self.before is not None and self.combined is not None:
            figures["measured_before"] = {"difference": round(self.before[0], 4), "error": round(self.before[1], 4)}
            figures["combined"] = {"difference": round(self.combined[0], 4), "error": round(self.combined[1], 4)}
        if self.another_pair is not None:
            could_win, costs = self.another_pair
            figures["another_pair"] = {"could_win_s": round(could_win, 3), "costs_s": round(costs, 3)}
        return figures


def pooled(windows: Sequence[Measured], floor: float) -> tuple[float, float]:
    """One state's aggregate over its windows (weighted by their lengths) and its standard error: the windows'
    own errors pooled, their spread where there are several, and never less than `floor` of it."""
    weights = [max(w.end - w.start, 1e-9) for w in windows]
    total = sum(weights)
    mean = sum(weight * w.aggregate for weight, w in zip(weights, windows)) / total
    within = math.sqrt(sum((weight / total) ** 2 * w.error**2 for weight, w in zip(weights, windows)))
    between = statistics.stdev([w.aggregate for w in windows]) / math.sqrt(len(windows)) if len(windows) > 1 else 0.0
    return mean, math.sqrt(max(within, between) ** 2 + (floor * mean) ** 2)


def expected_regret(difference: float, error: float) -> float:
    """What taking the better estimate of a difference is expected to lose, in the difference's units, where the
    difference is normal about `difference` with standard error `error`: the mean of how far the other state is
    ahead, over where it is (error x phi(z) - |difference| x Phi(-z), z = |difference| / error)."""
    if error <= 0:
        return 0.0
    z = abs(difference) / error
    density = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return error * density - abs(difference) * 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class Stakes:
    """What another pair of windows is up against: the seconds the round's decision holds for (until the first
    job ends), a window's length, and what one switch costs the group (seconds)."""

    left_s: float
    window_s: float
    switch_s: float

    def weighed(self, relative: float, error: float) -> tuple[float, float]:
        """(could win, costs) in seconds of the group's time, for a difference relative to free's aggregate and
        its error. The most another pair could win is what deciding now is expected to lose over the time left
        (`expected_regret`: knowing the difference exactly would win no more); it costs a window in the worse
        state and one more switch (A B B A: each pair after the first begins where the last ended)."""
        return self.left_s * expected_regret(relative, error), self.window_s * abs(relative) + self.switch_s


def verdict(
    windows: Sequence[tuple[str, Measured]],
    config: AdaptiveSettings,
    out_of_probing: str = "",
    before: MeasuredBefore | None = None,
    stakes: Stakes | None = None,
) -> Verdict:
    """The rule, on the windows measured so far in this round ((state, figures) each). `out_of_probing` names
    why no more windows can be had ('time', 'pairs'): the better estimate is then taken, turns by a margin.
    `before`: the two ways as whole runs of these jobs measured them; they weigh in (`weigh_in`). `stakes`:
    where another pair could win less than it costs, the better estimate is taken too ('cost')."""
    by_state = {state: [m for s, m in windows if s == state] for state in STATES}
    if not all(by_state.values()):
        only = next((state for state in STATES if by_state[state]), None)
        aggregates = {state: pooled(found, config.floor)[0] for state, found in by_state.items() if found}
        return Verdict(only if out_of_probing else None, "no windows", aggregates, {}, 0.0, 0.0)
    (turns, turns_error), (free, free_error) = (pooled(by_state[state], config.floor) for state in STATES)
    difference, error = turns - free, math.hypot(turns_error, free_error)
    aggregates, errors = {TURNS: turns, FREE: free}, {TURNS: turns_error, FREE: free_error}
    base = max(free, 1e-9)
    # relative to free's aggregate: how the windows and what ran before compare (their scales differ a little)
    relative, relative_error = difference / base, error / base
    prior = combined = None
    if before is not None:
        prior = before.relative_difference()
        relative, relative_error = combined = weigh_in((relative, relative_error), prior)
    weighed: dict[str, Any] = {"before": prior, "combined": combined}
    better = TURNS if relative > config.margin else FREE
    if abs(relative) >= config.z * relative_error and abs(relative) >= config.margin:
        return Verdict(TURNS if relative > 0 else FREE, "clear", aggregates, errors, difference, error, **weighed)
    if error <= EQUAL_ERROR * math.hypot(config.floor * turns, config.floor * free):
        return Verdict(better, "equal", aggregates, errors, difference, error, **weighed)
    if out_of_probing:
        return Verdict(better, out_of_probing, aggregates, errors, difference, error, **weighed)
    if stakes is not None:
        weighed["another_pair"] = could_win, costs = stakes.weighed(relative, relative_error)
        if could_win < costs:
            return Verdict(better, "cost", aggregates, errors, difference, error, **weighed)
    return Verdict(None, "", aggregates, errors, difference, error, **weighed)


def weigh_in(windows: tuple[float, float], before: tuple[float, float]) -> tuple[float, float]:
    """Two estimates of one difference, each with its standard error, as one: weighted by their precision
    (1 / error squared), its error smaller than either's. What ran before weighs in because whole runs of a
    way measure it as it holds up, and a window is a second or two of it after a switch (docs/design.md, *What
    ran before weighs in*)."""
    (value, error), (prior, prior_error) = windows, before
    if prior_error <= 0:
        return prior, 0.0
    if error <= 0:
        return value, 0.0
    weight, prior_weight = 1 / error**2, 1 / prior_error**2
    total = weight + prior_weight
    return (weight * value + prior_weight * prior) / total, math.sqrt(1 / total)


@dataclass(frozen=True)
class MeasuredBefore:
    """Both states as earlier comparisons measured them on these very jobs (the mean of the store's newest few
    of each way for the same workloads, ranks, engine, hosts, link and hardware: plan/measured.py), how far
    one measurement misses the next of the same group (`Calibration.measured_error`, relative), and how many
    comparisons each state's figure is the mean of (`runs`; one where not said)."""

    aggregates: dict[str, float]  # TURNS and FREE
    error: float
    runs: Mapping[str, int] = field(default_factory=dict)

    def errors(self) -> dict[str, float]:
        """Each state's standard error: one measurement's, over the square root of how many the figure is the
        mean of (docs/design.md, *Measured before*)."""
        return {
            state: self.error * value / math.sqrt(max(1, self.runs.get(state, 1)))
            for state, value in self.aggregates.items()
        }

    def relative_difference(self) -> tuple[float, float]:
        """Turns' aggregate minus free's, relative to free's, and its standard error."""
        turns, free = self.aggregates[TURNS], max(self.aggregates[FREE], 1e-9)
        errors = self.errors()
        return (turns - free) / free, math.hypot(errors[TURNS], errors[FREE]) / free

    def verdict(self, config: AdaptiveSettings) -> Verdict | None:
        """The state to settle in without probing: the better one where the two figures are `z` standard errors
        of their difference apart (and `margin`); None where they are closer (the group probes)."""
        turns, free = self.aggregates[TURNS], self.aggregates[FREE]
        errors = self.errors()
        difference, error = turns - free, math.hypot(*errors.values())
        if abs(difference) < config.z * error or abs(difference) < config.margin * max(free, 1e-9):
            return None
        return Verdict(TURNS if difference > 0 else FREE, "measured", dict(self.aggregates), errors, difference, error)


def switch_margin(iteration_s: float | None, way_there_s: float) -> int:
    """Iterations after the most any host has seen at which a job switches: the next one where its ranks
    could hardly start it before the command gets there (its chance is about way there / iteration: under
    1 in 50), else enough of them to cover the command's way. A device that gets there first waits at the
    iteration after P's count for the command (the server's fence), so a short margin costs a wait, never a
    switch at two iterations; only a command later than the fence (FENCE_S) is applied late (`late_devices`)."""
    if not iteration_s:
        return 2
    if iteration_s >= 50 * way_there_s:
        return 1
    return 2 + math.ceil(2 * way_there_s / iteration_s)


def window_length(recent_s: Mapping[str, float], left_s: float | None, config: AdaptiveSettings) -> float | None:
    """A probe window's length: every job's `iterations` iterations (at its recent pace), within [window,
    max_window], and no more than half of `share` of the time left (`left_s`, None: unknown); None when not
    even the shortest window fits there (the round is not worth its probes)."""
    wanted = max([config.iterations * seconds for seconds in recent_s.values()] or [config.window])
    length = min(max(wanted, config.window), config.max_window)
    if left_s is not None:
        room = config.share * left_s / 2
        if room < config.window:
            return None
        length = min(length, room)
    return length


# ------------------------------------------------------------------------------------ the controller


class Switcher(Protocol):
    """What the controller drives: a group's turn servers (turns/service.py's TurnService)."""

    def counts(self) -> tuple[int, dict[int, int]] | None:
        """Each slot's iterations so far (the most any host saw), with the number of the switch to come."""
        ...

    def switch(self, number: int, state: str, boundaries: dict[int, int]) -> None:
        """Every host: each slot of `boundaries` in `state` from that iteration on."""
        ...


@dataclass
class Segment:
    """A stretch of an adaptive group's time in one state: its warm-up, a probe window, a settled stretch
    (with the figures the decision was made on), or the last job alone. `started`/`ended`: wall times the
    stretch began and ended (a switch is commanded at its start); `window`: the part measured."""

    seq: int
    kind: str  # warm-up | probe | settled | alone
    state: str
    way: str
    reason: str
    started: float
    ended: float | None = None
    switch: int | None = None
    window: tuple[float, float] | None = None
    speeds: dict[str, float] = field(default_factory=dict)
    aggregate: float | None = None
    error: float | None = None
    decision: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The segment as the report's JSON writes it."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "way": self.way,
            "state": self.state,
            "reason": self.reason,
            "started": self.started,
            "ended": self.ended,
            "switch": self.switch,
            "window": list(self.window) if self.window else None,
            "speeds": dict(self.speeds),
            "aggregate": self.aggregate,
            "error": self.error,
            "decision": self.decision,
        }

    def measured_as(self, measured: Measured) -> None:
        """Take the figures of its window; where evaluations were left out and charged, say so in the
        decision's figures (`evaluations`)."""
        self.speeds = {name: round(speed, 4) for name, speed in measured.speeds.items()}
        self.aggregate, self.error = round(measured.aggregate, 4), round(measured.error, 4)
        if measured.against_stand_in:
            # the key of stored runs, named when the stand-in was the fastest pace seen at each round
            self.decision = {**(self.decision or {}), "relative_to_fastest_seen": list(measured.against_stand_in)}
        if measured.left_out_s or measured.charged:
            self.decision = {
                **(self.decision or {}),
                "evaluations": {
                    "left_out_s": {name: round(seconds, 3) for name, seconds in measured.left_out_s.items()},
                    "charged": dict(measured.charged),
                },
            }


@dataclass
class _Job:
    name: str
    devices: int  # (host, device) pairs: the switched events a switch brings for it
    solo_s: float | None
    planned: int | None = None
    stand_in_s: float | None = None  # no speed alone known: its pace at the start of its first round
    points: list[Point] = field(default_factory=list)
    durations: list[tuple[float, float]] = field(default_factory=list)
    live: bool = True
    first_seen: float | None = None
    evaluated: list[tuple[int, Span, float]] = field(default_factory=list)  # (step, its iteration, seconds alone)

    def ended_after(self, moment: float) -> int:
        """The index in `durations` of its first iteration that ended after `moment` (they are kept in order)."""
        return bisect.bisect_right(self.durations, moment, key=lambda iteration: iteration[0])

    def recent_s(self) -> float | None:
        if not self.durations:
            return None
        return statistics.median(seconds for _, seconds in self.durations[-RECENT:])

    def recent_pace_s(self, span_s: float) -> float | None:
        """Its pace (`pace_s`) over its last RECENT iterations, or over those that ended in the last `span_s`
        where they are more (None before its first)."""
        if not self.durations:
            return None
        start = min(len(self.durations) - RECENT, self.ended_after(self.durations[-1][0] - span_s))
        return pace_s([seconds for _, seconds in self.durations[max(0, start) :]])

    def evaluations(self) -> Evaluations | None:
        """Its evaluations as seen so far (None: none yet)."""
        if not self.evaluated:
            return None
        steps = [step for step, _, _ in self.evaluated]
        interval = steps[-1] - steps[-2] if len(steps) > 1 else steps[0]
        return Evaluations(interval, statistics.median(alone for _, _, alone in self.evaluated[-RECENT:]))

    def left_s(self) -> float | None:
        recent, done = self.recent_s(), (self.points[-1][1] if self.points else 0)
        if self.planned is None or recent is None:
            return None
        return max(0.0, self.planned - done) * recent


@dataclass
class _Pending:
    """A switch on its way: commanded at `at`, which (host, device) of each slot applied it and when."""

    number: int
    state: str
    at: float
    boundaries: dict[int, int]
    applied: dict[int, dict[tuple[str, int], float]] = field(default_factory=dict)
    late: int = 0  # devices that applied it past the iteration they were told (the command came late)


class AdaptiveController:
    """One adaptive group's probing and decisions (the module's docstring). The scheduler hands it the group's
    records (`observe`), ended jobs (`job_ended`) and the switched events of its turn servers (`switched`),
    and calls `tick` as it supervises; `record` gets every segment whenever it opens, is decided or closes."""

    def __init__(
        self,
        names: Sequence[str],
        devices: Sequence[int],
        solo_s: Sequence[float | None],
        switcher: Switcher,
        record: Callable[[Segment], None],
        config: AdaptiveSettings | None = None,
        prior: str | None = None,
        under_mps: bool = False,
        now: float = 0.0,
        measured: MeasuredBefore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = [_Job(name, count, solo) for name, count, solo in zip(names, devices, solo_s)]
        self.switcher = switcher
        self.clock = clock  # times a command's way to the servers (a simulated group's in-process ones: no way)
        self.record = record
        self.config = config or AdaptiveSettings()
        self.under_mps = under_mps
        self.state = self.config.start or prior or FREE  # what the servers were started in
        self.segments: list[Segment] = []
        self.pending: _Pending | None = None
        self.windows: list[tuple[str, Measured]] = []  # of this round, as measured (evaluations not charged)
        self.decided_knowing: frozenset[str] = frozenset()  # the jobs whose evaluations the last decision knew
        self.round_states: tuple[str, str] = (self.state, other(self.state))
        self.round_started = now
        self.length = self.config.window  # of this round's windows
        self.settled_reference: dict[int, float] = {}
        self.rounds = 0
        self.measured = measured
        self.settled_on_measured = False
        self.started = now
        self.done = False
        self._open(WARMUP, self.state, "the jobs start in the prior: " + self._prior_reason(prior), now)

    def _prior_reason(self, prior: str | None) -> str:
        if self.config.start:
            return f"XOVER_ADAPTIVE start={self.config.start}"
        if self.measured is not None:
            return "the better of its two ways as measured on these jobs before"
        if prior:
            return "the better predicted way (its plan's, or its profiles')"
        return "nothing predicted, so without turns"

    # -- what the scheduler hands it ---------------------------------------------------------
    def observe(self, slot: int, record: MetricRecord, now: float) -> None:
        """A record of the job in `slot` (its iterations, its planned length)."""
        job = self.jobs[slot]
        if isinstance(record, StartRecord) and record.iterations:
            job.planned = record.iterations
        elif isinstance(record, IterationRecord):
            pace = job.recent_s()
            if pace is not None and held_by_evaluation(record, pace):
                began = record.wall_time - record.iteration_s
                extra = max(0.0, record.iteration_s - pace)  # the evaluation: the iteration beyond its pace
                solo = job.solo_s or job.stand_in_s
                if self.state != TURNS and solo:  # shared, it was slowed as the job's iterations are
                    extra *= min(1.0, solo / pace)
                job.evaluated.append((record.step, (began, record.wall_time), extra))
            if not any(other.points for other in self.jobs) and self.current.kind == WARMUP:
                # the group's time starts with its first iteration, not with its launchers
                self.current.started = record.wall_time - record.iteration_s
                self.record(self.current)
            joined = job.first_seen is None and self.begun
            if job.first_seen is None:
                job.first_seen = now
            job.points.append((record.wall_time, float(record.step + 1)))
            job.durations.append((record.wall_time, record.iteration_s))
            if len(job.points) > MAX_POINTS:  # a long run: its oldest half goes (a stretch older is not measured)
                del job.points[: MAX_POINTS // 2], job.durations[: MAX_POINTS // 2]
            if joined and not self.done and self.current.kind in (PROBE, SETTLED):
                self._start_round(f"{job.name} joined", now)

    def switched(self, host: str, event: Mapping[str, Any]) -> None:
        """A turn server's `switched` event: one device applied a switch for one slot."""
        pending = self.pending
        if pending is None or event.get("switch") != pending.number:
            return
        slot, device = int(event.get("slot", -1)), int(event.get("device", -1))
        pending.applied.setdefault(slot, {})[(host, device)] = float(event.get("wall_time", 0.0))
        if event.get("iteration", 0) != event.get("boundary", 0):
            pending.late += 1

    def job_ended(self, slot: int, now: float) -> None:
        """The job in `slot` ended: a group of one shares nothing; a smaller group probes again. The open segment
        closes first, measured with the job in it: its iterations up to its end were shared."""
        if not self.done:
            self._close(now)
        self.jobs[slot].live = False
        if self.done:
            return
        live = self.live()
        if len(live) <= 1:
            self._close(now)
            if live:
                self._open(ALONE, self.state, f"{self.jobs[slot].name} ended: {live[0].name} runs alone", now)
            else:
                self.done = True
            return
        if self.begun:
            self._start_round(f"{self.jobs[slot].name} ended", now)

    def close(self, now: float) -> None:
        """The unit ends: the open segment closes with what it measured."""
        if not self.done:
            self._close(now)
            self.done = True

    # -- driving -------------------------------------------------------------------------------
    @property
    def current(self) -> Segment:
        """The open segment."""
        return self.segments[-1]

    @property
    def begun(self) -> bool:
        """Past its warm-up: it probed, or settled on what was measured before (a job that ends or joins now
        changes the group it measured: it probes again)."""
        return self.rounds > 0 or self.settled_on_measured

    def live(self) -> list[_Job]:
        """The jobs still running."""
        return [job for job in self.jobs if job.live]

    def present(self) -> list[_Job]:
        """The jobs running that have done an iteration: what a window measures."""
        return [job for job in self.jobs if job.live and job.first_seen is not None]

    def tick(self, now: float) -> None:
        """Move on: start probing after the warm-up, close a window and decide, watch a settled group."""
        if self.done:
            return
        segment = self.current
        if segment.kind == WARMUP:
            warmed = [job for job in self.present() if len(job.points) > self.config.warmup]
            everyone = len(warmed) == len(self.live())
            if len(warmed) >= 2 and (everyone or now - self.started >= WARMUP_WAIT_S):
                if not self._settle_on_measured(now):
                    self._start_round("start", now)
        elif segment.kind == PROBE:
            self._probe(segment, now)
        elif segment.kind == SETTLED:
            self._watch(segment, now)

    def _probe(self, segment: Segment, now: float) -> None:
        if segment.window is None:
            began = self._switched_in(segment, now)
            if began is None:
                return
            segment.window = (began, began)
        start = segment.window[0]
        covered = self._covered()  # what the jobs' iterations tell so far: the window is measured up to there
        # the time evaluations held up is not measured: a window that holds one lasts that much longer
        held = max((sum(b - a for a, b in spans) for spans in self._left_out(start, covered).values()), default=0.0)
        if covered - start - held < EARLY * self.length:
            return
        due = covered - start - held >= COVERED * self.length or now >= start + self.config.max_window + held
        if not due and not self._clear_early(segment, start, covered):
            return
        measured = self._measure(start, covered)
        if measured is None:
            if now - start > self.config.max_window + SWITCH_TIMEOUT_S:  # never measurable: stays as it is
                self._close(now)
                self._open(SETTLED, self.state, "a window could not be measured: stays as it is", now)
                self.current.decision = {"rule": "not probed", "why": "a window could not be measured"}
                self.record(self.current)
                self._reset_reference()
            return
        segment.window = (start, covered)
        self._finish_window(segment, measured, now)

    def _clear_early(self, segment: Segment, start: float, end: float) -> bool:
        """In the round's second state, a difference already clear on the windows so far ends the window."""
        if segment.state == self.round_states[0]:
            return False
        measured = self._measure(start, end)
        if measured is None:
            return False
        so_far = [*self._charged(), (segment.state, self._charge(measured, segment.state))]
        return verdict(so_far, self.config, before=self._before()).rule == "clear"

    def _finish_window(self, segment: Segment, measured: Measured, now: float) -> None:
        self.windows.append((segment.state, measured))
        segment.measured_as(self._charge(measured, segment.state))
        count = len(self.windows)
        if count % 2 == 0 or verdict(self._charged(), self.config, before=self._before()).rule == "clear":
            probed = sum(m.end - m.start for _, m in self.windows)
            left = self._time_left()
            # the round's whole time, as it looks now (the jobs' pace early in a round misleads): probing takes
            # at most `probe_share` of it, and another pair needs what the first could take of what is left
            budget = self.config.probe_share * (now - self.round_started + left) if left is not None else None
            out = ""
            if count // 2 >= self.config.pairs:
                out = "pairs"
            elif (
                budget is not None
                and left is not None
                and (probed + 2 * self.length > budget or 2 * self.length > self.config.share * left)
            ):
                out = "time"
            stakes = None
            if not out and left is not None and self.config.until == WORTH:
                stakes = Stakes(left, self.length, self.config.switch_cost * self._slowest_s())
            found = verdict(self._charged(), self.config, out, self._before(), stakes)
            if found.state is not None:
                self._settle(found, now)
                return
        # A B B A: the round's first state, the other, the other, the first, ...
        state = self.round_states[0] if count % 4 in (0, 3) else self.round_states[1]
        self._next_window(state, f"round {self.rounds}, window {count + 1}", now)

    def _before(self) -> MeasuredBefore | None:
        """What whole runs of this very group measured, to weigh in with the windows: while every job of the group
        runs (a group a job left, or one a job has not joined yet, is another group), and unless `measured=probe`
        (the windows alone decide)."""
        if self.measured is None or self.config.measured != SETTLE:
            return None
        return self.measured if all(job.live and job.first_seen is not None for job in self.jobs) else None

    def _settle_on_measured(self, now: float) -> bool:
        """After the warm-up, a group whose two states were measured on these jobs before and clearly apart
        (`MeasuredBefore.verdict`) settles in the better without probing, unless `measured=probe`; it watches
        as any settled group (a job ends or joins, drift, `recheck`), and then probes."""
        found = self.measured.verdict(self.config) if self.measured and self.config.measured == SETTLE else None
        if found is None or found.state is None or len(self.present()) != len(self.jobs):
            return False
        self.settled_on_measured = True
        self._settle(found, now)
        return True

    def _settle(self, found: Verdict, now: float, why: str = "") -> None:
        figures = {
            **found.figures(),
            "ways": {way_of(state, self.under_mps): round(value, 4) for state, value in found.aggregates.items()},
            "windows": len(self.windows),
        }
        reason = {
            "clear": "the difference is clear",
            "equal": "equal within what more windows could tell: the better estimate",
            "time": "no time for more probes: the better estimate",
            "pairs": "probed as often as a round may: the better estimate",
            "cost": "another pair of windows would cost more than it could win: the better estimate",
            "no windows": "only one state could be measured",
        }.get(found.rule, found.rule)
        assert found.state is not None
        self.decided_knowing = self._evaluating()
        if found.rule == "measured":  # no round was made: its figures hold no windows (0)
            reason = (
                "measured on these jobs before, further apart than their error: "
                f"no probe (XOVER_ADAPTIVE measured={PROBE_ANYWAY} probes anyway)"
            )
        else:
            reason = f"{why}round {self.rounds}: {reason}"
        self._switch_to(found.state, SETTLED, reason, now, figures)
        self._reset_reference()

    def _watch(self, segment: Segment, now: float) -> None:
        """A settled group probes again when a job's iteration time drifts from what it was once settled (the
        median of its first RECENT iterations there), or after `recheck` seconds; never where the last round
        found no time to probe (there is less now). A job's pace is taken over DRIFT_SPAN of the slowest job's
        iterations where that holds more than RECENT of its own: beside a partner ten times slower, a short
        iteration's time swings with the partner's phases (its compute, its all-reduce), and five of them fall
        inside one phase (docs/design.md, *Probing again*)."""
        if (segment.decision or {}).get("rule") == "not probed":
            return
        if self._evaluating() != self.decided_knowing and self._redecide(segment, now):
            return
        if now - segment.started >= self.config.recheck:
            self._start_round(f"{self.config.recheck:g} s settled", now)
            return
        since = self._settled_since(segment)
        span_s = DRIFT_SPAN * self._slowest_s()
        for slot, job in enumerate(self.jobs):
            if not job.live:
                continue
            reference = self.settled_reference.get(slot)
            if reference is None:
                # by bisection, not a scan: this runs at every tick of a group settled for hours (MAX_POINTS kept)
                first = job.ended_after(since)
                end = max(first + RECENT, job.ended_after(since + span_s))
                # its first iterations settled, and as many again after them: the two spans do not overlap
                if len(job.durations) - first < 2 * (end - first) or job.durations[-1][0] < since + 2 * span_s:
                    continue
                reference = self.settled_reference[slot] = pace_s([seconds for _, seconds in job.durations[first:end]])
            recent = job.recent_pace_s(span_s) or 0.0
            if reference > 0 and abs(recent / reference - 1) > self.config.drift:
                self._start_round(
                    f"{job.name}'s iteration drifted from {reference * 1000:.0f} to {recent * 1000:.0f} ms", now
                )
                return

    def _redecide(self, segment: Segment, now: float) -> bool:
        """A job's evaluations seen for the first time since the group settled (they come every few seconds;
        a round can end before the first): the round's windows are charged for them and decided again, without
        a probe. False where nothing changed."""
        new = sorted(self._evaluating() - self.decided_knowing)
        self.decided_knowing = self._evaluating()
        if not new or not self.windows:  # settled on earlier measurements: those held the evaluations
            return False
        rule = (segment.decision or {}).get("rule", "")
        found = verdict(self._charged(), self.config, rule if rule in ("time", "pairs", "cost") else "", self._before())
        why = f"{', '.join(new)}'s evaluations, first seen since, charged to the windows: "
        if found.state is None:
            self._start_round(why.removesuffix(": ") + " leave the difference unclear", now)
        else:
            self._settle(found, now, why)
        return True

    def _evaluating(self) -> frozenset[str]:
        """The present jobs whose evaluations have been seen."""
        return frozenset(job.name for job in self.present() if job.evaluated)

    def _charge(self, measured: Measured, state: str) -> Measured:
        """`measured` (a window in `state`) charged what the jobs' evaluations seen so far cost there."""
        present = {job.name: job for job in self.present()}
        evaluations = {name: found for name, job in present.items() if (found := job.evaluations()) is not None}
        solo = {name: job.solo_s or job.stand_in_s or 0.0 for name, job in present.items()}
        return charge_evaluations(measured, state, evaluations, solo)

    def _charged(self) -> list[tuple[str, Measured]]:
        """The round's windows, each charged for the evaluations seen so far (`_charge`)."""
        return [(state, self._charge(measured, state)) for state, measured in self.windows]

    def _settled_since(self, segment: Segment) -> float:
        """When every device of the group was in the settled state (its switch applied), else its start."""
        pending = self.pending
        if pending is not None and pending.number == segment.switch and segment.switch is not None:
            applied = [t for slots in pending.applied.values() for t in slots.values()]
            return max(applied, default=segment.started)
        return segment.started

    def _slowest_s(self) -> float:
        """The slowest present job's recent iteration: what a switch costs is counted in these (`switch_cost`)."""
        return max((seconds for job in self.present() if (seconds := job.recent_s())), default=0.0)

    def _time_left(self) -> float | None:
        """Until the first present job ends, at the jobs' recent pace (None where no job's length is known)."""
        lefts = [left for left in (job.left_s() for job in self.present()) if left is not None]
        return min(lefts) if lefts else None

    def _reset_reference(self) -> None:
        """A settled group's drift is measured from its jobs' first iterations settled (`_watch` takes them)."""
        self.settled_reference = {}

    # -- rounds and windows --------------------------------------------------------------------
    def _start_round(self, reason: str, now: float) -> None:
        present = self.present()
        if len(present) < 2:
            return
        self.rounds += 1
        recent = {job.name: seconds for job in present if (seconds := job.recent_s())}
        self.round_started = now
        length = window_length(recent, self._time_left(), self.config)
        for job in present:
            # no speed alone known: its pace at its first round stands in, kept for the rest of the run, so that
            # every segment's figures are on one scale (taken anew at each round, they were not)
            if job.solo_s is None and job.stand_in_s is None:
                job.stand_in_s = job.recent_s()
        self.windows = []
        self.round_states = (self.state, other(self.state))
        if length is None:
            self._close(now)
            self._open(SETTLED, self.state, f"{reason}: no time to probe before a job ends, stays as it is", now)
            self.current.decision = {"rule": "not probed", "why": "no time to probe before a job ends"}
            self.record(self.current)
            self._reset_reference()
            return
        self.length = length
        self._next_window(self.state, f"{reason}: round {self.rounds}, window 1", now)
        stand_ins = [job.name for job in present if job.solo_s is None]
        self.current.decision = {
            "length_s": round(length, 3),
            **({"relative_to_fastest_seen": stand_ins} if stand_ins else {}),
        }
        self.record(self.current)

    def _next_window(self, state: str, reason: str, now: float) -> None:
        previous = self.current
        if state == self.state and previous.kind == PROBE and previous.window and self.windows:
            # no switch: this window starts where the last one of the round's measurement ended (a round that
            # starts in a window cut short, by a job that ended, starts afresh)
            self._close(now)
            self._open(PROBE, state, reason, now, decision={"length_s": round(self.length, 3)})
            self.current.window = (previous.window[1], previous.window[1])
        else:
            self._switch_to(state, PROBE, reason, now, {"length_s": round(self.length, 3)})

    def _switch_to(self, state: str, kind: str, reason: str, now: float, decision: dict | None = None) -> None:
        """Open a segment of `kind` in `state`, switching every device there if it is another state."""
        self._close(now)
        number = None
        if state != self.state:
            number = self._command(state, now)
            if number is None:  # a server did not answer: the group stays as it is
                state = self.state
                reason += "; a turn server did not answer, so the group stays as it is"
        self._open(kind, state, reason, now, switch=number, decision=decision)

    def _command(self, state: str, now: float) -> int | None:
        began = self.clock()
        asked = self.switcher.counts()
        if asked is None:
            return None
        number, counts = asked
        way_there = self.clock() - began  # P there and back: about what S takes to get there
        boundaries = {}
        for slot, job in enumerate(self.jobs):
            if job.live:
                boundaries[slot] = counts.get(slot, 0) + switch_margin(job.recent_s(), way_there)
        self.switcher.switch(number, state, boundaries)
        self.pending = _Pending(number, state, now, boundaries)
        self.state = state
        return number

    def _switched_in(self, segment: Segment, now: float) -> float | None:
        """When every device of every present job was in the segment's state (None: not yet): the window starts
        there. A switch some device never made (SWITCH_TIMEOUT_S) settles the group as it is."""
        pending = self.pending
        if pending is None or segment.switch != pending.number:
            return segment.started
        began = []
        for slot, job in enumerate(self.jobs):
            if not job.live or job.first_seen is None:
                continue
            applied = pending.applied.get(slot, {})
            if len(applied) < job.devices:
                if now - pending.at > SWITCH_TIMEOUT_S:
                    self._close(now)
                    self._open(SETTLED, self.state, "a device did not switch in time: stays as it is", now)
                    self.current.decision = {"rule": "not probed", "why": "a device did not switch in time"}
                    self.record(self.current)
                    self._reset_reference()
                return None
            began.append(max(applied.values()))
        if pending.late:
            segment.decision = {**(segment.decision or {}), "late_devices": pending.late}
        return max(began, default=now)

    def _covered(self) -> float:
        """The latest moment every present job's iterations have passed (what a window can be measured to)."""
        ends = [job.points[-1][0] for job in self.present()]
        return min(ends) if ends else 0.0

    def _measure(self, start: float, end: float) -> Measured | None:
        """The present jobs over [start, end], without the iterations evaluations held up (`_left_out`); not
        yet charged for the evaluations (`_charge`)."""
        present = self.present()
        solo = {job.name: job.solo_s or job.stand_in_s or 0.0 for job in present}
        if len(present) < 2 or not all(solo.values()):
            return None
        measured = measure(
            {job.name: job.points for job in present},
            {job.name: job.durations for job in present},
            solo,
            start,
            end,
            self._spread(start, end),
            self._left_out(start, end),
        )
        stand_ins = tuple(job.name for job in present if job.solo_s is None)
        return replace(measured, against_stand_in=stand_ins) if measured is not None and stand_ins else measured

    def _left_out(self, start: float, end: float) -> dict[str, list[Span]]:
        """Per present job, its iterations in [start, end] that overlap an evaluation's iteration (of any job):
        held up by it, with turns or without, they are not measured."""
        present = self.present()
        evaluations = [span for job in present for _, span, _ in job.evaluated if span[1] > start and span[0] < end]
        if not evaluations:
            return {}
        left_out: dict[str, list[Span]] = {}
        for job in present:
            for ended, seconds in job.durations[job.ended_after(start) :]:
                began = ended - seconds
                if began >= end:
                    break
                if any(b > began and a < ended for a, b in evaluations):
                    left_out.setdefault(job.name, []).append((began, ended))
        return left_out

    def _spread(self, start: float, end: float) -> dict[str, list[float]]:
        """Per job, its iterations in this state so far this round (the windows of the same state, and this
        one), else its last ones: what its spread is taken from where one window holds too few of them."""
        spans = [(m.start, m.end) for state, m in self.windows if state == self.state] + [(start, end)]
        spread = {}
        held = [span for job in self.present() for _, span, _ in job.evaluated]
        for job in self.present():
            found = [
                seconds
                for ended, seconds in job.durations
                if any(a < ended <= b for a, b in spans) and not any(b > ended - seconds and a < ended for a, b in held)
            ]
            # too few yet in this state: its last iterations, whatever the state (a mix spreads more, not less)
            spread[job.name] = found if len(found) >= 3 else [seconds for _, seconds in job.durations[-2 * RECENT :]]
        return spread

    # -- segments ----------------------------------------------------------------------------------
    def _open(
        self,
        kind: str,
        state: str,
        reason: str,
        now: float,
        switch: int | None = None,
        decision: dict | None = None,
    ) -> None:
        segment = Segment(
            seq=len(self.segments),
            kind=kind,
            state=state,
            way=way_of(state, self.under_mps),
            reason=reason,
            started=now,
            switch=switch,
            decision=decision,
        )
        self.segments.append(segment)
        self.record(segment)

    def _close(self, now: float) -> None:
        if not self.segments or self.current.ended is not None:
            return
        segment = self.current
        segment.ended = now
        if segment.kind != PROBE and segment.window is None:  # measured as it ran, from when every device switched
            start = self._settled_since(segment)
            end = min(self._covered(), now)
            measured = self._measure(start, end) if end > start else None
            if measured is not None:
                segment.window = (start, end)
                segment.measured_as(self._charge(measured, segment.state))
        self.record(segment)
