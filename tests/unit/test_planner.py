"""Tests for the planner: throughput model, grouping, placement, make_plan, plan file."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xover.errors import XoverError
from xover.plan import (
    PLAN_FORMAT,
    GroupingRules,
    InvalidJobProfile,
    JobProfile,
    Plan,
    PlanFormatError,
    PlanInputError,
    SimJob,
    fluid_gain,
    fluid_speeds,
    group_duration_ms,
    grouping,
    local_hosts,
    lockstep_period,
    make_plan,
    plan_from_dict,
    plan_objective,
    plan_to_dict,
    predict_group,
    round_robin_gain,
    round_robin_period,
    sequential_duration_ms,
    simulate,
    time_saved_ms,
)
from xover.plan.calibration import SHIPPED
from xover.plan.model import MIN_INTERFERENCE, interference_next_to, measured_interference
from xover.plan.placement import place_groups, unplaceable_reason
from xover.plan.predict import sim_job
from xover.plan.simulate import MIN_ITERATIONS

LINK_BAND_LEAK = SHIPPED.link_band_leak

FAST = settings(max_examples=60, deadline=None)


def job(name: str, compute: float, comm: float, devices: int = 1, memory: float = 1.0, **extra) -> JobProfile:
    return JobProfile(name=name, devices=devices, compute_ms=compute, comm_ms=comm, memory_gb=memory, **extra)


@st.composite
def job_lists(draw, max_jobs: int = 10, devices=(1, 2), min_jobs: int = 0) -> list[JobProfile]:
    count = draw(st.integers(min_value=min_jobs, max_value=max_jobs))
    return [
        JobProfile(
            name=f"j{index}",
            devices=draw(st.sampled_from(devices)),
            compute_ms=draw(st.integers(min_value=1, max_value=200)),
            comm_ms=draw(st.integers(min_value=0, max_value=200)),
            memory_gb=draw(st.integers(min_value=0, max_value=40)),
            data_ms=draw(st.sampled_from([0, 0, 5])),
            iterations=draw(st.integers(min_value=1, max_value=50)),
            interference=draw(st.sampled_from([-0.5, -0.2, 0.0, 0.2])),
            # a small reference share scales the interference a lot next to chatty partners
            interference_link_share=draw(st.sampled_from([None, 0.6, 0.02])),
        )
        for index in range(count)
    ]


rules_strategy = st.builds(
    GroupingRules,
    max_group=st.just(2),
    device_memory_gb=st.sampled_from([None, 40, 60]),
    min_gain_margin=st.sampled_from([0.0, 0.05, 0.2]),
)


# ---------------------------------------------------------------- model


def test_one_job_runs_at_its_solo_speed():
    alone = job("a", 100, 30, data_ms=5)
    assert alone.solo_ms == 135
    assert round_robin_period([alone]) == 135
    assert round_robin_gain([alone]) == 1.0 == fluid_gain([alone])
    assert predict_group([alone]).speeds == {"a": 1.0}
    assert alone.compute_fraction == pytest.approx(105 / 135)


def test_perfectly_complementary_pair_doubles_throughput():
    compute_heavy, comm_heavy = job("c", 100, 10), job("m", 10, 100)
    assert round_robin_period([compute_heavy, comm_heavy]) == 110
    assert round_robin_gain([compute_heavy, comm_heavy]) == 2.0 == fluid_gain([compute_heavy, comm_heavy])
    assert time_saved_ms([compute_heavy, comm_heavy]) == pytest.approx(110)


def test_two_compute_bound_jobs_are_limited_by_the_devices():
    pair = [job("a", 100, 10), job("b", 100, 10)]
    assert round_robin_period(pair) == 200
    assert round_robin_gain(pair) == pytest.approx(1.1) == fluid_gain(pair)


def test_two_communication_bound_jobs_are_limited_by_the_link():
    pair = [job("a", 20, 100), job("b", 30, 90)]
    assert round_robin_period(pair) == 190
    # the link's time goes to whoever uses it best per unit of speed: b at full speed, a at 0.3
    assert fluid_speeds(pair) == pytest.approx([0.3, 1.0])


def test_the_slowest_job_bounds_round_robin_but_not_the_fluid_bound():
    pair = [job("long", 100, 100), job("short", 10, 10)]
    assert round_robin_period(pair) == 200  # the short job runs at the long one's pace
    assert fluid_gain(pair) == pytest.approx(2.0)  # at their own pace, both run as if alone


def test_data_loading_counts_as_device_time():
    pair = [job("a", 60, 10, data_ms=40), job("b", 10, 100)]
    assert round_robin_period(pair) == 110


def test_fluid_bound_counts_the_link_and_the_cpu_communication_takes():
    compute_heavy = job("c", 86, 5, link_ms=18)
    bulk = job("v", 38, 551, link_ms=551, comm_cpu=0.2)
    speeds = fluid_speeds([compute_heavy, bulk])
    # devices: 86/91 x + (38 + 0.2 * 551)/589 y <= 1; link: 18/91 x + 551/589 y <= 1
    assert 86 / 91 * speeds[0] + 148.2 / 589 * speeds[1] <= 1 + 1e-9
    assert 18 / 91 * speeds[0] + speeds[1] * 551 / 589 <= 1 + 1e-9
    assert sum(speeds) == pytest.approx(fluid_gain([compute_heavy, bulk]))
    assert sum(speeds) < fluid_gain([compute_heavy, job("v", 38, 551, link_ms=551)])


def test_max_slowdown_bounds_the_fluid_speeds():
    compute_heavy = job("c", 86, 5, link_ms=18)
    protected = job("v", 38, 551, link_ms=551, comm_cpu=0.2, max_slowdown=1.05)
    speeds = fluid_speeds([compute_heavy, protected])
    assert speeds[1] >= 1 / 1.05 - 1e-9
    assert fluid_speeds([job("a", 100, 1, max_slowdown=1.1), job("b", 100, 1, max_slowdown=1.1)]) is None


def test_duration_when_one_job_finishes_first():
    short = job("short", 100, 10, iterations=10)
    long = job("long", 10, 100, iterations=30)
    together = predict_group([short, long])
    # both run at their shared speeds until "short" is done, then "long" goes on alone
    first = 10 * together.iteration_ms["short"]
    left = 30 - first / together.iteration_ms["long"]
    assert group_duration_ms([short, long]) == pytest.approx(first + left * 110)
    assert sequential_duration_ms([short, long]) == 40 * 110


def test_launch_cost_is_paid_once_per_group_and_once_per_job_alone():
    a, b = job("a", 100, 10, iterations=10, startup_ms=4000), job("b", 10, 100, iterations=10, startup_ms=6000)
    free = [dataclasses.replace(j, startup_ms=0.0) for j in (a, b)]
    assert group_duration_ms([a, b]) == pytest.approx(group_duration_ms(free) + 6000)  # launched together
    assert sequential_duration_ms([a, b]) == sequential_duration_ms(free) + 10000


def test_interference_slows_a_job_only_while_it_shares_its_devices():
    heavy, light = job("heavy", 100, 20, link_ms=30, comm_cpu=0.2), job("light", 30, 100)
    clean = predict_group([heavy, light])
    sensitive = predict_group([dataclasses.replace(heavy, interference=0.3), light])
    assert sensitive.speeds["heavy"] < clean.speeds["heavy"]
    assert sensitive.fluid_bound == clean.fluid_bound  # the bound is the ideal, without interference
    assert predict_group([dataclasses.replace(heavy, interference=0.3)]).speeds["heavy"] == 1.0


def test_interference_scales_half_with_the_partners_link_share():
    measured = job("a", 90, 10, interference=0.2, interference_link_share=0.5)
    reference = job("ref", 50, 50, link_ms=50)  # link share 0.5: the partner it was measured next to
    twice = job("busy", 0.1, 99.9, link_ms=100)  # link share 1.0
    quiet = job("quiet", 100, 1e-9)  # link share ~0
    assert SHIPPED.interference_traffic_part == 0.5
    assert interference_next_to(measured, [reference]) == pytest.approx(0.2)
    assert interference_next_to(measured, [twice]) == pytest.approx(0.2 * 1.5)
    assert interference_next_to(measured, [quiet]) == pytest.approx(0.2 * 0.5)
    assert interference_next_to(measured, [reference, reference]) == pytest.approx(0.2 * 1.5)  # partners add up
    assert interference_next_to(measured, []) == 0.0  # alone: nothing to interfere
    flat = dataclasses.replace(measured, interference_link_share=None)  # a trace without the column
    assert interference_next_to(flat, [twice]) == interference_next_to(flat, [quiet]) == 0.2


def test_a_reference_that_hardly_sent_scales_the_traffic_part_no_further_than_the_fit():
    """On an unshaped link the reference partner sent 4% of its time: resnet-digits, measured 1.03 next to it, was
    charged 11.4 next to mlp-digits (link share 0.82), and every pair of it predicted to lose (helper-93's probe,
    2026-12-07). A reference share below the calibration's least counts as that least."""
    measured = job("resnet-digits", 100, 10, interference=1.03, interference_link_share=0.039)
    partner = job("mlp-digits", 18, 82, link_ms=82)  # link share 0.82
    least = SHIPPED.interference_reference_share
    assert least == 0.25
    assert interference_next_to(measured, [partner]) == pytest.approx(1.03 * (0.5 + 0.5 * 0.82 / least))
    at_least = dataclasses.replace(measured, interference_link_share=0.3)  # the 1 Gbit/s bench's: as it was
    assert interference_next_to(at_least, [partner]) == pytest.approx(1.03 * (0.5 + 0.5 * 0.82 / 0.3))


