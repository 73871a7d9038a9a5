"""Benchmark: a plan on an emulated two-host cluster, run as scheduled, against the plan and the baselines.

Builds `xover cluster up --hosts 2 --devices-per-host D --bandwidth RATE` (root), profiles the recipes
on it (-H), plans them for it, and runs the plan three ways, each as one experiment:
  crossover   the plan as scheduled (groups start as soon as their devices are free, turns taken)
  concurrent  the same schedule, jobs of a group sharing the devices without turns
  sequential  every job alone, one after another
Printed side by side: each one's measured makespan, the plan's predicted makespan and one-after-another
time, and per group the measured crossover gain next to the predicted one. Takes the cluster down at
the end (also on failure).

    .venv/bin/python bench/cluster_plan.py [--recipes A B C D] [--devices-per-host 1] [--bandwidth 1gbit]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import xover  # noqa: E402
from xover.console import fmt  # noqa: E402
from xover.emulation import cluster  # noqa: E402
from xover.plan import Plan, plan_from_dict  # noqa: E402
from xover.results import RunResult  # noqa: E402
from xover.run.commands import schedule_summary  # noqa: E402

RECIPES = ["resnet-synthetic", "mlp-synthetic", "transformer-chars", "mlp-balanced"]


def makespan(report: dict, plan: Plan) -> float:
    """First job start to last job end, as `xover run` measures a plan run as scheduled (its JSON
    carries it for crossover and concurrent; a sequential run is a comparison, which does not)."""
    jobs = [RunResult.from_summary(job) for job in report["jobs"]]
    measured = schedule_summary(jobs, plan)["measured_makespan_s"]
    if measured is None:  # as `xover run` and `xover report` say: no makespan unless every job finished
        sys.exit(f"experiment {report['experiment']}: a job did not finish, so it has no makespan")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=RECIPES)
    parser.add_argument("--devices-per-host", type=int, default=1)
    parser.add_argument("--bandwidth", default="1gbit")
    args = parser.parse_args()
    if cluster.missing_requirements():
        sys.exit("the emulated cluster cannot be built here: " + "; ".join(cluster.missing_requirements()))
    spec = f"xo-h1:{args.devices_per_host},xo-h2:{args.devices_per_host}"
    try:
        cluster.cluster_up(2, args.devices_per_host, args.bandwidth)
        xover("profile", *args.recipes, "-H", spec, "--force")
        with tempfile.TemporaryDirectory() as tmp:
            plan_path = str(Path(tmp) / "plan.json")
            plan = xover("plan", *args.recipes, "-H", spec, "--out", plan_path)
            plan_file = plan_from_dict(json.loads(Path(plan_path).read_text()))
            runs = {mode: xover("run", plan_path, "--mode", mode) for mode in ("crossover", "concurrent", "sequential")}
    finally:
        cluster.cluster_down()
    print(
        f"\nplan on two emulated hosts ({spec}, NICs at {args.bandwidth}): "
        + "; ".join(
            f"group {i}: {' + '.join(g['jobs'])} on {','.join(g['devices'])}, predicted gain {g['predicted_gain']:.2f}"
            for i, g in enumerate(plan["groups"])
        )
    )
    measured = {mode: makespan(report, plan_file) for mode, report in runs.items()}
    predicted, sequential = plan["predicted_makespan_ms"] / 1000, plan["sequential_makespan_ms"] / 1000
    print(f"{'':28} {'makespan s':>10} {'vs one after another':>20}")
    print(f"{'predicted by the plan':28} {predicted:10.1f} {sequential / predicted:19.2f}x")
    print(f"{'one after another (plan)':28} {sequential:10.1f} {1.0:19.2f}x")
    for mode in ("crossover", "concurrent", "sequential"):
        print(f"{'measured ' + mode:28} {measured[mode]:10.1f} {measured['sequential'] / measured[mode]:19.2f}x")
    print(
        f"crossover makespan vs predicted: {100 * (measured['crossover'] / predicted - 1):+.1f}%; "
        f"concurrent / crossover makespan: {measured['concurrent'] / measured['crossover']:.2f} "
        f"(above 1: crossover finished first)"
    )
    schedule = runs["crossover"].get("schedule", {})
    print(f"groups running at once at the busiest moment: {schedule.get('groups_overlapping')}")
    gains = {mode: group_gains(runs[mode], runs["sequential"]) for mode in ("crossover", "concurrent")}
    for i, group in enumerate(plan["groups"]):
        jobs = frozenset(group["jobs"])
        crossover, concurrent = gains["crossover"].get(jobs), gains["concurrent"].get(jobs)
        ratio = f"{crossover / concurrent:.2f}x" if crossover and concurrent else "-"
        print(
            f"group {i} ({' + '.join(group['jobs'])}): predicted gain {group['predicted_gain']:.2f}; measured "
            f"crossover {fmt(crossover)}, concurrent {fmt(concurrent)} (crossover / concurrent {ratio})"
        )


def group_gains(report: dict, sequential: dict) -> dict[frozenset, float | None]:
    """Each group's aggregate speed while its jobs ran together: every job's samples/s then over its
    samples/s alone in the sequential run, summed (1.00 = no better than one after another)."""
    alone = {job["name"]: job.get("samples_per_s") for job in sequential["jobs"]}
    members: dict[int, list[dict]] = {}
    for job in report["jobs"]:
        members.setdefault(job["group"], []).append(job)
    gains: dict[frozenset, float | None] = {}
    for jobs in members.values():
        speeds = [(job.get("samples_per_s_shared"), alone.get(job["name"])) for job in jobs]
        known = all(shared and solo for shared, solo in speeds)
        gains[frozenset(job["name"] for job in jobs)] = sum(a / b for a, b in speeds) if known else None
    return gains


if __name__ == "__main__":
    main()
