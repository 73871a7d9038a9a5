"""bench/cluster_plan.py's figures from what `xover run --json` prints (the bench itself needs an emulated
cluster): each mode's measured makespan, and each group's gain over its jobs alone."""

from conftest import load_bench

from xover.plan import JobProfile, local_hosts, make_plan
from xover.results import RunResult


def _job(name: str, mode: str, group: int, start: str, end: str, shared: float, alone: float) -> dict:
    return RunResult(name=name, mode=mode, group=group, status="finished", started_at=f"2026-11-28 10:{start}",
                     ended_at=f"2026-11-28 10:{end}", samples_per_s=alone, samples_per_s_shared=shared).to_json()


def test_makespans_and_group_gains_from_the_runs_json():
    bench = load_bench("cluster_plan")
    plan = make_plan([JobProfile("a", 1, 100.0, 50.0, 1.0), JobProfile("b", 1, 60.0, 120.0, 1.0)], local_hosts(1))
    crossover = {"jobs": [_job("a", "crossover", 0, "00:00", "01:30", shared=60.0, alone=None),
                          _job("b", "crossover", 0, "00:05", "01:40", shared=40.0, alone=None)]}
    sequential = {"jobs": [_job("a", "sequential", 0, "02:00", "03:00", shared=None, alone=100.0),
                           _job("b", "sequential", 0, "03:00", "03:50", shared=None, alone=80.0)]}
    assert bench.makespan(crossover, plan) == 100.0  # first start to last end
    assert bench.makespan(sequential, plan) == 110.0
    assert bench.group_gains(crossover, sequential) == {frozenset({"a", "b"}): 60.0 / 100.0 + 40.0 / 80.0}