def test_a_negative_interference_is_charged_as_none():
    # measured next to a quiet reference, then paired with a partner 30 times chattier: -0.3 * 15.5
    # would make its compute take less than no time; and a job measured faster next to a partner than
    # alone was disturbed alone (2026-12-06: two jobs at -20% and -25% predicted at 2.52, measured 1.54)
    measured = job("a", 115, 104, link_ms=156, interference=-0.3, interference_link_share=0.03)
    chatty = job("b", 130, 136, link_ms=233)
    assert interference_next_to(measured, [chatty]) == 0.0
    assert interference_next_to(dataclasses.replace(measured, interference_link_share=None), [chatty]) == 0.0
    prediction = predict_group([measured, chatty])
    assert prediction.speeds == predict_group([dataclasses.replace(measured, interference=0.0), chatty]).speeds
    assert all(0 < speed <= 1 for speed in prediction.speeds.values())
    assert all(math.isfinite(ms) for ms in prediction.iteration_ms.values())


def test_a_job_is_predicted_slower_next_to_a_partner_that_communicates_more():
    sensitive = job("resnet", 90, 10, interference=0.3, interference_link_share=0.6)
    chatty, quiet = job("chatty", 10, 120, link_ms=125), job("quiet", 60, 5, link_ms=6)  # l/T 0.96, 0.09
    next_to_chatty = predict_group([sensitive, chatty]).speeds["resnet"]
    next_to_quiet = predict_group([sensitive, quiet]).speeds["resnet"]
    flat = dataclasses.replace(sensitive, interference_link_share=None)
    assert next_to_chatty < predict_group([flat, chatty]).speeds["resnet"]
    assert next_to_quiet > predict_group([flat, quiet]).speeds["resnet"]


@pytest.mark.parametrize("interference", [-0.15, 0.0, 0.15, 0.4])
def test_interference_measured_next_to_a_partner_is_what_the_simulation_charges(interference):
    job_, partner = job("a", 90, 10, link_ms=25, comm_cpu=0.1), job("ref", 60, 60, link_ms=70, comm_cpu=0.3)
    corun = simulate([sim_job(dataclasses.replace(job_, interference=interference)), sim_job(partner)])
    measured = corun.jobs[0].device_ms  # what the co-run measures: device time per iteration next to the partner
    assert measured == pytest.approx(job_.device_ms * (1 + interference), rel=1e-6)
    assert measured_interference(job_.device_ms, measured) == pytest.approx(interference, abs=1e-6)
    assert measured_interference(job_.device_ms, job_.device_ms * 0.2) == MIN_INTERFERENCE


def test_the_partners_communication_cpu_is_charged_in_the_fluid_bound_only():
    # the measured interference holds what a partner's communication costs a computing job; its CPU
    # time is not charged again in the simulation
    heavy, bulk = job("heavy", 100, 20, link_ms=30), job("bulk", 38, 551, link_ms=551)
    busy = dataclasses.replace(bulk, comm_cpu=0.3)
    assert predict_group([heavy, busy]).speeds == predict_group([heavy, bulk]).speeds
    assert fluid_gain([heavy, busy]) < fluid_gain([heavy, bulk])


def test_lockstep_example_from_the_model_docstring():
    jobs = [job("1", 50, 100), job("2", 50, 10), job("3", 50, 10)]
    assert round_robin_period(jobs) == 150
    assert lockstep_period(jobs) == 200


