"""run/adaptive.py's pure logic: a window's measurement and its noise, the rule, the window's length, the
switch's margin, XOVER_ADAPTIVE, and the controller driven by a group whose two states have known speeds (a
scripted clock and a switcher that applies switches as the turn servers do: at each job's iteration)."""

from __future__ import annotations

import math
import os
import random

import pytest

from xover.errors import XoverError
from xover.records import IterationRecord, StartRecord
from xover.report.tables import timeline_rows
from xover.run.adaptive import (
    ALONE,
    DEFAULT_CV,
    PROBE,
    SETTLED,
    WARMUP,
    AdaptiveController,
    AdaptiveSettings,
    Evaluations,
    Measured,
    MeasuredBefore,
    Stakes,
    charge_evaluations,
    expected_regret,
    held_by_evaluation,
    measure,
    progress_at,
    rate_between,
    relative_noise,
    switch_margin,
    verdict,
    weigh_in,
    window_length,
)
from xover.settings import Settings
from xover.turns.protocol import FREE, TURNS

CONFIG = AdaptiveSettings()


# ------------------------------------------------------------------------------------ measuring


def test_progress_is_interpolated_between_the_ends_of_iterations():
    points = [(10.0, 1.0), (11.0, 2.0), (13.0, 3.0)]
    assert progress_at(points, 10.5) == pytest.approx(1.5)
    assert progress_at(points, 12.0) == pytest.approx(2.5)
    assert progress_at(points, 9.0) is None and progress_at(points, 13.5) is None
    # a job of 1 s iterations over 1.5 s: 1.5 iterations, not 1 or 2
    assert rate_between(points, 10.25, 11.75) == pytest.approx((2.375 - 1.25) / 1.5)


def test_a_rates_noise_is_a_renewal_counts():
    steady = [0.1] * 20
    assert relative_noise(steady, 2.0) == 0.0
    spread = [0.09, 0.11] * 10  # cv 0.1 (sample stdev)
    cv = 0.01026 / 0.1
    assert relative_noise(spread, 2.0) == pytest.approx(cv * math.sqrt(0.1 / 2.0), rel=0.02)
    assert relative_noise(spread, 8.0) == pytest.approx(relative_noise(spread, 2.0) / 2, rel=1e-6)  # 4x the window
    assert relative_noise([0.5, 0.6], 1.0) == pytest.approx(DEFAULT_CV * math.sqrt(0.55))  # too few to tell the spread


def test_measure_gives_speeds_relative_to_alone_and_needs_every_job_to_cover_the_window():
    points = {"a": [(0.0, 0.0), (10.0, 100.0)], "b": [(0.0, 0.0), (10.0, 20.0)]}
    durations = {"a": [(t / 10, 0.1) for t in range(1, 101)], "b": [(t / 2, 0.5) for t in range(1, 21)]}
    measured = measure(points, durations, {"a": 0.05, "b": 0.25}, 2.0, 8.0)
    assert measured.speeds == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}
    assert measured.aggregate == pytest.approx(1.0)
    assert measure(points, durations, {"a": 0.05, "b": 0.25}, 2.0, 11.0) is None  # b's iterations stop at 10 s


# ------------------------------------------------------------------------------------ the rule


def window(state_aggregate: float, error: float, start: float = 0.0) -> Measured:
    return Measured(start, start + 2.0, {"a": state_aggregate / 2, "b": state_aggregate / 2},
                    {"a": error / math.sqrt(2), "b": error / math.sqrt(2)})


def test_a_clear_difference_settles_on_the_better_state():
    found = verdict([("free", window(1.40, 0.02)), ("turns", window(1.60, 0.02))], CONFIG)
    assert (found.state, found.rule) == ("turns", "clear")
    assert found.aggregates == {"turns": pytest.approx(1.60), "free": pytest.approx(1.40)}
    found = verdict([("turns", window(1.30, 0.02)), ("free", window(1.50, 0.02))], CONFIG)
    assert (found.state, found.rule) == ("free", "clear")


def test_a_difference_within_the_noise_keeps_probing_until_out_of_time_then_takes_the_estimate():
    windows = [("free", window(1.50, 0.06)), ("turns", window(1.53, 0.06))]
    assert verdict(windows, CONFIG).state is None  # 2% apart, 0.085 of error: go on probing
    assert (verdict(windows, CONFIG, "time").state, verdict(windows, CONFIG, "time").rule) == ("turns", "time")
    # turns must lead by the margin on an undecided estimate: without turns is what a user has without xover
    close = [("free", window(1.50, 0.06)), ("turns", window(1.5 * (1 + CONFIG.margin / 2), 0.06))]
    assert verdict(close, CONFIG, "pairs").state == "free"


def test_two_states_measured_to_the_floor_are_equal():
    # no error of their own left (fast jobs, long windows): only the floor; 0.5% apart does not count
    found = verdict([("free", window(1.50, 0.0)), ("turns", window(1.5075, 0.0))], CONFIG)
    assert (found.state, found.rule) == ("turns", "equal")
    found = verdict([("free", window(1.50, 0.0)), ("turns", window(1.503, 0.0))], CONFIG)
    assert (found.state, found.rule) == ("free", "equal")  # 0.2%: short of the margin


