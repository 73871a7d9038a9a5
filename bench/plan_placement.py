"""Benchmark: the plan's placement against wave-by-wave placement and the devices' work bound, on generated plans.

For each of `--plans` seeded sets of jobs (30-200 jobs of 1, 2, 4 or 8 devices; one, two or four hosts of 8),
`make_plan` groups and predicts them and places the groups as devices free up (`plan/placement.py`). The same
groups, in the same order, are then placed wave by wave as `xover plan` placed them before 2026-12-01 (every
group's devices picked before anything ran: each wave the best-fit of the free devices, a group that does not
fit going to the next wave) and timed by the same start rule (`make.schedule`: `xover run`'s). Printed: the
predicted makespans' ratio, and each against the bound of the devices' work (the larger of every group's
device time over the devices and the longest group). Predictions only: nothing runs, nothing is timed.

    .venv/bin/python bench/plan_placement.py [--plans 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xover.plan import JobProfile, make_plan  # noqa: E402
from xover.plan.make import GroupPlan, makespan_ms, schedule  # noqa: E402
from xover.plan.state import FreeDevices, Host  # noqa: E402


def generated_jobs(rng: random.Random, mixed_devices: bool) -> list[JobProfile]:
    devices = [1, 1, 2, 4, 8] if mixed_devices else [1, 2]
    return [
        JobProfile(
            f"j{index}",
            rng.choice(devices),
            rng.uniform(10, 300),
            rng.uniform(5, 300),
            rng.uniform(1, 30),
            iterations=rng.randint(100, 3000),
        )
        for index in range(rng.choice([30, 60, 100, 200]))
    ]


def wave_by_wave(groups: list[GroupPlan], hosts: list[Host]) -> list[GroupPlan]:
    """The groups (longest first) on devices picked wave by wave, in wave order, timed by the run's rule."""
    waves: list[FreeDevices] = []
    placed: list[tuple[int, GroupPlan]] = []
    for group in groups:
        wave = 0
        while True:
            if wave == len(waves):
                waves.append(FreeDevices(hosts))
            devices = waves[wave].place(len(group.devices))
            if devices is not None:
                placed.append((wave, replace(group, devices=waves[wave].names(devices), wave=wave)))
                break
            wave += 1
    return schedule([group for _, group in sorted(placed, key=lambda entry: entry[0])])


def work_bound_ms(groups: list[GroupPlan], hosts: list[Host]) -> float:
    devices = sum(slots for _, slots in hosts)
    busy = sum(group.predicted_duration_ms * len(group.devices) for group in groups)
    return max(busy / devices, max(group.predicted_duration_ms for group in groups))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plans", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0, help="the first plan's seed (the others follow)")
    args = parser.parse_args()
    ratios, now_bound, waves_bound = [], [], []
    for seed in range(args.seed, args.seed + args.plans):
        rng = random.Random(seed)
        jobs = generated_jobs(rng, mixed_devices=seed % 3 != 0)
        hosts = [(f"h{index}", 8) for index in range(rng.choice([1, 2, 4]))]
        plan = make_plan(jobs, hosts, device_memory_gb=80.0)
        longest_first = sorted(plan.groups, key=lambda group: -group.predicted_duration_ms)
        before = makespan_ms(wave_by_wave(longest_first, hosts))
        bound = work_bound_ms(plan.groups, hosts)
        ratios.append(plan.predicted_makespan_ms / before)
        now_bound.append(plan.predicted_makespan_ms / bound)
        waves_bound.append(before / bound)
    print(f"{args.plans} generated plans (seeds {args.seed}-{args.seed + args.plans - 1}), predicted makespans:")
    print(
        f"  as devices free up / wave by wave: mean {statistics.mean(ratios):.3f}, range {min(ratios):.3f}-"
        f"{max(ratios):.3f}; longer on {sum(ratio > 1 + 1e-9 for ratio in ratios)} of {len(ratios)}"
    )
    for label, values in (("as devices free up", now_bound), ("wave by wave", waves_bound)):
        print(f"  {label} / the devices' work bound: mean {statistics.mean(values):.3f}, max {max(values):.3f}")


if __name__ == "__main__":
    main()
