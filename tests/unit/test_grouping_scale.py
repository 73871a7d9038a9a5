"""matching at cluster scale: exact on copies of a few kinds of job and on distinct jobs (against
brute force), certified bounds on 2,000-job traces, and the rules kept on every path.

Times are measured in bench/plan_scale.py, not asserted here (the machine is shared)."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from contextlib import ExitStack
from unittest.mock import patch

import numpy as np
import pytest
from conftest import load_bench
from hypothesis import given, settings
from hypothesis import strategies as st

from xover.plan import GroupingRules, JobProfile, fluid_gain, fluid_speeds, grouping, plan_objective, time_saved_ms

bench = load_bench("plan_scale")  # the traces the bench reports on
RULES = bench.RULES  # 80 GB devices, pairs

profiles = st.builds(
    JobProfile,
    name=st.just("kind"),
    devices=st.sampled_from([1, 1, 2]),
    compute_ms=st.integers(min_value=1, max_value=200),
    comm_ms=st.integers(min_value=0, max_value=200),
    memory_gb=st.integers(min_value=0, max_value=40),
    data_ms=st.sampled_from([0, 0, 5]),
)

protected_profiles = st.builds(
    JobProfile,
    name=st.just("kind"),
    devices=st.just(1),
    compute_ms=st.floats(min_value=0.5, max_value=300),
    comm_ms=st.floats(min_value=0, max_value=300),
    memory_gb=st.floats(min_value=0, max_value=50),
    data_ms=st.sampled_from([0.0, 2.5]),
    link_ms=st.one_of(st.none(), st.floats(min_value=0, max_value=400)),
    comm_cpu=st.sampled_from([0.0, 0.0, 0.3, 1.0]),
    max_slowdown=st.one_of(st.none(), st.floats(min_value=1, max_value=3)),
)

rules_strategy = st.builds(
    GroupingRules,
    max_group=st.just(2),
    device_memory_gb=st.sampled_from([None, 40, 60]),
    min_gain_margin=st.sampled_from([0.0, 0.05, 0.2]),
)


@st.composite
def copies_of_few_kinds(draw, max_kinds: int = 4, max_copies: int = 7, kinds=profiles) -> list[JobProfile]:
    """Jobs that are copies of a few profiles (differing in name and iterations), shuffled."""
    drawn = draw(st.lists(kinds, min_size=1, max_size=max_kinds))
    jobs = []
    for kind in drawn:
        for _ in range(draw(st.integers(min_value=1, max_value=max_copies))):
            jobs.append(_copy(kind, f"j{len(jobs)}", draw(st.integers(min_value=1, max_value=500))))
    return draw(st.permutations(jobs))


def _copy(kind: JobProfile, name: str, iterations: int) -> JobProfile:
    return JobProfile(name=name, devices=kind.devices, compute_ms=kind.compute_ms, comm_ms=kind.comm_ms,
                      memory_gb=kind.memory_gb, data_ms=kind.data_ms, iterations=iterations, link_ms=kind.link_ms,
                      comm_cpu=kind.comm_cpu, max_slowdown=kind.max_slowdown)


def _pair_allowed(a: JobProfile, b: JobProfile, rules: GroupingRules) -> bool:
    memory_fits = rules.device_memory_gb is None or a.memory_gb + b.memory_gb <= rules.device_memory_gb
    return a.devices == b.devices and memory_fits and fluid_gain([a, b]) > 1 + rules.min_gain_margin


def _best_pairing(jobs: Sequence[JobProfile], rules: GroupingRules) -> float:
    """Brute force over pairings, on the test's own notion of identical jobs: a state is how many of
    each distinct profile are left; the first one left stays alone or pairs with one of any profile.
    Jobs needing different device counts never pair, so each device count is solved apart."""
    by_devices: dict[int, list[JobProfile]] = {}
    for job in jobs:
        by_devices.setdefault(job.devices, []).append(job)
    return sum(_best_pairing_one_device_count(bucket, rules) for bucket in by_devices.values())


def _best_pairing_one_device_count(jobs: Sequence[JobProfile], rules: GroupingRules) -> float:
    distinct: dict[tuple, JobProfile] = {}
    counts: dict[tuple, int] = {}
    for job in jobs:
        key = (job.devices, job.compute_ms, job.comm_ms, job.memory_gb, job.data_ms, job.link_ms, job.comm_cpu,
               job.max_slowdown)
        distinct.setdefault(key, job)
        counts[key] = counts.get(key, 0) + 1
    kinds = list(distinct.values())
    saving = {
        (s, t): time_saved_ms([kinds[s], kinds[t]])
        for s in range(len(kinds)) for t in range(s, len(kinds)) if _pair_allowed(kinds[s], kinds[t], rules)
    }

    @functools.cache
    def best(left: tuple[int, ...]) -> float:
        first = next((kind for kind, count in enumerate(left) if count), None)
        if first is None:
            return 0.0
        rest = list(left)
        rest[first] -= 1
        value = best(tuple(rest))
        for partner in range(first, len(left)):
            if rest[partner] and (first, partner) in saving:
                after = list(rest)
                after[partner] -= 1
                value = max(value, saving[(first, partner)] + best(tuple(after)))
        return value

    return best(tuple(counts.values()))


def _check_groups(groups, jobs: Sequence[JobProfile], rules: GroupingRules) -> None:
    assert sorted(job.name for group in groups for job in group) == sorted(job.name for job in jobs)
    for group in groups:
        assert 1 <= len(group) <= rules.max_group
        assert len({job.devices for job in group}) == 1
        if len(group) > 1:
            if rules.device_memory_gb is not None:
                assert sum(job.memory_gb for job in group) <= rules.device_memory_gb + 1e-9
            assert fluid_gain(group) > 1 + rules.min_gain_margin
            speeds = fluid_speeds(group)
            assert speeds is not None  # every protection can be met
            for job, speed in zip(group, speeds):
                assert not job.max_slowdown or speed >= 1 / job.max_slowdown - 1e-9


def _check_bounds(result: grouping.MatchingResult, optimum: float | None = None) -> None:
    achieved = plan_objective(result.groups)
    for round_ in result.rounds:
        assert round_.saved_ms <= round_.upper_bound_ms * (1 + 1e-9) + 1e-9
    if result.rounds:
        first = result.rounds[0]
        if optimum is not None:
            assert first.upper_bound_ms >= optimum * (1 - 1e-9) - 1e-9  # the certificate is a real bound
        assert sum(round_.saved_ms for round_ in result.rounds) == pytest.approx(achieved, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------- exact against brute force

# every way the solver can be made to go: all pairs at once; a working set from the assignment's
# duals, grown by pricing; a working set from each kind's best partners; a single starting partner
SOLVER_PATHS = {
    "all pairs": {},
    "assignment duals": {"ALL_COLUMNS_LIMIT": 0},
    "best partners": {"ALL_COLUMNS_LIMIT": 0, "ASSIGNMENT_LIMIT": 0},
    "one partner, one entering": {"ALL_COLUMNS_LIMIT": 0, "ASSIGNMENT_LIMIT": 0, "STARTING_PARTNERS": 1,
                                  "ENTERING_PER_KIND": 0},
}


def _solved(switches: dict, jobs, rules):
    """matching_with_bounds with the module's switches (a solver path, SOLVER_PATHS) set for the call."""
    with ExitStack() as stack:
        for name, value in switches.items():
            stack.enter_context(patch.object(grouping, name, value))
        return grouping.matching_with_bounds(jobs, rules)