def test_invalid_profiles_are_rejected():
    with pytest.raises(InvalidJobProfile, match="devices"):
        job("a", 10, 10, devices=0)
    with pytest.raises(InvalidJobProfile, match="comm_ms"):
        job("a", 10, -1)
    with pytest.raises(InvalidJobProfile, match="compute_ms"):
        job("a", 0, 10)
    with pytest.raises(InvalidJobProfile, match="iterations"):
        job("a", 10, 10, iterations=0)


def _round_robin_period(jobs: Sequence[JobProfile], iterations: int = 600, window: int = 200) -> float:
    """Long-run period of a token passed round-robin on the devices, with a FIFO link.

    A job computes when it holds the token and its previous all-reduce is done,
    then starts its all-reduce once the link is free.
    """
    devices_free = link_free = 0.0
    gradients_ready = [0.0] * len(jobs)
    first_job_starts = []
    for _ in range(iterations):
        for index, profile in enumerate(jobs):
            start = max(devices_free, gradients_ready[index])
            devices_free = start + profile.device_ms
            link_free = max(devices_free, link_free) + profile.comm_ms
            gradients_ready[index] = link_free
            if index == 0:
                first_job_starts.append(start)
    return (first_job_starts[-1] - first_job_starts[-1 - window]) / window


@FAST
@given(job_lists(max_jobs=5, min_jobs=1))
def test_round_robin_closed_form_matches_a_round_robin_simulation(jobs):
    assert _round_robin_period(jobs) == pytest.approx(round_robin_period(jobs), rel=1e-3)


@FAST
@given(job_lists(max_jobs=6, min_jobs=2))
def test_lockstep_is_never_faster_and_equal_for_pairs(jobs):
    assert lockstep_period(jobs) >= round_robin_period(jobs) - 1e-9
    pair = jobs[:2]
    assert lockstep_period(pair) == pytest.approx(round_robin_period(pair))


@FAST
@given(job_lists(max_jobs=4, min_jobs=1))
def test_fluid_bound_is_between_one_job_and_every_job_at_full_speed(jobs):
    assert 1.0 - 1e-9 <= fluid_gain(jobs) <= len(jobs) + 1e-9
    assert fluid_gain(jobs) >= round_robin_gain(jobs) - 1e-9  # no schedule beats it, strict alternation included


@settings(max_examples=30, deadline=None)
@given(job_lists(max_jobs=3, min_jobs=2, devices=(1,)))
def test_simulated_policies_never_beat_the_fluid_bound(jobs):
    sims = [SimJob(j.name, j.device_ms, j.comm_ms) for j in jobs]
    bound = fluid_gain(jobs)
    for mode, policy in (("crossover", "work-conserving"), ("crossover", "round-robin"), ("concurrent", None)):
        assert simulate(sims, mode, policy, iterations=30).aggregate <= bound * 1.03  # a finite window's edges


def test_the_simulated_link_serves_the_first_band_first():
    # mlp-balanced's small share of the link first: its all-reduce no longer waits behind mlp-synthetic's
    light, heavy = SimJob("mlp-balanced", 82, 110, 115, 10), SimJob("mlp-synthetic", 7, 124, 124, 1)
    crossover, concurrent = simulate([heavy, light], "crossover"), simulate([heavy, light], "concurrent", None)
    assert crossover.jobs[1].speed > concurrent.jobs[1].speed + 0.1
    assert crossover.aggregate > concurrent.aggregate
    assert crossover.jobs[0].speed > 0.3  # the heavy job keeps the link the light one leaves


def test_the_band_behind_keeps_a_leak_of_the_link():
    # the light job's all-reduce (10 ms of link) is always in flight next to the heavy one's: it gets all
    # of the link but LINK_BAND_LEAK, and the heavy one that much while both send
    light, heavy = SimJob("light", 10, 10, 10), SimJob("heavy", 1, 200, 200)
    outcome = simulate([light, heavy], "crossover")
    assert outcome.jobs[0].iteration_ms == pytest.approx(10 + 10 / (1 - LINK_BAND_LEAK), rel=0.05)
    sending = 10 / (1 - LINK_BAND_LEAK) / outcome.jobs[0].iteration_ms  # time share the light job sends
    heavy_rate = (1 - sending) + sending * LINK_BAND_LEAK
    assert outcome.jobs[1].iteration_ms == pytest.approx(200 / heavy_rate, rel=0.05)


@pytest.mark.parametrize("fast_ms", [2.0, 0.2])
def test_a_job_far_faster_than_its_partner_stops_the_simulation_early_with_the_same_speeds(fast_ms):
    # the horizon follows the 1 s job; the fast one would fill it with 55,000-220,000 iterations
    jobs = [SimJob("slow", 900, 100, 150), SimJob("fast", fast_ms * 0.4, fast_ms * 0.6, fast_ms * 0.7)]
    capped, whole = simulate(jobs), simulate(jobs, max_events=10**9)
    assert capped.jobs[1].iterations < whole.jobs[1].iterations / 4
    assert min(job.iterations for job in capped.jobs) >= MIN_ITERATIONS
    for short, full in zip(capped.jobs, whole.jobs):
        assert short.speed == pytest.approx(full.speed, rel=0.01)


def test_a_job_a_trillion_times_faster_than_its_partner_stops_the_simulation_and_starves_the_slow_one():
    """1e9 ms next to 0.001 ms: the slow job never reached MIN_ITERATIONS, so the cap never let the simulation
    stop (`xover plan` of such profiles ran for ever). It stops at HARD_STOP x MAX_EVENTS now, and a job with
    under two iterations by then is predicted starved: the planner forms no such group."""
    from xover.plan.simulate import HARD_STOP, MAX_EVENTS

    jobs = [SimJob("slow", 1e9, 1e9), SimJob("fast", 0.001, 0.0005)]
    outcome = simulate(jobs, max_events=1000)
    assert outcome.jobs[0].speed == 0.0 and outcome.jobs[0].iterations < 2
    assert outcome.jobs[1].iterations <= HARD_STOP * 1000
    assert HARD_STOP * MAX_EVENTS <= 250_000  # a few seconds of simulation at most


@pytest.mark.parametrize("mode", ["crossover", "concurrent"])
def test_a_job_of_no_compute_is_refused_by_the_simulation_not_looped_on(mode):
    # its iterations ended in the instant they began, for ever: the inputs refuse it, the simulation too
    with pytest.raises(ValueError, match="'tiny': compute_ms 1e-09 is too short to simulate"):
        simulate([SimJob("tiny", 1e-9, 1e-9), SimJob("other", 10, 10)], mode)
    with pytest.raises(InvalidJobProfile, match="compute_ms must be at least 0.001"):
        job("tiny", 1e-9, 1e-9)


