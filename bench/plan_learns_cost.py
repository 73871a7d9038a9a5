"""What a plan that learns costs to make: `make_plan` on random jobs (bench/plan_scale.py's random kind, 2 devices
each) without measurements, and with one measured pair, whose plan weighs every group it has not measured by the
model's prediction (one simulation a group, up to `decide.PREDICTED_GROUPING_JOBS` jobs; by the fluid bound beyond).
Prints seconds per plan and the predicted makespan over one after another, side by side.

    .venv/bin/python bench/plan_learns_cost.py [--jobs 8 16 24 25] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xover.plan import JobProfile  # noqa: E402
from xover.plan.make import local_hosts, make_plan  # noqa: E402
from xover.plan.measured import NONE, JobIdentity, MeasuredWay, Measurements, jobs_key  # noqa: E402


def random_jobs(count: int, seed: int) -> list[JobProfile]:
    rng = random.Random(seed)
    return [
        JobProfile(
            name=f"j{i}",
            devices=2,
            compute_ms=rng.uniform(20, 200),
            comm_ms=rng.uniform(20, 200),
            memory_gb=0.1,
            iterations=100,
            interference=rng.uniform(0.0, 0.5),
        )
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[8, 16, 24, 25])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'jobs':>4} {'measured':>9} {'seconds':>8} {'makespan / one after another':>29}")
    for count in args.jobs:
        jobs = random_jobs(count, args.seed)
        ids = {job.name: JobIdentity(f"w{job.name}", 2, "horovod") for job in jobs}
        one_pair = Measurements(
            {jobs_key([ids["j0"], ids["j1"]]): {"concurrent": MeasuredWay(1.2, (0.6, 0.6), "e")}}, ids
        )
        for label, measured in (("none", NONE), ("one pair", one_pair)):
            started = time.perf_counter()
            plan = make_plan(jobs, local_hosts(8), measured=measured)
            seconds = time.perf_counter() - started
            ratio = plan.predicted_makespan_ms / plan.sequential_makespan_ms
            print(f"{count:>4} {label:>9} {seconds:>8.2f} {ratio:>29.3f}", flush=True)


if __name__ == "__main__":
    main()