def test_the_spread_of_a_states_windows_counts_where_it_has_several():
    calm = [("turns", window(1.60, 0.01)), ("free", window(1.50, 0.01)), ("free", window(1.50, 0.01)),
            ("turns", window(1.60, 0.01))]
    assert verdict(calm, CONFIG).rule == "clear"
    # the same means, but each state's two windows far apart: the difference no longer counts
    restless = [("turns", window(1.30, 0.01)), ("free", window(1.20, 0.01)), ("free", window(1.80, 0.01)),
                ("turns", window(1.90, 0.01))]
    assert verdict(restless, CONFIG).state is None


def test_the_expected_regret_of_taking_the_better_estimate_is_the_mean_loss_where_the_other_is_ahead():
    rng = random.Random(3)
    for difference, error in ((0.0, 0.05), (0.02, 0.05), (-0.03, 0.02), (0.10, 0.02)):
        # the truth drawn about the estimate; the state taken is the better estimate
        draws = [rng.gauss(difference, error) for _ in range(200_000)]
        loss = sum(max(0.0, -draw if difference >= 0 else draw) for draw in draws) / len(draws)
        assert expected_regret(difference, error) == pytest.approx(loss, abs=3e-4)
    assert expected_regret(0.0, 0.05) == pytest.approx(0.05 / math.sqrt(2 * math.pi))
    assert expected_regret(0.05, 0.0) == 0.0


def test_another_pair_is_probed_only_where_it_could_win_more_than_it_costs():
    windows = [("free", window(1.50, 0.06)), ("turns", window(1.53, 0.06))]  # 2% apart, 5.7% of error
    # 20 s left: deciding now is expected to lose about 0.38 s; another pair costs a 2 s window at 2% and a 0.6 s
    # switch: take the better estimate
    found = verdict(windows, CONFIG, stakes=Stakes(20.0, 2.0, 0.6))
    assert (found.state, found.rule) == ("turns", "cost")
    could_win, costs = found.another_pair
    assert could_win == pytest.approx(20 * expected_regret(0.02, found.error / 1.5))
    assert costs == pytest.approx(2.0 * 0.02 + 0.6)
    assert found.figures()["another_pair"] == {"could_win_s": round(could_win, 3), "costs_s": round(costs, 3)}
    # an hour left: the same windows are worth another pair
    longer = verdict(windows, CONFIG, stakes=Stakes(3600.0, 2.0, 0.6))
    assert longer.state is None and longer.another_pair[0] > longer.another_pair[1]
    # a clear difference or equal states are decided as ever, whatever another pair would cost
    clear = [("free", window(1.40, 0.02)), ("turns", window(1.60, 0.02))]
    assert verdict(clear, CONFIG, stakes=Stakes(1.0, 2.0, 10.0)).rule == "clear"


def test_one_state_only_is_decided_only_when_probing_is_over():
    assert verdict([("free", window(1.5, 0.01))], CONFIG).state is None
    assert verdict([("free", window(1.5, 0.01))], CONFIG, "time").state == "free"


# ------------------------------------------------------------------------------------ sizing


def test_a_window_holds_iterations_of_every_job_within_its_bounds_and_the_time_left():
    assert window_length({"a": 0.1, "b": 0.2}, None, CONFIG) == CONFIG.window  # 3 x 0.2 s is below the shortest
    assert window_length({"a": 0.1, "b": 1.0}, None, CONFIG) == pytest.approx(3.0)  # 3 of the slowest
    assert window_length({"a": 0.1, "b": 9.0}, None, CONFIG) == CONFIG.max_window
    # the first pair takes at most `share` of the time left: 0.2 x 20 s / 2
    assert window_length({"a": 0.1, "b": 1.0}, 20.0, CONFIG) == pytest.approx(2.0)
    assert window_length({"a": 0.1, "b": 1.0}, 10.0, CONFIG) is None  # 1 s windows would be below the shortest


def test_a_switch_comes_at_the_next_iteration_of_a_slow_job_and_later_for_a_fast_one():
    assert switch_margin(1.0, 0.002) == 1  # its ranks start the next one before the command in 1 of 500
    assert switch_margin(0.05, 0.002) == 3
    assert switch_margin(0.001, 0.002) == 6
    assert switch_margin(None, 0.002) == 2


# ------------------------------------------------------------------------------------ XOVER_ADAPTIVE


def test_the_setting_is_read_checked_and_made_settings():
    given = Settings.from_environ({"XOVER_ADAPTIVE": "window=2, pairs=2,start=turns,z=3,measured=probe"}).adaptive
    assert given == {"window": "2", "pairs": "2", "start": "turns", "z": "3", "measured": "probe"}
    made = AdaptiveSettings.of(given)
    assert (made.window, made.pairs, made.start, made.z, made.measured) == (2.0, 2, "turns", 3.0, "probe")
    assert AdaptiveSettings.of({}) == AdaptiveSettings()
    made = AdaptiveSettings.of(Settings.from_environ({"XOVER_ADAPTIVE": "until=sure,switch_cost=0"}).adaptive)
    assert (made.until, made.switch_cost) == ("sure", 0.0)
    assert (AdaptiveSettings().until, AdaptiveSettings().switch_cost) == ("worth", 1.0)


@pytest.mark.parametrize("value", ["window", "speed=3", "window=0", "share=1.5", "pairs=1.5", "start=maybe",
                                   "window=2,window=3", "z=-1", "floor=1", "measured=maybe", "measured=1",
                                   "until=never", "switch_cost=-1", "switch_cost=x"])
def test_a_bad_setting_is_one_line_naming_it(value):
    with pytest.raises(XoverError) as refused:
        Settings.from_environ({"XOVER_ADAPTIVE": value})
    assert str(refused.value).startswith("XOVER_ADAPTIVE=") and "\n" not in str(refused.value)