@settings(max_examples=30, deadline=None)
@given(job_lists(max_jobs=3, min_jobs=2, devices=(1,)))
def test_simulated_round_robin_runs_every_job_at_one_pace(jobs):
    sims = [SimJob(j.name, j.device_ms, j.comm_ms) for j in jobs]
    outcome = simulate(sims, "crossover", "round-robin", iterations=60)
    paces = [o.iteration_ms for o in outcome.jobs]
    assert max(paces) == pytest.approx(min(paces), rel=0.02)  # one iteration each per period
    assert min(paces) >= round_robin_period(jobs) * 0.98  # and never faster than the closed form


# ---------------------------------------------------------------- grouping


def _pair_allowed(a: JobProfile, b: JobProfile, rules: GroupingRules) -> bool:
    memory_fits = rules.device_memory_gb is None or a.memory_gb + b.memory_gb <= rules.device_memory_gb
    return a.devices == b.devices and memory_fits and fluid_gain([a, b]) > 1 + rules.min_gain_margin


def _best_objective(jobs: list[JobProfile], rules: GroupingRules) -> float:
    """Brute force over every matching: the first job stays alone or pairs with one other."""
    if not jobs:
        return 0.0
    first, rest = jobs[0], jobs[1:]
    best = _best_objective(rest, rules)
    for index, partner in enumerate(rest):
        if _pair_allowed(first, partner, rules):
            others = rest[:index] + rest[index + 1 :]
            best = max(best, time_saved_ms([first, partner]) + _best_objective(others, rules))
    return best


def _check_groups(groups, jobs, rules: GroupingRules) -> None:
    assert sorted(j.name for group in groups for j in group) == sorted(j.name for j in jobs)
    for group in groups:
        assert 1 <= len(group) <= rules.max_group
        assert len({j.devices for j in group}) == 1
        if rules.device_memory_gb is not None and len(group) > 1:
            assert sum(j.memory_gb for j in group) <= rules.device_memory_gb
        if len(group) > 1:
            assert fluid_gain(group) > 1 + rules.min_gain_margin


@settings(max_examples=200, deadline=None)
@given(job_lists(max_jobs=10, devices=(1, 1, 1, 2)), rules_strategy)
def test_matching_is_optimal_for_pairs(jobs, rules):
    groups = grouping.matching(jobs, rules)
    _check_groups(groups, jobs, rules)
    assert plan_objective(groups) == pytest.approx(_best_objective(jobs, rules), abs=1e-6)


@FAST
@given(job_lists(max_jobs=12), rules_strategy)
def test_sparse_matching_respects_the_rules(jobs, rules):
    groups = grouping.matching(jobs, rules, dense_graph_limit=0, candidates_per_group=2)
    _check_groups(groups, jobs, rules)
    assert plan_objective(groups) >= 0


@FAST
@given(job_lists(max_jobs=12), rules_strategy, st.integers(min_value=3, max_value=4))
def test_larger_groups_only_add_savings(jobs, rules, max_group):
    bigger = GroupingRules(max_group, rules.device_memory_gb, rules.min_gain_margin)
    groups = grouping.matching(jobs, bigger)
    _check_groups(groups, jobs, bigger)
    assert plan_objective(groups) >= plan_objective(grouping.matching(jobs, rules)) - 1e-6


@FAST
@given(job_lists(max_jobs=14), rules_strategy, st.integers(min_value=1, max_value=4))
def test_ffd_never_does_worse_than_none(jobs, rules, max_group):
    rules = GroupingRules(max_group, rules.device_memory_gb, rules.min_gain_margin)
    groups = grouping.ffd(jobs, rules)
    _check_groups(groups, jobs, rules)
    assert plan_objective(groups) >= 0
    assert plan_objective(grouping.none(jobs)) == 0


def test_matching_pairs_compute_heavy_with_communication_heavy():
    jobs = [job("c1", 100, 10), job("c2", 90, 20), job("m1", 10, 100), job("m2", 20, 90)]
    groups = grouping.matching(jobs, GroupingRules())
    assert sorted(sorted(j.name for j in group) for group in groups) == [["c1", "m1"], ["c2", "m2"]]


def test_memory_keeps_jobs_apart():
    jobs = [job("c", 100, 10, memory=50), job("m", 10, 100, memory=40)]
    assert len(grouping.matching(jobs, GroupingRules(device_memory_gb=80))) == 2
    assert len(grouping.matching(jobs, GroupingRules(device_memory_gb=90))) == 1


def test_jobs_needing_different_device_counts_never_share():
    jobs = [job("c", 100, 10, devices=2), job("m", 10, 100, devices=4)]
    for algorithm in grouping.ALGORITHMS.values():
        assert len(algorithm(jobs, GroupingRules())) == 2


def test_small_gains_are_not_worth_sharing():
    jobs = [job("a", 100, 8), job("b", 100, 8)]  # gain 216 / 200 = 1.08
    assert len(grouping.matching(jobs, GroupingRules(min_gain_margin=0.1))) == 2
    assert len(grouping.matching(jobs, GroupingRules(min_gain_margin=0.05))) == 1


def test_ffd_fills_compute_heavy_groups_with_communication_heavy_jobs():
    jobs = [job("m1", 2, 100), job("c1", 100, 2), job("m2", 2, 100), job("c2", 100, 2)]
    groups = grouping.ffd(jobs, GroupingRules())
    assert sorted(sorted(j.name for j in group) for group in groups) == [["c1", "m1"], ["c2", "m2"]]


def test_ffd_takes_the_first_group_that_pays_off_not_the_best():
    # c1 + c2 gain 1.1 > 1.05, so c2 joins c1 first; matching finds the 2.0 pairs.
    jobs = [job("m1", 10, 100), job("c1", 100, 10), job("m2", 10, 100), job("c2", 100, 10)]
    first_fit = grouping.ffd(jobs, GroupingRules())
    assert sorted(sorted(j.name for j in group) for group in first_fit) == [["c1", "c2"], ["m1", "m2"]]
    assert plan_objective(grouping.matching(jobs, GroupingRules())) > plan_objective(first_fit) > 0


# ---------------------------------------------------------------- placement


def _names(placed):
    return [(group.devices, group.wave) for group in placed]


def test_groups_that_do_not_fit_wait_for_the_next_wave():
    groups = [[job(name, 10, 10, devices=4)] for name in "abc"]
    placed = place_groups(groups, [("a", 4), ("b", 4)])
    assert _names(placed) == [
        (["a:0", "a:1", "a:2", "a:3"], 0),
        (["b:0", "b:1", "b:2", "b:3"], 0),
        (["a:0", "a:1", "a:2", "a:3"], 1),
    ]


