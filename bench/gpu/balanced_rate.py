"""The link rate at which a job's all-reduce keeps the shaped link busy for as long as the job computes:
where exposed communication is about equal to compute, the condition under which turns can pay most
(docs/gpu.md). Read from `xover profile --json` output (the first job, or --job NAME).

    python3 bench/gpu/balanced_rate.py PROFILE.json [--job NAME] [--ratio 1.0]

Prints the rate as tc and xover write it (e.g. 8400mbit); exit 1 with one line when the profile cannot
give it (no such file, no gradient bytes or compute).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from xover.plan.model import link_busy_ms  # noqa: E402

LOWEST_MBIT, HIGHEST_MBIT = 10, 400_000  # what tbf on a loopback is asked for in practice


def balanced_rate_mbit(profile: dict, ratio: float = 1.0) -> int:
    """The rate (Mbit/s) at which link time = ratio x the job's device time (data + compute) per
    iteration, on one host's shaped loopback (every rank's traffic crosses it)."""
    device_ms = (profile.get("data_ms") or 0.0) + profile["compute_ms"]
    gradient_bytes = profile["gradient_mb"] * 2**20
    at_one_mbit = link_busy_ms(int(gradient_bytes), int(profile["np"]), 1, 1e6)
    if device_ms <= 0 or at_one_mbit <= 0:
        raise ValueError("no compute or no gradients to send")
    return int(min(HIGHEST_MBIT, max(LOWEST_MBIT, round(at_one_mbit / (ratio * device_ms)))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--job")
    parser.add_argument("--ratio", type=float, default=1.0, help="link time over compute time (default 1.0)")
    args = parser.parse_args()
    try:
        profiles = json.loads(Path(args.profile).read_text())
        chosen = next(p for p in profiles if args.job in (None, p["name"]))
        print(f"{balanced_rate_mbit(chosen, args.ratio)}mbit")
    except (OSError, ValueError, TypeError, KeyError, StopIteration) as error:
        print(f"balanced_rate: {args.profile}: no rate from it ({error or type(error).__name__})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