def test_windows_out_of_order_are_refused_where_the_run_starts():
    with pytest.raises(XoverError, match="XOVER_ADAPTIVE: window and max_window"):
        AdaptiveSettings.of({"window": "5", "max_window": "2"})


def test_doctor_fails_the_settings_on_windows_out_of_order_as_a_run_refuses_them(monkeypatch):
    """`XOVER_ADAPTIVE=window=5,max_window=1 xover doctor` said "settings ok: XOVER_ADAPTIVE read" and every
    adaptive run then refused it: each key was in its range, and doctor never compared them."""
    from xover.doctor import _settings

    for name in [name for name in os.environ if name.startswith("XOVER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XOVER_ADAPTIVE", "window=5,max_window=1")
    check = _settings()
    assert not check.ok and check.detail == "XOVER_ADAPTIVE: window and max_window: seconds, 0 < window <= max_window"
    monkeypatch.setenv("XOVER_ADAPTIVE", "window=1,max_window=5")
    assert _settings().ok


def test_doctor_fails_the_settings_on_a_forwarded_variable_no_shell_can_set(monkeypatch):
    """XOVER_A-B: doctor listed it as not read by xover, and every run refused it (its launchers pass XOVER_*
    through a shell)."""
    from xover.doctor import _settings

    for name in [name for name in os.environ if name.startswith("XOVER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XOVER_A-B", "1")
    check = _settings()
    assert not check.ok and "environment variable 'XOVER_A-B': not a name a shell can set" in check.detail, check


# ------------------------------------------------------------------------------------ the controller


class Group:
    """Two (or more) jobs whose iteration time depends on the state their device is in, and turn servers that
    apply a switch at each job's iteration as the real ones do (every device of a job at the same one)."""

    def __init__(self, times: dict[str, dict[str, float]], iterations: int = 400, noise: float = 0.03, seed: int = 1,
                 start: str = "free", devices: int = 2, measured: MeasuredBefore | None = None,
                 config: AdaptiveSettings | None = None,
                 evaluations: dict[str, tuple[int, float]] | None = None,
                 phases: dict[str, list[float]] | None = None) -> None:
        self.times, self.names = times, list(times["turns"])
        self.phases = phases or {}  # per job: its iterations' times cycle through these factors (a partner's phases)
        self.evaluations = evaluations or {}  # per job: every how many iterations it evaluates, for how long
        self.evaluating: dict[str, float] = {}  # per job: the seconds its iteration under way evaluates
        self.rng = random.Random(seed)
        self.noise, self.devices = noise, devices
        self.state = {name: start for name in self.names}  # per job: the state its devices are in
        self.done = {name: 0 for name in self.names}
        self.planned = {name: iterations for name in self.names}
        self.now = 1000.0
        self.next_end = {name: self.now + self._duration(name) for name in self.names}
        self.last_end: dict[str, float] = {}
        self.pending: dict | None = None
        self.commands: list[tuple[int, str, dict[int, int]]] = []
        self.number = 0
        self.segments: dict[int, dict] = {}
        self.controller = AdaptiveController(
            self.names, [devices] * len(self.names), [times["alone"][name] for name in self.names], self,
            self.record, config, prior=start, now=self.now, measured=measured,
            clock=lambda: self.now)  # the switcher answers at once; a real clock would time this machine's load
        for slot in range(len(self.names)):
            self.controller.observe(slot, StartRecord(iterations=iterations), self.now)

    def _duration(self, name: str) -> float:
        cycle = self.phases.get(name) or [1.0]
        factor = cycle[self.done.get(name, 0) % len(cycle)]
        return self.times[self.state[name]][name] * factor * (1 + self.rng.uniform(-self.noise, self.noise))

    # the switcher (TurnService's side)
    def counts(self):
        self.number += 1
        return self.number, {slot: self.done[name] + 1 for slot, name in enumerate(self.names)}

    def switch(self, number, state, boundaries):
        self.commands.append((number, state, dict(boundaries)))
        self.pending = {"number": number, "state": state, "boundaries": dict(boundaries)}

    def record(self, segment):
        self.segments[segment.seq] = segment.to_json()

    def run(self, until: float, step: float = 0.01, end_first: str | None = None, end_after: int = 50) -> None:
        while self.now < until:
            self.now += step
            for slot, name in enumerate(self.names):
                if name not in self.next_end or self.next_end[name] > self.now:
                    continue
                ended = self.next_end[name]
                self.done[name] += 1
                duration = ended - self.last_end.get(name, ended - self.times[self.state[name]][name])
                self.last_end[name] = ended
                self.controller.observe(slot, IterationRecord(
                    step=self.done[name] - 1, time_s=0.0, wall_time=ended, iteration_s=duration, data_s=0.0,
                    compute_s=duration / 2, communication_s=duration / 2, wait_s=0.0, samples=32, loss=1.0,
                    evaluation_s=self.evaluating.pop(name, None)), ended)
                if self.done[name] >= self.planned[name] or name == end_first and self.done[name] >= end_after:
                    del self.next_end[name]
                    self.controller.job_ended(slot, ended)
                    continue
                acquire = self.done[name] + 1  # the acquire that starts its next iteration
                if self.pending and acquire >= self.pending["boundaries"].pop(slot, 10**9):
                    self.state[name] = self.pending["state"]
                    for device in range(self.devices):
                        self.controller.switched("localhost", {
                            "switch": self.pending["number"], "slot": slot, "device": device,
                            "iteration": acquire, "boundary": self.commands[-1][2][slot], "wall_time": ended})
                self.next_end[name] = ended + self._duration(name)
                if self._evaluates(name, self.done[name]):  # in the turn of its next iteration, on the device
                    seconds = self.evaluations[name][1]  # with the device to itself
                    if self.state[name] == "turns":  # it has: the others wait for it
                        for partner in self.next_end:
                            if partner != name and self.state[partner] == "turns":
                                self.next_end[partner] += seconds
                    else:  # shared: slowed as its iterations are
                        seconds *= self.times["free"][name] / self.times["alone"][name]
                    self.next_end[name] += seconds
                    self.evaluating[name] = seconds
            self.controller.tick(self.now)

    def _evaluates(self, name: str, step: int) -> bool:
        interval = self.evaluations.get(name, (0, 0.0))[0]
        return bool(interval) and step > 0 and step % interval == 0

    def timeline(self) -> list[dict]:
        return [self.segments[seq] for seq in sorted(self.segments)]

    def ran(self, seconds: float) -> list[dict]:
        """Its timeline after `seconds` of running."""
        self.run(self.now + seconds)
        return self.timeline()


TURNS_AHEAD = {"alone": {"a": 0.1, "b": 0.1}, "turns": {"a": 0.15, "b": 0.15}, "free": {"a": 0.2, "b": 0.2}}
FREE_AHEAD = {"alone": {"a": 0.1, "b": 0.1}, "turns": {"a": 0.2, "b": 0.2}, "free": {"a": 0.15, "b": 0.15}}


@pytest.mark.parametrize("times, better", [(TURNS_AHEAD, "crossover"), (FREE_AHEAD, "concurrent")])
def test_the_group_warms_up_probes_both_states_and_settles_on_the_better(times, better):
    group = Group(times)
    group.run(group.now + 30)
    timeline = group.timeline()
    kinds = [segment["kind"] for segment in timeline]
    assert kinds[0] == WARMUP and kinds.count(PROBE) >= 2 and kinds[-1] == SETTLED
    probes = [segment for segment in timeline if segment["kind"] == PROBE]
    assert {segment["way"] for segment in probes} == {"crossover", "concurrent"}
    for segment in probes:  # each probe measured each job's speed relative to alone, in its state
        expected = 0.1 / times["turns" if segment["way"] == "crossover" else "free"]["a"]
        assert segment["speeds"]["a"] == pytest.approx(expected, rel=0.06)
    settled = timeline[-1]
    assert settled["way"] == better and settled["decision"]["rule"] == "clear"
    assert settled["decision"]["ways"][better] > max(v for k, v in settled["decision"]["ways"].items() if k != better)
    # every switch was made at one iteration of each job, and the group ended in the state it settled in
    assert all(set(boundaries) == {0, 1} for _, _, boundaries in group.commands)
    assert set(group.state.values()) == {"turns" if better == "crossover" else "free"}


def test_equal_states_settle_without_turns_on_the_estimate():
    same = {"alone": {"a": 0.1, "b": 0.1}, "turns": {"a": 0.15, "b": 0.15}, "free": {"a": 0.15, "b": 0.15}}
    group = Group(same, noise=0.0)
    group.run(group.now + 30)
    settled = [segment for segment in group.timeline() if segment["kind"] == SETTLED][0]
    assert settled["way"] == "concurrent" and settled["decision"]["rule"] == "equal"


CLOSE = {"alone": {"a": 0.1, "b": 0.1}, "turns": {"a": 0.150, "b": 0.150}, "free": {"a": 0.153, "b": 0.153}}


def test_a_close_pair_with_little_time_left_takes_the_better_estimate_after_one_pair_and_probes_on_when_told():
    # about 2% apart, iterations 20% apart at random: a pair of windows cannot tell them apart
    probes = {}
    for until in ("worth", "sure"):
        group = Group(CLOSE, iterations=150, noise=0.2, config=AdaptiveSettings(until=until))
        group.run(group.now + 30)
        timeline = group.timeline()
        probes[until] = sum(segment["kind"] == PROBE for segment in timeline)
        settled = next(segment for segment in timeline if segment["kind"] == SETTLED)
        if until == "worth":
            assert settled["decision"]["rule"] == "cost" and "cost more than it could win" in settled["reason"]
            assert settled["decision"]["another_pair"]["could_win_s"] < settled["decision"]["another_pair"]["costs_s"]
    assert probes["worth"] == 2 and probes["sure"] > 2
    # the report's timeline says what the round weighed
    settled = next(segment for segment in Group(CLOSE, iterations=150, noise=0.2).ran(30) if segment["kind"] == SETTLED)
    [row] = timeline_rows([{"group": 0, "adaptive_timeline": [settled]}])
    assert "another pair could win 0." in row["reason"] and " s and cost 0." in row["reason"]
    # a long run: the same pair is worth more windows
    group = Group(CLOSE, iterations=20000, noise=0.2)
    group.run(group.now + 60)
    assert sum(segment["kind"] == PROBE for segment in group.timeline()) > 2


def test_a_job_that_ends_leaves_the_other_alone_and_a_group_of_three_probes_again():
    group = Group(TURNS_AHEAD)
    group.run(group.now + 30, end_first="a")
    assert group.timeline()[-1]["kind"] == ALONE and "a ended" in group.timeline()[-1]["reason"]
    three = {"alone": {"a": 0.1, "b": 0.1, "c": 0.1}, "turns": {"a": 0.2, "b": 0.2, "c": 0.2},
             "free": {"a": 0.3, "b": 0.3, "c": 0.3}}
    group = Group(three, iterations=2000)
    group.run(group.now + 40, end_first="c")
    reasons = [segment["reason"] for segment in group.timeline()]
    assert any(reason.startswith("c ended: round 2") for reason in reasons)


def test_the_segment_a_job_ends_is_measured_with_that_job_in_it():
    # two jobs: the last shared segment has its figures (before, the job that ended was gone when it closed)
    group = Group(TURNS_AHEAD)
    group.run(group.now + 30, end_first="a")
    shared = group.timeline()[-2]
    assert shared["kind"] == SETTLED and set(shared["speeds"]) == {"a", "b"}
    assert shared["aggregate"] == pytest.approx(2 * 0.1 / 0.15, rel=0.06)
    # three jobs, one ends in the settled segment: each of the three has its speed there
    three = {"alone": {"a": 0.1, "b": 0.1, "c": 0.1}, "turns": {"a": 0.2, "b": 0.2, "c": 0.2},
             "free": {"a": 0.3, "b": 0.3, "c": 0.3}}
    group = Group(three, iterations=2000)
    group.run(group.now + 40, end_first="c")
    timeline = group.timeline()
    ended_at = next(i for i, segment in enumerate(timeline) if segment["reason"].startswith("c ended"))
    before = timeline[ended_at - 1]
    assert set(before["speeds"]) == {"a", "b", "c"}
    assert before["aggregate"] == pytest.approx(3 * 0.1 / 0.2, rel=0.06)
    # c ends in a probe window: the new round's first window measures the two left from c's end on, not from
    # where the window c cut short began (the state is the same, so no switch marks the start)
    group = Group(three, iterations=2000)
    group.run(group.now + 40, end_first="c", end_after=5)
    timeline = group.timeline()
    ended_at = next(i for i, segment in enumerate(timeline) if segment["reason"].startswith("c ended"))
    cut, first = timeline[ended_at - 1], timeline[ended_at]
    assert cut["kind"] == PROBE and cut["way"] == first["way"] and cut["window"][0] < cut["ended"]
    assert set(first["speeds"]) == {"a", "b"} and first["window"][0] >= cut["ended"] - 1e-9


def test_a_job_with_no_time_alone_is_measured_against_its_fastest_pace_and_says_so():
    times = {"alone": {"a": 0.1, "b": None}, "turns": {"a": 0.15, "b": 0.15}, "free": {"a": 0.2, "b": 0.2}}
    group = Group(times)
    group.run(group.now + 30)
    measured = [segment for segment in group.timeline() if segment["speeds"]]
    assert measured and all(segment["decision"]["relative_to_fastest_seen"] == ["b"] for segment in measured)
    assert group.timeline()[-1]["way"] == "crossover"  # the windows still compare: one stand-in in all of them


def test_a_job_with_no_time_alone_keeps_one_stand_in_so_its_segments_compare_across_rounds():
    times = {"alone": {"a": 0.1, "b": None}, "turns": {"a": 0.15, "b": 0.15}, "free": {"a": 0.2, "b": 0.2}}
    group = Group(times, iterations=3000)  # starts without turns: b's pace at its first round is 0.2 s
    group.run(group.now + 25)
    first = [segment for segment in group.timeline() if segment["speeds"]]
    assert first and first[0]["way"] == "concurrent" and first[0]["speeds"]["b"] == pytest.approx(1.0, rel=0.08)
    # b speeds up 2x (a data phase ends): a new round, and b's speed is still against its first pace (0.2 s)
    group.times = {**times, "turns": {"a": 0.15, "b": 0.075}, "free": {"a": 0.2, "b": 0.1}}
    group.run(group.now + 40)
    timeline = group.timeline()
    assert any("drifted" in segment["reason"] for segment in timeline)
    last = [segment for segment in timeline if segment["speeds"]][-1]
    pace = group.times["turns" if last["way"] == "crossover" else "free"]["b"]
    assert last["speeds"]["b"] == pytest.approx(0.2 / pace, rel=0.08)  # taken anew at the new round: 0.76


def test_a_drift_probes_again_and_finds_the_other_state_better_now():
    group = Group(TURNS_AHEAD, iterations=3000)
    group.run(group.now + 25)
    assert group.timeline()[-1]["way"] == "crossover"
    group.times = FREE_AHEAD  # the jobs change (a data phase, a partner's communication): turns fall behind
    group.run(group.now + 40)
    reasons = [segment["reason"] for segment in group.timeline()]
    assert any("drifted" in reason for reason in reasons)
    assert group.timeline()[-1]["way"] == "concurrent"


def test_a_short_iteration_swinging_with_a_slow_partners_phases_is_not_a_drift():
    """The demo's ddp-digits (14-27 ms) beside resnet-synthetic (300-450 ms): eight of the short job's iterations
    at one pace while the partner computes, eight at 1.7 times it while the partner's all-reduce runs. Five of
    them fall in one phase and looked like a drift each time the phase changed; its pace over two of the slow
    job's iterations does not move. A real change of its pace is still one."""
    times = {"alone": {"a": 0.012, "b": 0.3}, "turns": {"a": 0.015, "b": 0.4}, "free": {"a": 0.02, "b": 0.45}}
    phases = {"a": [1.0] * 8 + [1.7] * 8}
    settled = MeasuredBefore({TURNS: 1.3, FREE: 1.0}, 0.04)
    group = Group(times, start=TURNS, iterations=100_000, measured=settled, phases=phases, noise=0.02)
    group.run(group.now + 30)
    timeline = group.timeline()
    assert not any("drifted" in segment["reason"] for segment in timeline), [s["reason"] for s in timeline]
    assert [segment["kind"] for segment in timeline] == [WARMUP, SETTLED]
    group.times = {**times, "turns": {"a": 0.03, "b": 0.4}}  # its pace doubles in both phases
    group.run(group.now + 10)
    assert any("a's iteration drifted" in segment["reason"] for segment in group.timeline())


def test_no_time_to_probe_stays_in_the_prior():
    group = Group(TURNS_AHEAD, iterations=60)  # 9 s in all: 0.2 of what is left is below a pair of windows
    group.run(group.now + 12)
    timeline = group.timeline()
    assert PROBE not in [segment["kind"] for segment in timeline]
    assert "no time to probe" in timeline[1]["reason"] and timeline[1]["way"] == "concurrent"
    assert group.commands == []  # never switched


# ------------------------------------------------------------------------------------ measured before


def test_two_figures_measured_before_decide_only_when_further_apart_than_their_error():
    apart = MeasuredBefore({TURNS: 1.57, FREE: 1.08}, 0.04).verdict(CONFIG)
    assert apart is not None and apart.state == TURNS and apart.rule == "measured"
    assert apart.error == pytest.approx(math.hypot(0.04 * 1.57, 0.04 * 1.08))
    assert MeasuredBefore({TURNS: 1.0, FREE: 1.3}, 0.04).verdict(CONFIG).state == FREE
    # 1.63 against 1.50: 8% apart, under two standard errors of the difference (2 x 0.089)
    assert MeasuredBefore({TURNS: 1.63, FREE: 1.50}, 0.04).verdict(CONFIG) is None


def test_figures_that_are_means_of_several_comparisons_have_the_error_of_a_mean():
    # each the mean of three: the error of one over the square root of three (2 x 0.051 = 0.103 < 0.13)
    means = MeasuredBefore({TURNS: 1.63, FREE: 1.50}, 0.04, {TURNS: 3, FREE: 3})
    assert means.errors() == {TURNS: pytest.approx(0.04 * 1.63 / math.sqrt(3)), FREE: pytest.approx(0.04 * 1.5 / math.sqrt(3))}
    settled = means.verdict(CONFIG)
    assert settled is not None and settled.state == TURNS
    assert settled.error == pytest.approx(math.hypot(0.04 * 1.63, 0.04 * 1.5) / math.sqrt(3))
    # one figure of one comparison keeps the error of one: the rule waits for both
    assert MeasuredBefore({TURNS: 1.63, FREE: 1.50}, 0.04, {TURNS: 3, FREE: 1}).verdict(CONFIG) is None
    # and what ran before, weighed in beside the windows, carries the same error
    value, error = means.relative_difference()
    assert value == pytest.approx(0.13 / 1.5) and error == pytest.approx(settled.error / 1.5)
    # 5% apart is within two errors even of the means of three: it probes
    assert MeasuredBefore({TURNS: 1.575, FREE: 1.50}, 0.04, {TURNS: 3, FREE: 3}).verdict(CONFIG) is None


def test_a_group_measured_clearly_apart_before_settles_after_its_warm_up_without_a_probe():
    group = Group(TURNS_AHEAD, start=TURNS, iterations=3000, measured=MeasuredBefore({TURNS: 1.33, FREE: 1.0}, 0.04))
    group.run(group.now + 20)
    timeline = group.timeline()
    assert [segment["kind"] for segment in timeline] == [WARMUP, SETTLED]
    settled = timeline[1]
    assert settled["way"] == "crossover" and settled["decision"]["rule"] == "measured"
    assert settled["decision"]["ways"] == {"crossover": 1.33, "concurrent": 1.0}
    assert settled["decision"]["windows"] == 0 and "measured on these jobs before" in settled["reason"]
    assert group.commands == []  # it started in the better state: nothing to switch
    # it watches as any settled group: the jobs change, it probes, and finds the other state better now
    group.times = FREE_AHEAD
    group.run(group.now + 40)
    timeline = group.timeline()
    assert any("drifted" in segment["reason"] for segment in timeline)
    assert PROBE in [segment["kind"] for segment in timeline] and timeline[-1]["way"] == "concurrent"


def test_a_prior_measured_in_the_worse_state_switches_once_to_the_better():
    group = Group(FREE_AHEAD, start=TURNS, iterations=3000, measured=MeasuredBefore({TURNS: 1.0, FREE: 1.33}, 0.04))
    group.run(group.now + 10)
    assert [segment["way"] for segment in group.timeline()] == ["crossover", "concurrent"]
    assert [state for _, state, _ in group.commands] == [FREE] and set(group.state.values()) == {FREE}


@pytest.mark.parametrize("measured, config", [
    (MeasuredBefore({TURNS: 1.05, FREE: 1.0}, 0.04), None),  # closer than their error: it measures
    (MeasuredBefore({TURNS: 1.33, FREE: 1.0}, 0.04), AdaptiveSettings(measured="probe")),  # told to probe
])
def test_figures_measured_too_close_or_a_group_told_to_probe_probes_as_ever(measured, config):
    group = Group(TURNS_AHEAD, start=TURNS, iterations=3000, measured=measured, config=config)
    group.run(group.now + 25)
    timeline = group.timeline()
    assert PROBE in [segment["kind"] for segment in timeline]
    assert timeline[-1]["decision"]["rule"] == "clear" and timeline[-1]["way"] == "crossover"


def test_what_ran_before_weighs_in_with_the_windows_by_their_precision():
    value, error = weigh_in((0.0, 0.03), (0.06, 0.03))
    assert value == pytest.approx(0.03) and error == pytest.approx(0.03 / math.sqrt(2))
    assert weigh_in((0.0, 0.01), (0.06, 0.03))[0] == pytest.approx(0.006)  # the windows 9 times as precise
    # windows a hair apart, out of time: alone, they go to free; whole runs measured turns 8% ahead, which is
    # too close to settle on without a probe, but tips the estimate
    windows = [("free", window(1.50, 0.06)), ("turns", window(1.49, 0.06))]
    assert verdict(windows, CONFIG, "time").state == "free"
    before = MeasuredBefore({TURNS: 1.62, FREE: 1.50}, 0.04)
    assert before.verdict(CONFIG) is None
    found = verdict(windows, CONFIG, "time", before)
    assert (found.state, found.rule) == ("turns", "time")
    figures = found.figures()
    assert figures["measured_before"]["difference"] == pytest.approx(0.08)
    assert figures["measured_before"]["error"] == pytest.approx(0.04 * math.hypot(1.62, 1.50) / 1.50, abs=1e-4)
    combined = figures["combined"]
    assert 0 < combined["difference"] < 0.08 and combined["error"] < figures["measured_before"]["error"]
    assert figures["difference"] == pytest.approx(-0.01)  # the windows' own figures stay as they measured
    # nor does it settle a round early by itself: it is one more estimate, and windows clearly the other way win
    assert verdict(windows, CONFIG, "", before).state is None
    assert verdict([("free", window(1.60, 0.02)), ("turns", window(1.40, 0.02))], CONFIG, "", before).state == "free"


def test_a_group_whose_windows_cannot_tell_its_ways_apart_weighs_what_ran_before():
    same = {"alone": {"a": 0.1, "b": 0.1}, "turns": {"a": 0.15, "b": 0.15}, "free": {"a": 0.15, "b": 0.15}}
    before = MeasuredBefore({TURNS: 1.43, FREE: 1.33}, 0.04)  # 7.5% apart: not enough to settle on
    uncertain = AdaptiveSettings.of({"floor": "0.05"})  # windows each within 5%: as uncertain as what ran before
    group = Group(same, noise=0.0, measured=before, config=uncertain)
    group.run(group.now + 30)
    settled = [segment for segment in group.timeline() if segment["kind"] == SETTLED][0]
    assert settled["way"] == "crossover" and settled["decision"]["combined"]["difference"] > 0.02
    assert settled["decision"]["aggregate"]["turns"] == pytest.approx(settled["decision"]["aggregate"]["free"])
    # told to probe, the windows alone decide: even, so a coin toss, which goes to what a user has without xover
    told = AdaptiveSettings.of({"floor": "0.05", "measured": "probe"})
    group = Group(same, noise=0.0, measured=before, config=told)
    group.run(group.now + 30)
    settled = [segment for segment in group.timeline() if segment["kind"] == SETTLED][0]
    assert settled["way"] == "concurrent" and "combined" not in settled["decision"]


def test_a_group_settled_on_measurements_probes_when_one_of_three_ends():
    three = {"alone": {"a": 0.1, "b": 0.1, "c": 0.1}, "turns": {"a": 0.2, "b": 0.2, "c": 0.2},
             "free": {"a": 0.3, "b": 0.3, "c": 0.3}}
    group = Group(three, iterations=2000, start=TURNS, measured=MeasuredBefore({TURNS: 1.5, FREE: 1.0}, 0.04))
    group.run(group.now + 40, end_first="c")
    reasons = [segment["reason"] for segment in group.timeline()]
    assert group.timeline()[1]["decision"]["rule"] == "measured"
    assert any(reason.startswith("c ended: round 1") for reason in reasons)
    # what the three measured before is not the two left: it does not weigh in on their round
    decided = [segment["decision"] for segment in group.timeline()[2:] if segment["kind"] == SETTLED]
    assert decided and all("measured_before" not in decision for decision in decided)



# ------------------------------------------------------------------------------------ evaluations


def test_a_window_leaves_out_the_iterations_an_evaluation_held_up():
    # a: 0.1 s iterations, one of them held 1 s by an evaluation; b waited for it (its iteration 4 took 1.1 s)
    a_ends = [0.1 * k for k in range(1, 6)] + [1.5 + 0.1 * k for k in range(1, 16)]
    b_ends = [0.1 * k for k in range(1, 4)] + [1.4 + 0.1 * k for k in range(0, 17)]
    points = {"a": [(t, i + 1.0) for i, t in enumerate(a_ends)], "b": [(t, i + 1.0) for i, t in enumerate(b_ends)]}
    durations = {name: [(t, t - (ends[i - 1] if i else 0.0)) for i, t in enumerate(ends)]
                 for name, ends in (("a", a_ends), ("b", b_ends))}
    solo = {"a": 0.1, "b": 0.1}
    held = measure(points, durations, solo, 0.15, 2.95)
    assert held is not None and held.aggregate < 1.4  # 1 s of nothing in 2.8 s
    left_out = {"a": [(0.5, 1.6)], "b": [(0.3, 1.4)]}
    measured = measure(points, durations, solo, 0.15, 2.95, left_out=left_out)
    assert measured is not None
    assert measured.speeds == pytest.approx({"a": 1.0, "b": 1.0}, rel=0.01)
    assert measured.left_out_s == pytest.approx({"a": 1.1, "b": 1.1})


def test_with_turns_evaluations_run_as_fast_as_alone_and_every_other_job_waits_without_turns_nothing_changes():
    window = Measured(0.0, 2.0, {"a": 0.6, "b": 0.6}, {"a": 0.01, "b": 0.01})
    evaluations = {"a": Evaluations(interval=50, alone_s=1.0)}  # 1 s every 50 iterations of 0.1 s alone: e = 0.2
    with_turns = charge_evaluations(window, "turns", evaluations, {"a": 0.1, "b": 0.1})
    # over 50 of a's iterations (50 * 0.1 / 0.6 s) and its evaluation (1 s): a did 50 iterations and an
    # evaluation that alone take 6 s; b did 0.6 of what it does alone, but only while a was not evaluating
    period = 50 * 0.1 / 0.6 + 1.0
    assert with_turns.speeds == pytest.approx({"a": 6.0 / period, "b": 0.6 * (period - 1.0) / period})
    assert with_turns.charged == {"a": round(1.2 / 1.12, 4), "b": round(1 / 1.12, 4)}
    assert charge_evaluations(window, "free", evaluations, {"a": 0.1, "b": 0.1}) is window
    assert charge_evaluations(window, "turns", {}, {"a": 0.1, "b": 0.1}) is window


def long_run(times, name, interval, seconds):
    """Each state's aggregate over a long run of the Group's model, relative to each job alone, evaluations
    and all: with turns, an evaluation takes `seconds` every `interval` iterations of its job and stops every
    job; without, it is slowed as its job's iterations are and the others go on."""
    aggregates = {}
    for state in ("turns", "free"):
        alone = {job: 1 / times["alone"][job] for job in times[state]}  # iterations per second
        alone[name] = interval / (interval * times["alone"][name] + seconds)
        if state == "turns":
            period = interval * times[state][name] + seconds  # of a's: everyone waits for its evaluation
            rates = {job: (period - seconds) / times[state][job] / period for job in times[state]}
        else:
            period = interval * times[state][name] + seconds * times[state][name] / times["alone"][name]
            rates = {job: 1 / times[state][job] for job in times[state]}
        rates[name] = interval / period
        aggregates[state] = sum(rates[job] / alone[job] for job in rates)
    return aggregates


@pytest.mark.parametrize("times, interval, seconds, better", [(TURNS_AHEAD, 50, 1.0, "crossover"),
                                                              (TURNS_AHEAD, 10, 1.0, "crossover"),
                                                              (FREE_AHEAD, 10, 0.5, "concurrent")])
def test_a_partners_evaluation_in_a_window_neither_sinks_turns_nor_is_forgotten(times, interval, seconds, better):
    # a evaluates every `interval` iterations: with turns as fast as alone, b waiting; without, both slowed
    expected = long_run(times, "a", interval, seconds)
    assert (expected["turns"] > expected["free"]) == (better == "crossover")
    for seed in (1, 2, 3):
        group = Group(times, iterations=3000, seed=seed, start="turns", evaluations={"a": (interval, seconds)})
        group.run(group.now + 40)
        timeline = group.timeline()
        settled = [segment for segment in timeline if segment["kind"] == SETTLED][-1]
        assert settled["way"] == better, (seed, settled["decision"])
        ways = settled["decision"]["ways"]
        assert ways["crossover"] == pytest.approx(expected["turns"], rel=0.06)
        assert ways["concurrent"] == pytest.approx(expected["free"], rel=0.06)
        # what was measured says what it left out and charged; a decision made before the first evaluation
        # was made again on the charged windows
        held = [segment for segment in timeline if "evaluations" in (segment["decision"] or {})]
        assert held and any(segment["decision"]["evaluations"]["left_out_s"] for segment in held)
        if interval == 50:
            assert settled["reason"].startswith("a's evaluations, first seen since, charged to the windows: round 1")


def evaluating_for(evaluation_s, step=10):
    return IterationRecord(step=step, time_s=0.0, wall_time=5.0, iteration_s=1.2, data_s=0.0, compute_s=0.1,
                           communication_s=0.1, wait_s=0.0, samples=32, loss=1.0, evaluation_s=evaluation_s)


def test_an_iteration_is_held_up_by_an_evaluation_as_long_as_one_of_its_jobs_iterations_or_longer():
    assert held_by_evaluation(evaluating_for(1.0), pace=0.1)  # a recipe's, or a script's held-out set after an epoch
    assert held_by_evaluation(evaluating_for(0.1), pace=0.1)
    # a script that runs its model without gradients for a part of every step: that is its pace
    assert not held_by_evaluation(evaluating_for(0.03), pace=0.1)
    assert not held_by_evaluation(evaluating_for(None), pace=0.1)
    assert not held_by_evaluation(evaluating_for(1.0), pace=None)  # no pace yet: its first iterations
    assert not held_by_evaluation(evaluating_for(1.0, step=0), pace=0.1)


def test_forwards_without_gradients_in_every_step_leave_nothing_out_of_a_window():
    # a: 0.02 s of its 0.12 s iterations without gradients, every iteration (the Group adds it to each)
    group = Group(TURNS_AHEAD, iterations=800, start="free", evaluations={"a": (1, 0.02)})
    group.run(until=1060.0)
    timeline = group.timeline()
    probes = [segment for segment in timeline if segment["kind"] == "probe" and segment["aggregate"]]
    assert len(probes) >= 2
    assert not any(((segment["decision"] or {}).get("evaluations") or {}).get("left_out_s") for segment in timeline)
    assert timeline[-1]["way"] == "crossover"