def test_a_group_spans_hosts_only_when_no_host_is_big_enough():
    placed = place_groups([[job("x", 10, 10, devices=3)]], [("a", 2), ("b", 2)])
    assert _names(placed) == [(["a:0", "a:1", "b:0"], 0)]
    fragmented = [[job(name, 10, 10, devices=2)] for name in "xyz"]
    placed = place_groups(fragmented, [("a", 3), ("b", 3)])
    assert [group.wave for group in placed] == [0, 0, 1]  # a:2 + b:2 are free, but not split


def test_best_fit_keeps_big_holes_for_big_groups():
    groups = [[job("small", 10, 10, devices=2)], [job("big", 10, 10, devices=4)]]
    placed = place_groups(groups, [("a", 4), ("b", 2)])
    assert _names(placed) == [(["b:0", "b:1"], 0), (["a:0", "a:1", "a:2", "a:3"], 0)]


def test_a_group_starts_on_the_device_that_frees_first():
    # one device each; longest first: 10 and 9 at once, then 8 where 9 ends, not behind 10 (17, not 19)
    groups = [[job(name, 10, 10)] for name in "abcde"]
    placed = place_groups(groups, [("a", 2)], [10, 9, 8, 1, 1])
    assert [(group.jobs[0].name, group.devices, group.start_ms) for group in placed] == [
        ("a", ["a:0"], 0), ("b", ["a:1"], 0), ("c", ["a:1"], 9), ("d", ["a:0"], 10), ("e", ["a:0"], 11)]
    assert max(group.start_ms + d for group, d in zip(placed, [10, 9, 8, 1, 1])) == 17
    assert [group.wave for group in placed] == [0, 0, 1, 1, 2]


def test_a_waiting_group_is_not_starved_by_later_small_ones():
    # big needs both devices; a:0 runs 10. Small ones of 10 may use a:1 until big's reservation at 10, and
    # none of them may start on a:1 at 10 ahead of big.
    groups = [[job("first", 10, 10)], [job("big", 10, 10, devices=2)]] + [[job(f"s{i}", 10, 10)] for i in range(4)]
    placed = place_groups(groups, [("a", 2)], [10, 5, 10, 10, 10, 10])
    start = {group.jobs[0].name: group.start_ms for group in placed}
    assert start["first"] == 0 and start["s0"] == 0  # s0 ends when big may start: it does not delay it
    assert start["big"] == 10
    assert sorted(start[f"s{i}"] for i in range(1, 4)) == [15, 15, 25]
    # one that would still run at 10 does not start beside first at all: big goes first
    placed = place_groups(groups[:2] + [[job("long", 10, 10)]], [("a", 2)], [10, 5, 11])
    assert {group.jobs[0].name: group.start_ms for group in placed} == {"first": 0, "big": 10, "long": 15}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(min_value=1, max_value=50)), min_size=1, max_size=14),
    st.lists(st.sampled_from([4, 8]), min_size=1, max_size=3).map(
        lambda slots: [(f"h{index}", count) for index, count in enumerate(slots)]),
)
def test_placement_is_what_the_runs_start_rule_does(groups, hosts):
    """Started in the plan's order, each group when its devices are free of every group before it (the
    rule of `xover run`), no group starts later than the placement said (earlier where a reservation held
    it back from devices the reserved group did not take in the end), and a wave-0 group at once."""
    jobs = [[job(f"j{i}", 10, 10, devices=size)] for i, (size, _) in enumerate(groups)]
    durations = {f"j{i}": float(length) for i, (_, length) in enumerate(groups)}
    placed = place_groups(jobs, hosts, [durations[group[0].name] for group in jobs])
    free_at: dict[str, float] = {}
    for group in placed:
        start = max((free_at.get(device, 0.0) for device in group.devices), default=0.0)
        assert start <= group.start_ms
        assert (group.wave == 0) == (start == 0)
        for device in group.devices:
            free_at[device] = start + durations[group.jobs[0].name]
    assert [group.start_ms for group in placed] == sorted(group.start_ms for group in placed)


def test_unplaceable_jobs_say_why():
    hosts = [("localhost", 2)]
    assert unplaceable_reason(job("huge", 1, 1, devices=8), hosts, None) == "needs 8 devices, 2 exist"
    assert unplaceable_reason(job("fat", 1, 1, memory=90), hosts, 80) == "needs 90 GB per device, devices have 80 GB"
    assert unplaceable_reason(job("ok", 1, 1, devices=2, memory=80), hosts, 80) is None


# ---------------------------------------------------------------- make_plan


hosts_strategy = st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3).map(
    lambda slots: [(f"h{index}", count) for index, count in enumerate(slots)]
)


@settings(max_examples=100, deadline=None)
@given(
    job_lists(max_jobs=12, devices=(1, 2, 4, 8)),
    hosts_strategy,
    st.sampled_from([None, 30, 60]),
    st.integers(min_value=1, max_value=4),
    st.sampled_from(sorted(grouping.ALGORITHMS)),
)
def test_every_plan_respects_devices_and_memory(jobs, hosts, device_memory, max_group, algo):
    plan = make_plan(jobs, hosts, device_memory_gb=device_memory, max_group=max_group, algo=algo)
    slots = dict(hosts)
    placed_names = [j.name for j in plan.jobs]
    assert sorted(placed_names + [name for name, _ in plan.unplaced]) == sorted(j.name for j in jobs)
    used: set[tuple[int, str]] = set()
    for group in plan.groups:
        assert 1 <= len(group.jobs) <= max_group
        assert {j.devices for j in group.jobs} == {len(group.devices)}
        if device_memory is not None:
            assert sum(j.memory_gb for j in group.jobs) <= device_memory
        group_hosts = {device.rsplit(":", 1)[0] for device in group.devices}
        assert len(group_hosts) == 1 or len(group.devices) > max(slots.values())
        for device in group.devices:
            host, index = device.rsplit(":", 1)
            assert int(index) < slots[host]
            assert (group.wave, device) not in used, "device used twice in one wave"
            used.add((group.wave, device))
        # a group's figures are those of the way of sharing the plan picked for it (adaptive: of the better of
        # the two ways it measures, which it settles on)
        sharing = "crossover" if group.sharing == "alone" else group.sharing
        if sharing == "adaptive":
            sharing = next(way for way, gain in group.predicted_by_sharing.items()
                           if way != "adaptive" and gain == group.predicted_by_sharing["adaptive"])
        prediction = predict_group(group.jobs, plan.policy, sharing=sharing)
        assert group.predicted_period_ms == max(prediction.iteration_ms.values())
        assert math.isfinite(group.predicted_period_ms) and all(s > 0 for s in prediction.speeds.values())
        # the bound is the ideal from the jobs alone, and no interference is charged below none: no job is
        # predicted faster than alone, and no group past its bound
        assert len(group.jobs) == 1 or (group.predicted_gain > 1 and group.fluid_bound >= group.predicted_gain * 0.97)
        prediction_speeds = predict_group(group.jobs, plan.policy).speeds.values()
        assert all(speed <= 1 + 1e-9 for speed in prediction_speeds)
    assert plan_objective([group.jobs for group in plan.groups]) >= -1e-9
    assert plan.predicted_aggregate_gain >= 1 - 1e-12
    assert plan.predicted_makespan_ms <= plan.sequential_makespan_ms + 1e-6
    if algo == "none":
        assert plan.predicted_aggregate_gain == pytest.approx(1.0)
    waves = sorted({group.wave for group in plan.groups})
    assert waves == list(range(len(waves)))


