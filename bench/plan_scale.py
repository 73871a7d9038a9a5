"""How long planning takes for many jobs, and what the plans are predicted to gain.

    python bench/plan_scale.py --jobs-ffd 10000 --jobs-matching 2000 --seed 0

Jobs are random: half compute-heavy (compute 100-300 ms, comm 5-80 ms), half
communication-heavy (compute 10-80 ms, comm 80-300 ms); devices in {1, 2, 4, 8};
memory 1-40 GB on 80 GB devices; 50-500 iterations. Hosts have 8 devices each,
at least 64 hosts.

Targets: ffd under 5 s for 10,000 jobs, matching (max group 2) under 30 s for
2,000. networkx's blossom matching is pure Python and roughly cubic, so device-count
buckets above ``DENSE_GRAPH_LIMIT`` jobs use a sparse graph: each job keeps
edges to its ``CANDIDATES_PER_GROUP`` most complementary partners (highest pair
gain). Smaller buckets get the full graph and an exactly optimal matching.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xover.planner import JobProfile, make_plan, plan_objective  # noqa: E402
from xover.planner.grouping import CANDIDATES_PER_GROUP, DENSE_GRAPH_LIMIT  # noqa: E402

DEVICE_MEMORY_GB = 80.0
DEVICES_PER_HOST = 8


def random_jobs(count: int, rng: random.Random) -> list[JobProfile]:
    jobs = []
    for index in range(count):
        if rng.random() < 0.5:
            compute, comm = rng.uniform(100, 300), rng.uniform(5, 80)
        else:
            compute, comm = rng.uniform(10, 80), rng.uniform(80, 300)
        jobs.append(
            JobProfile(
                name=f"job{index}",
                devices=rng.choice((1, 2, 4, 8)),
                compute_ms=round(compute, 1),
                comm_ms=round(comm, 1),
                memory_gb=round(rng.uniform(1, 40), 1),
                data_ms=round(rng.uniform(0, 5), 1),
                iterations=rng.randint(50, 500),
            )
        )
    return jobs


def hosts_for(jobs: int) -> list[tuple[str, int]]:
    return [(f"node{index:03d}", DEVICES_PER_HOST) for index in range(max(64, jobs // 32))]


def run(label: str, jobs: list[JobProfile], algo: str) -> None:
    hosts = hosts_for(len(jobs))  # the plan time includes placement
    started = time.perf_counter()
    plan = make_plan(jobs, hosts, device_memory_gb=DEVICE_MEMORY_GB, max_group=2, algo=algo)
    seconds = time.perf_counter() - started
    shared = sum(1 for group in plan.groups if len(group.jobs) > 1)
    saved = plan_objective([group.jobs for group in plan.groups])
    print(
        f"{label:<9} {algo:<9} {len(jobs):>6} jobs  {seconds:7.2f} s  "
        f"gain {plan.predicted_aggregate_gain:.3f}  shared groups {shared:>5}  "
        f"saved/period {saved / 1000:7.1f} s  waves {plan.waves:>3}  "
        f"makespan {plan.predicted_makespan_ms / 60_000:6.1f} min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs-ffd", type=int, default=10_000)
    parser.add_argument("--jobs-matching", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"matching graph: complete for device-count buckets of <= {DENSE_GRAPH_LIMIT} jobs (exact), "
        f"otherwise sparse with the {CANDIDATES_PER_GROUP} most complementary partners per job"
    )
    ffd_jobs = random_jobs(args.jobs_ffd, random.Random(args.seed))
    matching_jobs = random_jobs(args.jobs_matching, random.Random(args.seed + 1))
    run("ffd-set", ffd_jobs, "ffd")
    run("ffd-set", ffd_jobs, "none")
    run("match-set", matching_jobs, "matching")
    run("match-set", matching_jobs, "ffd")
    run("match-set", matching_jobs, "none")


if __name__ == "__main__":
    main()
