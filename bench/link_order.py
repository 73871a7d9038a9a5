"""Benchmark: the work-conserving policy's link order, on and off, side by side with concurrent.

Profiles the recipes first (stored ones are reused): the order comes from them. Per pair and round, two `xover run`s back to back (their order alternates between rounds):
  xover run --group A B --mode all --policy work-conserving     sequential, concurrent, crossover
                                                                 with the link ordered (the default)
  XOVER_LINK_BANDS=off xover run --group A B --mode crossover    crossover with the link shared
Each figure is the sum over the pair of each job's samples/s while both ran over its samples/s alone
in the same round's sequential run. Per job: speed and exposed communication (ms per iteration)
with the link shared and ordered, and the socket priority each carried.

    .venv/bin/python bench/link_order.py [--pairs A:B ...] [--rounds 3] [--engine horovod]
                                         [--seconds 15] [--bandwidth 1gbit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import xover  # noqa: E402
from xover.console import fmt  # noqa: E402

PAIRS = ["resnet-synthetic:mlp-synthetic", "mlp-synthetic:mlp-balanced", "transformer-chars:mlp-balanced"]


def run_round(pair: list[str], engine: str, seconds: float, bandwidth: str, shared_first: bool) -> dict:
    common = ["--group", *pair, "--engine", engine, "--seconds", str(seconds), "--bandwidth", bandwidth]
    variants = {"ordered": (["--mode", "all", "--policy", "work-conserving"], None),
                "shared": (["--mode", "crossover"], {"XOVER_LINK_BANDS": "off"})}
    reports = {key: xover("run", *common, *variants[key][0], env=variants[key][1])
               for key in (["shared", "ordered"] if shared_first else ["ordered", "shared"])}
    ordered_report, shared_report = reports["ordered"], reports["shared"]
    alone = {j["name"]: j["samples_per_s"] for j in ordered_report["jobs"] if j["mode"] == "sequential"}
    [group] = ordered_report["groups"]
    row = {"concurrent": group["concurrent_vs_sequential"], "ordered": group["crossover_vs_sequential"], "jobs": {}}
    shared_total = 0.0
    for name in pair:
        on = next(j for j in ordered_report["jobs"] if j["name"] == name and j["mode"] == "crossover")
        off = next(j for j in shared_report["jobs"] if j["name"] == name)
        off_speed = off["samples_per_s_shared"] / alone[name] if off["samples_per_s_shared"] and alone[name] else None
        shared_total = shared_total + off_speed if off_speed is not None and shared_total is not None else None
        row["jobs"][name] = {"shared": off_speed, "ordered": on["speed"], "comm_shared": off["communication_ms"],
                             "comm_ordered": on["communication_ms"], "priority": on.get("link_priority"),
                             "same_loss": on["final_loss"] == off["final_loss"]}
    row["shared"] = shared_total
    return row


def value_range(values: list[float | None], digits: int = 2) -> str:
    """min-max over the rounds (one figure when they agree to two decimals)."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    low, high = fmt(known[0], digits), fmt(known[-1], digits)
    return low if low == high else f"{low}-{high}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=PAIRS, help="pairs of recipes, A:B")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", default="horovod", choices=["horovod", "torch"])
    parser.add_argument("--seconds", type=float, default=15.0, help="each job's length (xover run --seconds)")
    parser.add_argument("--bandwidth", default="1gbit")
    args = parser.parse_args()
    pairs = [p.split(":") for p in args.pairs]
    if any(len(p) != 2 or not all(p) for p in pairs):
        parser.error(f"--pairs: expected A:B, got {' '.join(args.pairs)}")
    # the link order comes from the jobs' profiles: measure the ones not stored yet
    xover("profile", *sorted({name for pair in pairs for name in pair}), "--engine", args.engine,
          "--bandwidth", args.bandwidth)
    rows: dict[str, list[dict]] = {}
    for index in range(args.rounds):
        for pair in pairs:
            print(f"\nround {index + 1}/{args.rounds}: {' + '.join(pair)}", flush=True)
            rows.setdefault(" + ".join(pair), []).append(
                run_round(pair, args.engine, args.seconds, args.bandwidth, shared_first=index % 2 == 1))

    print(f"\nlink order on/off ({args.engine}, {args.bandwidth}, {args.rounds} rounds; aggregate speed relative "
          f"to alone while both ran)")
    print(f"{'pair':36} {'round':>5} {'concurrent':>10} {'shared':>7} {'ordered':>7} {'ord/shared':>10} {'ord/conc':>8}")
    for name, runs in rows.items():
        for index, row in enumerate(runs, 1):
            print(f"{name:36} {index:5d} {fmt(row['concurrent']):>10} {fmt(row['shared']):>7} {fmt(row['ordered']):>7} "
                  f"{fmt(ratio(row['ordered'], row['shared'])):>10} {fmt(ratio(row['ordered'], row['concurrent'])):>8}")
        gains = [g for g in (ratio(r["ordered"], r["shared"]) for r in runs) if g]
        leads = [g for g in (ratio(r["ordered"], r["concurrent"]) for r in runs) if g]
        if gains and leads:
            print(f"{'':36} {'p50':>5} {'':10} {'':7} {'':7} {fmt(statistics.median(gains)):>10} "
                  f"{fmt(statistics.median(leads)):>8}")
    print("\nper job (speed alone = 1; exposed communication ms per iteration; socket priority when ordered)")
    print(f"{'job':34} {'in pair':36} {'speed shared':>12} {'ordered':>8} {'comm shared':>11} {'ordered':>8} "
          f"{'prio':>4} {'same loss':>9}")
    for name, runs in rows.items():
        for job in runs[0]["jobs"]:
            per = [r["jobs"][job] for r in runs]
            spans = {key: value_range([p[key] for p in per], 0 if key.startswith("comm") else 2)
                     for key in ("shared", "ordered", "comm_shared", "comm_ordered")}
            print(f"{job:34} {name:36} {spans['shared']:>12} {spans['ordered']:>8} {spans['comm_shared']:>11} "
                  f"{spans['comm_ordered']:>8} {fmt(per[0]['priority']):>4} {str(all(p['same_loss'] for p in per)):>9}")


if __name__ == "__main__":
    main()