@FAST
@given(job_lists(max_jobs=10, devices=(1, 2, 4)), hosts_strategy, st.sampled_from(sorted(grouping.ALGORITHMS)))
def test_plan_file_round_trip(jobs, hosts, algo):
    plan = make_plan(jobs, hosts, device_memory_gb=60, algo=algo)
    recipes = {j.name: f"recipes/{j.name}.toml" for j in plan.jobs[::2]}
    document = json.loads(json.dumps(plan_to_dict(plan, recipes), allow_nan=False))  # as `xover plan` writes it
    again = plan_from_dict(document)
    assert again == Plan(**{**plan.__dict__, "recipes": recipes})
    assert plan_to_dict(again) == document


@FAST
@given(job_lists(max_jobs=10, devices=(1, 2, 4), min_jobs=1), hosts_strategy)
def test_a_plan_file_knows_when_its_jobs_were_edited_after_its_predictions(jobs, hosts):
    """A plan file whose job lengths were edited by hand, then run: the run and its report set the makespan
    predicted for the old lengths beside the one measured for the new."""
    plan = make_plan(jobs, hosts, device_memory_gb=60)
    document = json.loads(json.dumps(plan_to_dict(plan), allow_nan=False))  # as `xover plan` writes it
    assert plan.predicted_for_its_jobs and plan_from_dict(document).predicted_for_its_jobs
    if plan.jobs:
        edited = copy.deepcopy(document)
        edited["jobs"][plan.jobs[0].name]["iterations"] += 1
        assert not plan_from_dict(edited).predicted_for_its_jobs


def test_jobs_whose_picked_group_loses_are_grouped_again_with_a_partner_that_gains():
    """The grouping picks by the fluid bound: here b + c (1.94), which c's interference makes lose (1.02), and a,
    left alone beside them, stayed alone with b and c; a + b gains 1.46. One job more in a plan of a pair that
    gained 1.44 left every job alone (helper-93's probe, 2026-12-07)."""
    a, b = job("a", 60, 40), job("b", 20, 80, link_ms=80)
    c = job("c", 85, 15, interference=30.0, interference_link_share=0.8)
    assert predict_group([b, c]).fluid_bound > predict_group([a, b]).fluid_bound
    assert predict_group([b, c]).gain < 1.05 < predict_group([a, b]).gain
    plan = make_plan([a, b, c], [("localhost", 1)])
    assert sorted(sorted(job.name for job in group.jobs) for group in plan.groups) == [["a", "b"], ["c"]]
    [pair] = [group for group in plan.groups if len(group.jobs) == 2]
    assert pair.predicted_gain == pytest.approx(predict_group([a, b]).gain, rel=0.02)
    # and c says why it is alone ("one job: nothing to share" read as if it had been given on its own)
    [alone] = [group for group in plan.groups if len(group.jobs) == 1]
    assert alone.sharing_reason.startswith("not grouped: no group with it was predicted to gain more than 5%")
    assert make_plan([c], [("localhost", 1)]).groups[0].sharing_reason == "one job: nothing to share"
    # nothing lost, nothing grouped again: the plan of the pair alone is the same
    assert [[job.name for job in group.jobs] for group in make_plan([a, b], [("localhost", 1)]).groups] == [["a", "b"]]


def test_plan_for_the_documented_example():
    jobs = [
        JobProfile("resnet", 2, 130.0, 40.0, 0.2, data_ms=1.0),
        JobProfile("vgg", 2, 60.0, 150.0, 10.0),
        JobProfile("huge", 8, 100.0, 10.0, 1.0),
    ]
    plan = make_plan(jobs, local_hosts(2), device_memory_gb=16)
    document = plan_to_dict(plan, {"resnet": "recipes/resnet.toml"})
    assert document["format"] == PLAN_FORMAT
    assert document["hosts"] == [["localhost", 2]]
    assert document["unplaced"] == [{"name": "huge", "reason": "needs 8 devices, 2 exist"}]
    [group] = document["groups"]
    assert group["jobs"] == ["resnet", "vgg"] and group["devices"] == ["localhost:0", "localhost:1"]
    assert group["wave"] == 0
    prediction = predict_group(jobs[:2], "work-conserving")
    assert group["predicted_speed"] == prediction.speeds and group["predicted_gain"] == prediction.gain
    assert group["predicted_period_ms"] == max(prediction.iteration_ms.values())
    # resnet's turn waits for vgg's compute; resnet's all-reduce goes first on the link, vgg's waits for it
    assert 0.6 < prediction.speeds["resnet"] < 0.9 and 0.75 < prediction.speeds["vgg"] <= 1.0
    assert 1.5 < prediction.gain < group["fluid_bound"] == pytest.approx(fluid_gain(jobs[:2]))
    assert document["jobs"]["resnet"]["recipe"] == "recipes/resnet.toml"
    assert "recipe" not in document["jobs"]["vgg"]
    assert document["predicted_aggregate_gain"] == pytest.approx(100 * (171 + 210) / prediction.duration_ms)
    assert document["sequential_makespan_ms"] == 100 * (171 + 210)