@pytest.mark.parametrize("path", SOLVER_PATHS)
@settings(max_examples=60, deadline=None)
@given(jobs=copies_of_few_kinds(), rules=rules_strategy)
def test_matching_is_optimal_on_copies_of_few_kinds(path, jobs, rules):
    result = _solved(SOLVER_PATHS[path], jobs, rules)
    _check_groups(result.groups, jobs, rules)
    optimum = _best_pairing(jobs, rules)
    assert plan_objective(result.groups) == pytest.approx(optimum, abs=1e-6)
    assert all(round_.proven_optimal for round_ in result.rounds)
    _check_bounds(result, optimum)


@pytest.mark.parametrize("path", SOLVER_PATHS)
@settings(max_examples=60, deadline=None)
@given(jobs=copies_of_few_kinds(max_kinds=11, max_copies=1), rules=rules_strategy)
def test_matching_is_optimal_on_distinct_jobs(path, jobs, rules):
    result = _solved(SOLVER_PATHS[path], jobs, rules)
    _check_groups(result.groups, jobs, rules)
    optimum = _best_pairing(jobs, rules)
    assert plan_objective(result.groups) == pytest.approx(optimum, abs=1e-6)
    _check_bounds(result, optimum)


@settings(max_examples=60, deadline=None)
@given(jobs=copies_of_few_kinds(max_kinds=5, max_copies=4, kinds=protected_profiles), rules=rules_strategy)
def test_matching_is_optimal_with_protections_link_and_cpu_costs(jobs, rules):
    result = grouping.matching_with_bounds(jobs, rules)
    _check_groups(result.groups, jobs, rules)
    optimum = _best_pairing(jobs, rules)
    assert plan_objective(result.groups) == pytest.approx(optimum, abs=1e-6)
    _check_bounds(result, optimum)


