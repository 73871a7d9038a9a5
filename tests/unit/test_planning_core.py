"""The planning core: `xover plan` is the decision step at t = 0 with every job queued; `xover run` starts
units by the step's start rule; a job instance is apart from its profile."""

from __future__ import annotations

import random

import pytest

from xover.plan import JobProfile, make_plan
from xover.plan.decide import Queued, StepRules, decide, ready_to_start
from xover.plan.grouping import GroupingRules
from xover.plan.instances import JobInstance
from xover.plan.predict import pick_sharing, predict_considered
from xover.plan.state import FreeDevices
from xover.plan.throughput import XoverModel


def _jobs(rng: random.Random, count: int) -> list[JobProfile]:
    jobs = []
    for index in range(count):
        compute, comm = (rng.uniform(100, 300), rng.uniform(5, 80)) if rng.random() < 0.5 else (
            rng.uniform(10, 80),
            rng.uniform(80, 300),
        )
        jobs.append(
            JobProfile(f"j{index}", rng.choice([1, 2, 4]), round(compute, 1), round(comm, 1), rng.uniform(1, 30),
                       iterations=rng.randint(50, 500))
        )
    return jobs


@pytest.mark.parametrize("seed", range(6))
def test_the_plans_first_wave_is_what_the_step_starts_at_t0(seed):
    rng = random.Random(seed)
    jobs = _jobs(rng, rng.randint(4, 24))
    hosts = [("a", 4), ("b", 4)] if seed % 2 else [("a", 8)]
    max_group = rng.choice([2, 3])
    plan = make_plan(jobs, hosts, device_memory_gb=64.0, max_group=max_group)
    rules = StepRules(
        model=XoverModel(plan.policy),
        grouping=GroupingRules(max_group, 64.0),
        order="longest-first",
        candidates="all",
    )
    free = FreeDevices(hosts)
    step = decide([Queued(JobInstance.of_profile(job), job.iterations, i) for i, job in enumerate(jobs)], free, rules)
    wave0 = [([job.name for job in group.jobs], group.devices) for group in plan.groups if group.wave == 0]
    started = [(start.unit.names, free.names(start.devices)) for start in step.starts]
    assert sorted(started) == sorted(wave0)
    assert [unit.names for unit in step.units] == [[job.name for job in group.jobs] for group in _by_order(plan)]


def _by_order(plan):
    """The plan's groups in the order they were placed (longest first): by wave they are sorted stably."""
    return sorted(plan.groups, key=lambda group: -group.predicted_duration_ms)


def test_the_start_rule_keeps_the_order_and_waits_for_earlier_units():
    a, b, c, d = frozenset({"a"}), frozenset({"b"}), frozenset({"a", "c"}), frozenset({"c"})
    # a is busy: the unit on a waits; the one on a and c waits for it and holds c, so the one on c waits too
    assert ready_to_start([a, b, c, d], busy={"a"}) == [1]
    assert ready_to_start([b, d], busy=set()) == [0, 1]
    assert ready_to_start([a, b], busy=set(), exclusive=True) == [0]
    assert ready_to_start([a, b], busy=set(), exclusive=True, running=True) == []


def test_xovers_model_predicts_as_the_plan_picks():
    jobs = [JobProfile("c", 1, 120, 10, 1), JobProfile("m", 1, 20, 150, 1, link_ms=150)]
    predictions, sources = predict_considered(jobs)
    picked = pick_sharing(predictions, jobs, sources).prediction
    speeds = XoverModel().predict(jobs)
    assert speeds.sharing == picked.sharing
    assert speeds.speeds == (picked.speeds["c"], picked.speeds["m"])


def test_an_instance_keeps_its_profile_apart():
    kind = JobProfile("resnet", 2, 100, 20, 4, iterations=50)
    plain = JobInstance.of_profile(kind)
    assert plain.profile() is kind  # the plan's jobs go through unchanged
    run = JobInstance("resnet#7", kind, 1000, arrival_s=30.0, devices=4, iteration_ms=150.0, max_slowdown=2.0)
    profile = run.profile(400)
    assert (profile.name, profile.devices, profile.iterations, profile.max_slowdown) == ("resnet#7", 4, 400, 2.0)
    assert (profile.compute_ms, profile.comm_ms) == (100, 20)
    assert run.work_s == 150.0 and run.alone_ms == 150.0
    with pytest.raises(ValueError, match="iterations"):
        JobInstance("x", kind, 0)
