"""How long planning takes for many jobs, and how close matching gets to the optimum.

    python bench/plan_scale.py --jobs 2000 --jobs-ffd 10000 --seed 0

Part 1, matching quality (max group 2, 80 GB devices), one line per kind of trace:
the time of the grouping alone, the time saved per period it achieves, the upper
bound certified by LP duality (equal to the optimum when the integer program proved
its answer optimal), achieved / bound, and the same for the earlier candidate-graph
heuristic (each job keeps its 12 most complementary partners) for comparison.
``--no-earlier`` skips the earlier heuristic, which takes minutes.

Traces (``TRACES``):
* typed   - a handful of models (``MODELS``), each run many times (copies differ in
            name and iterations only), as on a real cluster;
* random  - every job its own profile: half compute-heavy (compute 100-300 ms, comm
            5-80 ms), half communication-heavy (compute 10-80 ms, comm 80-300 ms);
            devices in {1, 2, 4, 8}; memory 1-40 GB;
* random, one device count - the same, all on one device: one bucket of 2,000;
* mixed   - half typed, half random.

Part 2, make_plan (grouping + placement + prediction) on random jobs: ffd on
``--jobs-ffd`` jobs, matching / ffd / none on ``--jobs``. Hosts have 8 devices
each, at least 64 hosts.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xover.plan import JobProfile, make_plan, plan_objective  # noqa: E402
from xover.plan.grouping import (  # noqa: E402
    CANDIDATES_PER_GROUP,
    DENSE_GRAPH_LIMIT,
    GroupingRules,
    candidate_graph_matching,
    matching_with_bounds,
)

DEVICE_MEMORY_GB = 80.0
DEVICES_PER_HOST = 8
RULES = GroupingRules(max_group=2, device_memory_gb=DEVICE_MEMORY_GB)

# name, devices, compute ms, communication ms, memory GB: a made-up cluster's usual models
MODELS = [
    ("resnet50", 4, 180, 40, 20),
    ("bert-large", 4, 120, 160, 30),
    ("vgg16", 4, 60, 220, 25),
    ("lstm", 4, 90, 70, 10),
    ("gpt-1b", 8, 200, 120, 40),
    ("dlrm", 8, 30, 200, 30),
    ("vit-l", 8, 160, 50, 35),
    ("t5-base", 2, 150, 30, 30),
    ("ncf", 2, 20, 150, 8),
    ("yolo", 2, 100, 60, 16),
]


def random_jobs(count: int, rng: random.Random, devices: tuple[int, ...] = (1, 2, 4, 8)) -> list[JobProfile]:
    jobs = []
    for index in range(count):
        if rng.random() < 0.5:
            compute, comm = rng.uniform(100, 300), rng.uniform(5, 80)
        else:
            compute, comm = rng.uniform(10, 80), rng.uniform(80, 300)
        jobs.append(
            JobProfile(
                name=f"job{index}",
                devices=rng.choice(devices),
                compute_ms=round(compute, 1),
                comm_ms=round(comm, 1),
                memory_gb=round(rng.uniform(1, 40), 1),
                data_ms=round(rng.uniform(0, 5), 1),
                iterations=rng.randint(50, 500),
            )
        )
    return jobs


def typed_jobs(count: int, rng: random.Random) -> list[JobProfile]:
    """Copies of ``MODELS``, each model with its own random share of the trace."""
    shares = [rng.random() for _ in MODELS]
    jobs = []
    for index in range(count):
        name, devices, compute, comm, memory = rng.choices(MODELS, shares)[0]
        jobs.append(JobProfile(f"{name}-{index}", devices, compute, comm, memory, iterations=rng.randint(50, 500)))
    return jobs


def mixed_jobs(count: int, rng: random.Random) -> list[JobProfile]:
    typed = typed_jobs(count // 2, rng)
    distinct = [replace(job, name=f"other{index}") for index, job in enumerate(random_jobs(count - count // 2, rng))]
    jobs = typed + distinct
    rng.shuffle(jobs)
    return jobs


TRACES: dict[str, Callable[[int, random.Random], list[JobProfile]]] = {
    "typed": typed_jobs,
    "random": random_jobs,
    "random, one device count": lambda count, rng: random_jobs(count, rng, devices=(1,)),
    "mixed": mixed_jobs,
}


def hosts_for(jobs: int) -> list[tuple[str, int]]:
    return [(f"node{index:03d}", DEVICES_PER_HOST) for index in range(max(64, jobs // 32))]


def kinds_of(jobs: list[JobProfile]) -> int:
    return len(
        {(job.devices, job.memory_gb, job.solo_ms, job.device_share, job.link_share, job.max_slowdown) for job in jobs}
    )


def compare_matching(count: int, seed: int, earlier: bool) -> None:
    print(
        f"== matching, max group 2, {DEVICE_MEMORY_GB:.0f} GB devices. time: grouping only; saved: time saved per "
        f"period (ms); bound: LP-duality upper bound; fraction: saved / bound; optimal: proven by the integer "
        f"program.\n   earlier: the candidate graph ({CANDIDATES_PER_GROUP} partners per job above "
        f"{DENSE_GRAPH_LIMIT} jobs per bucket), its fraction of the same bound."
    )
    print(
        f"{'trace':<26} {'jobs':>5} {'kinds':>5} {'time s':>7} {'saved':>10} {'bound':>10} {'fraction':>9} "
        f"{'optimal':>7} {'earlier s':>9} {'earlier fraction':>16}"
    )
    for offset, (label, make) in enumerate(TRACES.items()):
        jobs = make(count, random.Random(seed + offset))
        started = time.perf_counter()
        result = matching_with_bounds(jobs, RULES)
        seconds = time.perf_counter() - started
        saved = plan_objective(result.groups)
        bound = result.rounds[0].upper_bound_ms if result.rounds else 0.0
        proven = all(round_.proven_optimal for round_ in result.rounds)
        line = (
            f"{label:<26} {len(jobs):>5} {kinds_of(jobs):>5} {seconds:7.2f} {saved:10.1f} {bound:10.1f} "
            f"{_fraction(saved, bound):9.5f} {'yes' if proven else 'no':>7}"
        )
        if earlier:
            started = time.perf_counter()
            before = plan_objective(candidate_graph_matching(jobs, RULES))
            line += f" {time.perf_counter() - started:9.2f} {_fraction(before, bound):16.5f}"
        print(line, flush=True)


def _fraction(saved: float, bound: float) -> float:
    return saved / bound if bound > 0 else 1.0


def time_plan(label: str, jobs: list[JobProfile], algo: str) -> None:
    hosts = hosts_for(len(jobs))  # the plan time includes placement and prediction
    started = time.perf_counter()
    plan = make_plan(jobs, hosts, device_memory_gb=DEVICE_MEMORY_GB, max_group=2, algo=algo)
    seconds = time.perf_counter() - started
    shared = sum(1 for group in plan.groups if len(group.jobs) > 1)
    saved = plan_objective([group.jobs for group in plan.groups])
    print(
        f"{label:<9} {algo:<9} {len(jobs):>6} jobs  {seconds:7.2f} s  "
        f"gain {plan.predicted_aggregate_gain:.3f}  shared groups {shared:>5}  "
        f"saved/period {saved / 1000:7.1f} s  waves {plan.waves:>3}  "
        f"makespan {plan.predicted_makespan_ms / 60_000:6.1f} min",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs per trace for matching")
    parser.add_argument("--jobs-ffd", type=int, default=10_000, help="jobs for the ffd plan timing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-earlier", action="store_true", help="skip the earlier heuristic (minutes)")
    parser.add_argument("--no-plans", action="store_true", help="skip part 2 (make_plan timings)")
    args = parser.parse_args()

    compare_matching(args.jobs, args.seed, earlier=not args.no_earlier)
    if args.no_plans:
        return
    print("\n== make_plan: grouping + placement + prediction, random jobs")
    ffd_jobs = random_jobs(args.jobs_ffd, random.Random(args.seed))
    matching_jobs = random_jobs(args.jobs, random.Random(args.seed + 1))
    time_plan("ffd-set", ffd_jobs, "ffd")
    time_plan("ffd-set", ffd_jobs, "none")
    time_plan("match-set", matching_jobs, "matching")
    time_plan("match-set", matching_jobs, "ffd")
    time_plan("match-set", matching_jobs, "none")


if __name__ == "__main__":
    main()