@settings(max_examples=60, deadline=None)
@given(jobs=copies_of_few_kinds(max_kinds=8, max_copies=3), rules=rules_strategy)
def test_the_bound_holds_when_the_integer_program_may_not_grow(jobs, rules):
    # Without room for the pairs that could beat the first answer, the round is not proven
    # optimal, but the rules still hold and the bound still bounds the optimum.
    result = _solved({"ALL_COLUMNS_LIMIT": 0, "ASSIGNMENT_LIMIT": 0, "STARTING_PARTNERS": 1, "MILP_COLUMN_LIMIT": 0},
                     jobs, rules)
    _check_groups(result.groups, jobs, rules)
    optimum = _best_pairing(jobs, rules)
    assert plan_objective(result.groups) <= optimum + 1e-6
    _check_bounds(result, optimum)


@settings(max_examples=100, deadline=None)
@given(st.lists(protected_profiles, min_size=2, max_size=12), st.sampled_from([None, 40.0, 60.0]),
       st.sampled_from([0.0, 0.05, 0.2]))
def test_vectorised_pair_savings_are_the_scalar_rules_bit_for_bit(jobs, memory, margin):
    # Above the diagonal bit for bit; below it the mirror, since the scalar rules themselves may
    # differ in the last bits when the two jobs swap places (their polygon has tied vertices).
    rules = GroupingRules(device_memory_gb=memory, min_gain_margin=margin)
    saving = grouping._single_job_savings(jobs, rules)
    assert np.array_equal(saving, saving.T)
    for i, a in enumerate(jobs):
        for j, b in enumerate(jobs[i + 1:], start=i + 1):
            merged = grouping._merge(grouping._Group.of(a, i), grouping._Group.of(b, j), rules)
            assert saving[i, j] == (merged[0] if merged is not None else 0.0)


# ---------------------------------------------------------------- copies

def _job(name: str, compute: float, comm: float, iterations: int = 100, **extra) -> JobProfile:
    return JobProfile(name=name, devices=1, compute_ms=compute, comm_ms=comm, memory_gb=1.0, iterations=iterations,
                      **extra)


