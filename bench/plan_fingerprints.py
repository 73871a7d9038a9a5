"""Whether `xover plan`'s outputs changed: a fingerprint of the plan of many inputs, written once, checked later.

    .venv/bin/python bench/plan_fingerprints.py --write before.json     # on the commit before a change
    .venv/bin/python bench/plan_fingerprints.py --check before.json     # after it: the same plans, or which differ

The inputs: `bench/plan_scale.py`'s random, typed and mixed traces (5, 40 and 300 jobs, four seeds), under
every grouping algorithm, groups of 2 to 4, both turn policies and several host layouts (84 plans); each
plan's file content (`plan_to_dict`) is hashed. A change meant to leave plans alone (issue 61's planning
core did) checks so; one meant to change them shows which.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plan_scale  # noqa: E402

from xover.plan import make_plan, plan_to_dict  # noqa: E402


def fingerprints() -> dict[str, str]:
    """Plan label -> SHA-256 of its plan file's content."""
    found: dict[str, str] = {}

    def plan(label: str, jobs, hosts, **options) -> None:
        body = json.dumps(plan_to_dict(make_plan(jobs, hosts, **options)), sort_keys=True)
        found[label] = hashlib.sha256(body.encode()).hexdigest()

    for seed in range(4):
        for count in (5, 40, 300):
            for algo in ("matching", "ffd", "none"):
                jobs = plan_scale.random_jobs(count, random.Random(seed * 100 + count))
                plan(
                    f"random-{seed}-{count}-{algo}",
                    jobs,
                    plan_scale.hosts_for(count),
                    device_memory_gb=80.0,
                    max_group=2,
                    algo=algo,
                )
            jobs = plan_scale.typed_jobs(count, random.Random(seed * 7 + count))
            plan(f"typed-{seed}-{count}", jobs, plan_scale.hosts_for(count), device_memory_gb=80.0)
            plan(f"typed3-{seed}-{count}", jobs, [("a", 8), ("b", 4), ("c", 2)], max_group=3)
            jobs = plan_scale.mixed_jobs(count, random.Random(seed * 13 + count))
            plan(f"mixed-{seed}-{count}", jobs, [("h1", 2), ("h2", 2)], policy="round-robin")
            plan(f"mixed1-{seed}-{count}", jobs, [("h1", 16)], max_group=4, min_gain_margin=0.0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="write the fingerprints to this file")
    action.add_argument("--check", type=Path, help="compare with the fingerprints in this file")
    args = parser.parse_args()
    found = fingerprints()
    if args.write:
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(found)} fingerprints to {args.write}")
        return
    before = json.loads(args.check.read_text())
    changed = sorted(label for label in before if found.get(label) != before[label])
    if changed:
        sys.exit(f"{len(changed)} of {len(before)} plans changed: {', '.join(changed)}")
    print(f"all {len(before)} plans unchanged")


if __name__ == "__main__":
    main()