def test_no_jobs_make_an_empty_plan():
    plan = make_plan([], local_hosts(1))
    assert plan.groups == [] and plan.predicted_aggregate_gain == 1.0 and plan.predicted_makespan_ms == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"algo": "magic"}, "unknown grouping algorithm"),
        ({"max_group": 0}, "max group size"),
        ({"min_gain_margin": -0.1}, "margin"),
        ({"device_memory_gb": 0}, "device memory"),
        ({"hosts": []}, "no hosts"),
        ({"hosts": [("a", 2), ("a", 2)]}, "listed twice"),
        ({"hosts": [("a", 0)]}, "whole number >= 1"),
        ({"hosts": [("a:b", 1)]}, "':'"),
        ({"jobs": [job("x", 1, 1), job("x", 2, 2)]}, "unique"),
    ],
)
def test_bad_plan_inputs_are_user_errors(arguments, message):
    call = {"jobs": [job("a", 10, 10)], "hosts": local_hosts(1), **arguments}
    with pytest.raises(PlanInputError, match=message) as raised:
        make_plan(**call)
    assert isinstance(raised.value, XoverError)


# ---------------------------------------------------------------- plan file errors


def _valid_document() -> dict:
    jobs = [job("a", 100, 10, devices=2), job("b", 10, 100, devices=2), job("c", 50, 50, devices=1)]
    return plan_to_dict(make_plan(jobs, [("h", 2)], algo="matching"))


def _set(path: str, value):
    def edit(document: dict) -> None:
        *parents, last = path.split("/")
        target = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is _DELETE:
            del target[int(last) if isinstance(target, list) else last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return edit


_DELETE = object()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_set("format", "xover-plan/0"), "format"),
        (_set("groups", _DELETE), "groups"),
        (_set("groups", {}), "groups"),
        (_set("algo", 3), "algo"),
        (_set("hosts", []), "hosts"),
        (_set("hosts/0", ["h"]), "hosts[0]"),
        (_set("hosts/0/1", 0), "hosts[0]"),
        (_set("jobs/a/devices", 0), "jobs.a.devices"),
        (_set("jobs/a/comm_ms", "fast"), "jobs.a.comm_ms"),
        (_set("jobs/a/comm_ms", -5), "jobs.a.comm_ms"),
        (_set("jobs/a/iterations", 1.5), "jobs.a.iterations"),
        (_set("jobs/a/memory_gb", _DELETE), "jobs.a.memory_gb"),
        (_set("jobs/z", {"devices": 1, "compute_ms": 1, "comm_ms": 1, "memory_gb": 1}), "jobs.z"),
        (_set("groups/0/jobs", ["a", "nope"]), "groups[0].jobs"),
        (_set("groups/0/jobs", []), "groups[0].jobs"),
        (_set("groups/0/jobs", ["a", "a"]), "groups[0].jobs"),
        (_set("groups/0/jobs", ["a", "c"]), "groups[0].jobs"),
        (_set("groups/1/jobs", ["c", "a"]), "groups[1].jobs"),
        (_set("groups/0/devices", ["h:0"]), "groups[0].devices"),
        (_set("groups/0/devices", ["h:0", "h:5"]), "groups[0].devices"),
        (_set("groups/0/devices", ["h:0", "h:0"]), "groups[0].devices"),
        (_set("groups/0/devices", ["h:0", "other:1"]), "groups[0].devices"),
        (_set("groups/1/wave", 0), "groups[1].devices"),
        (_set("groups/0/wave", -1), "groups[0].wave"),
        (_set("groups/0/wave", "0"), "groups[0].wave"),
        (_set("groups/0/predicted_gain", None), "groups[0].predicted_gain"),
        (_set("groups/0/predicted_slowdown", {"a": 1.0}), "groups[0].predicted_slowdown"),
        (_set("groups/0/predicted_slowdown/a", "x"), "groups[0].predicted_slowdown.a"),
        (_set("unplaced", [{"name": "x"}]), "unplaced[0].reason"),
        (_set("predicted_makespan_ms", float("nan")), "predicted_makespan_ms"),
        # contradictions `xover run` would resolve its own way: a job both run and unplaced; a later wave listed
        # before an earlier one on the same device (run starts groups in the file's order there); a way marked
        # measured without a figure (an adaptive group looked it up: a KeyError's traceback)
        (_set("unplaced", [{"name": "a", "reason": "needs 8 devices, 2 exist"}]), "unplaced[0].name"),
        (_set("groups/0/wave", 2), "groups[1].wave"),
        (_set("groups/0/predicted_from", {"crossover": "measured", "mps": "measured"}), "groups[0].predicted_from"),
        (_set("groups/0/sharing", "alone"), "groups[0].sharing"),
        # a link no run can shape: refused where `xover run PLAN` used it, naming neither file nor field
        (_set("link", "fast"), "link"),
        (_set("link", "100tbit"), "link"),
    ],
)
def test_plan_file_errors_name_the_field(edit, field):
    document = _valid_document()
    assert [group["jobs"] for group in document["groups"]] == [["a", "b"], ["c"]]
    assert [group["wave"] for group in document["groups"]] == [0, 1]
    broken = copy.deepcopy(document)
    edit(broken)
    with pytest.raises(PlanFormatError, match=f"plan field '{_escape(field)}'"):
        plan_from_dict(broken)


def test_plan_file_contradictions_say_what_to_do():
    document = _valid_document()
    document["groups"][0]["wave"] = 2
    with pytest.raises(PlanFormatError, match=r"wave 1 comes before wave 2 of groups\[0\], which is listed earlier "
                       r"and uses h:0 too: .* list the groups in the order of their waves"):
        plan_from_dict(document)
    document = _valid_document()
    document["groups"][0]["predicted_by_sharing"] = {"concurrent": 1.7}
    document["groups"][0]["predicted_from"]["crossover"] = "measured"
    with pytest.raises(PlanFormatError, match="marks 'crossover' measured, but predicted_by_sharing has no gain "
                       "for 'crossover': add the measured gain there, or remove 'crossover' here"):
        plan_from_dict(document)
    document = _valid_document()
    document["groups"][0]["sharing"] = "alone"
    with pytest.raises(PlanFormatError, match="'alone' is for a group of one job, and this one has 2: choose"):
        plan_from_dict(document)