def test_an_odd_number_of_copies_leaves_one_alone():
    jobs = [_job(f"balanced{index}", 100, 100) for index in range(5)]  # two copies together: gain 2
    result = grouping.matching_with_bounds(jobs, GroupingRules())
    assert sorted(len(group) for group in result.groups) == [1, 2, 2]
    assert result.rounds[0].proven_optimal
    assert result.rounds[0].upper_bound_ms == pytest.approx(2 * time_saved_ms(jobs[:2]), rel=1e-6)


def test_copies_pair_long_runs_with_long_runs():
    jobs = [_job("c-short", 100, 10, 10), _job("c-long", 100, 10, 900), _job("m-long", 10, 100, 800),
            _job("m-short", 10, 100, 20)]
    groups = grouping.matching(jobs, GroupingRules())
    assert sorted(sorted(job.name for job in group) for group in groups) == [["c-long", "m-long"],
                                                                              ["c-short", "m-short"]]


def test_copies_of_a_few_models_defeat_the_candidate_graph_but_not_matching():
    # The issue: each job's 12 most complementary candidates are all copies of one partner
    # model, so the sparse graph misses the pairs the optimum needs once those copies run out.
    jobs = bench.typed_jobs(100, random.Random(0))
    result = grouping.matching_with_bounds(jobs, RULES)
    candidate_graph = grouping.matching(jobs, RULES, dense_graph_limit=0, candidates_per_group=12)
    assert plan_objective(result.groups) == pytest.approx(_best_pairing(jobs, RULES), rel=1e-9)
    assert plan_objective(candidate_graph) < 0.97 * plan_objective(result.groups)


@settings(max_examples=40, deadline=None)
@given(jobs=copies_of_few_kinds(max_kinds=4, max_copies=5), rules=rules_strategy,
       max_group=st.integers(min_value=3, max_value=4))
def test_larger_groups_of_copies_keep_the_rules_and_only_add_savings(jobs, rules, max_group):
    bigger = GroupingRules(max_group, rules.device_memory_gb, rules.min_gain_margin)
    result = grouping.matching_with_bounds(jobs, bigger)
    _check_groups(result.groups, jobs, bigger)
    _check_bounds(result)
    assert plan_objective(result.groups) >= _best_pairing(jobs, rules) - 1e-6


# ---------------------------------------------------------------- 2,000 jobs


@pytest.mark.parametrize("trace", sorted(bench.TRACES))
def test_two_thousand_jobs_reach_the_certified_bound(trace):
    jobs = bench.TRACES[trace](2000, random.Random(7))
    result = grouping.matching_with_bounds(jobs, RULES)
    _check_groups(result.groups, jobs, RULES)
    _check_bounds(result)
    first = result.rounds[0]
    assert plan_objective(result.groups) >= 0.999 * first.upper_bound_ms
    assert first.proven_optimal


def test_typed_trace_collapses_to_its_models():
    jobs = bench.typed_jobs(2000, random.Random(3))
    assert len({grouping._job_kind(job) for job in jobs}) <= len(bench.MODELS)
    result = grouping.matching_with_bounds(jobs, RULES)
    assert plan_objective(result.groups) == pytest.approx(result.rounds[0].upper_bound_ms, rel=1e-9)


def test_the_assignment_duals_are_optimal_for_the_lp():
    # Their bound (a feasible dual of the fractional matching LP) equals half the assignment's weight.
    from scipy.optimize import linear_sum_assignment

    jobs = bench.random_jobs(300, random.Random(11), devices=(1,))
    saving = grouping._single_job_savings(jobs, RULES)
    counts = np.ones(len(jobs), dtype=np.int64)
    duals = grouping._assignment_duals(counts, saving)
    reduced = duals[:, None] + duals[None, :] - saving
    np.fill_diagonal(reduced, 0.0)
    assert reduced.min() >= -1e-9
    rows, columns = linear_sum_assignment(saving, maximize=True)
    assert duals.sum() == pytest.approx(saving[rows, columns].sum() / 2, rel=1e-9)