def test_plan_file_edits_a_user_may_make_are_taken():
    """A hand-edited plan that says one thing only runs: another way of sharing for a group (predicted or not),
    a way left in a one-job group (it runs alone all the same), a gap between waves, a wave moved later with the
    groups still listed in wave order, groups of later waves on other devices listed first, a figure
    marked simulated, removed, or a count of comparisons left without its figure."""
    edits = [
        _set("groups/0/sharing", "concurrent"),
        _set("groups/0/sharing", "mps"),  # not among the ways it predicted
        _set("groups/0/sharing", "adaptive"),
        _set("groups/1/sharing", "concurrent"),
        _set("groups/1/wave", 5),
        _set("groups/0/predicted_from/crossover", "simulated"),
        _set("groups/0/predicted_by_sharing", {"concurrent": 1.7}),  # crossover's figure removed, marked simulated
        _set("groups/0/measured_runs", {"mps": 2}),  # a count of a figure not there: nothing reads it
    ]
    for edit in edits:
        document = _valid_document()
        edit(document)
        plan_from_dict(document)
    document = _valid_document()
    document["hosts"] = [["h", 2], ["g", 1]]
    document["groups"][1].update(devices=["g:0"], wave=0)  # c moved to wave 0 on another host, listed after a, b
    document["groups"][0]["wave"] = 1  # and a, b to wave 1: on devices c does not use
    assert [group.wave for group in plan_from_dict(document).groups] == [1, 0]
    assert plan_from_dict(_with(_valid_document(), "groups/1/sharing", "mps")).groups[1].sharing == "alone"


def _with(document: dict, path: str, value) -> dict:
    _set(path, value)(document)
    return document


def _escape(text: str) -> str:
    return text.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")


def test_plan_file_must_be_an_object():
    with pytest.raises(PlanFormatError, match="plan"):
        plan_from_dict([1, 2])


def test_plan_file_defaults_for_optional_job_fields():
    document = _valid_document()
    del document["jobs"]["c"]["data_ms"], document["jobs"]["c"]["iterations"]
    plan = plan_from_dict(document)
    [c] = [j for j in plan.jobs if j.name == "c"]
    assert (c.data_ms, c.iterations) == (0.0, 100)
    assert math.isclose(plan.groups[1].predicted_period_ms, 100)


def test_on_a_gpu_a_job_yields_its_turn_only_when_its_compute_is_done():
    """The CPU queues a GPU job's kernels and passes its layer boundaries long before they run: the
    planner takes the whole compute as its yield latency there (the H100 pair of docs/gpu.md)."""
    from xover.plan.model import DEFAULT_CHECKPOINT_MS, checkpoint_interval_ms
    from xover.plan.simulate import SimJob, simulate

    assert checkpoint_interval_ms(175.6, 16) == 175.6 / 16
    assert checkpoint_interval_ms(175.6, None) == DEFAULT_CHECKPOINT_MS
    assert checkpoint_interval_ms(175.6, 16, on_gpu=True) == checkpoint_interval_ms(175.6, None, on_gpu=True) == 175.6
    assert checkpoint_interval_ms(175.6, 16, on_gpu=True, synced=True) == 175.6 / 16  # XOVER_CHECKPOINT_SYNC=1

    def gain(checkpoint_ms):
        script = SimJob("script", compute_ms=175.6, comm_ms=126.0, link_ms=134.5, checkpoint_ms=checkpoint_ms)
        mlp = SimJob("mlp", compute_ms=3.6, comm_ms=73.0, link_ms=73.0, checkpoint_ms=0.26)
        return sum(job.speed for job in simulate([script, mlp]).jobs)

    # measured on the H100 (crossover, work-conserving): 1.21x of the two jobs one after another
    assert abs(gain(checkpoint_interval_ms(175.6, 16, on_gpu=True)) - 1.21) < 0.05
    # ... and with each boundary waiting for the kernels (XOVER_CHECKPOINT_SYNC=1, 13 boundaries): 1.39x
    assert abs(gain(checkpoint_interval_ms(175.6, 13, on_gpu=True, synced=True)) - 1.39) < 0.06


def test_a_plan_files_group_of_more_jobs_than_a_turn_server_serves_is_refused():
    """A group of 255 jobs written into a plan file was taken; its turn server refuses slot 254 once the run started."""
    names = [f"j{k}" for k in range(255)]
    document = plan_to_dict(make_plan([job(name, 10, 10, devices=1) for name in names], [("h", 1)], algo="none"))
    group = document["groups"][0]
    group.update(jobs=names, predicted_slowdown=dict.fromkeys(names, 1.0))
    document["groups"] = [group]
    with pytest.raises(PlanFormatError, match=r"plan field 'groups\[0\]\.jobs': names 255 jobs; a group holds at most "
                                              r"254, as many as its turn server serves"):
        plan_from_dict(document)


def test_a_script_jobs_iterations_edited_without_where_the_script_stops_is_refused():
    # the run stopped the script at script.iterations: an edited jobs.X.iterations changed only the prediction
    document = _valid_document()
    document["jobs"]["a"]["iterations"] = 300
    document["jobs"]["a"]["script"] = {"path": "/x/train.py", "args": [], "engine": "horovod", "sha256": "abc",
                                       "iterations": 200, "env": {}}
    with pytest.raises(PlanFormatError, match=r"plan field 'jobs\.a\.iterations': 300, but jobs\.a\.script\."
                                              r"iterations \(where the script is stopped\) is 200: give both the same"):
        plan_from_dict(document)
    document["jobs"]["a"]["script"]["iterations"] = 300
    assert plan_from_dict(document).scripts["a"].iterations == 300
    document["jobs"]["a"]["script"]["iterations"] = None  # the script's own end: the figure only predicts
    assert [job.iterations for job in plan_from_dict(document).jobs if job.name == "a"] == [300]


def test_a_groups_speeds_cost_no_duration_or_fluid_bound_until_read(monkeypatch):
    # a replay looks at a group's speeds whenever its jobs change: its duration (one simulation per job's end)
    # and fluid bound (a linear program) are worked out only where read, from the jobs as they were predicted
    import xover.plan.predict as predict

    calls = {"duration": 0, "fluid": 0}
    duration, fluid = predict.group_duration_ms, predict.fluid_gain

    def counted_duration(*args, **kwargs):
        calls["duration"] += 1
        return duration(*args, **kwargs)

    def counted_fluid(*args, **kwargs):
        calls["fluid"] += 1
        return fluid(*args, **kwargs)

    monkeypatch.setattr(predict, "group_duration_ms", counted_duration)
    monkeypatch.setattr(predict, "fluid_gain", counted_fluid)
    jobs = [job("short", 100, 10, iterations=10), job("long", 10, 100, iterations=30)]
    prediction = predict_group(jobs)
    assert prediction.gain > 1 and calls == {"duration": 0, "fluid": 0}
    jobs.append(job("third", 50, 50, iterations=99))  # the caller's list changes after the prediction
    assert prediction.duration_ms == pytest.approx(duration(jobs[:2]))
    assert prediction.fluid_bound == pytest.approx(fluid(jobs[:2]))
    assert prediction.duration_ms == prediction.duration_ms and calls == {"duration": 1, "fluid": 1}
