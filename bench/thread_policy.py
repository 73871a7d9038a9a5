"""Benchmark: how much of crossover's lead is its thread policy rather than its turns.

Under crossover on a CPU the engines' threads run as SCHED_BATCH (runtime/thread_policy.py), which
changes a job alone too (its own threads stop preempting its compute). The baselines run without it.
Per pair and round, two `xover run --group A B --mode all --policy work-conserving` back to back (their
order alternates between rounds): the default, and `XOVER_COMM_THREADS=always` (SCHED_BATCH in every
mode: alone, concurrent and crossover). Every speed is a job's samples/s while both ran over its
samples/s alone in the *default* run's sequential mode, so the two runs compare on one scale:
  alone         each job alone with the policy (1.00 = without it)
  concurrent    co-located without turns, without / with the policy
  crossover     the default (which has the policy) and under `always` (the same runtime)
The last column is crossover over the better of the two concurrent runs.

    .venv/bin/python bench/thread_policy.py [--pairs A:B ...] [--rounds 2] [--engine horovod]
                                            [--seconds 15] [--bandwidth 1gbit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_pair_arguments, profiled_pairs, xover  # noqa: E402
from xover.console import fmt  # noqa: E402

PAIRS = [
    "resnet-synthetic:mlp-synthetic",
    "resnet-synthetic:vgg-synthetic",
    "transformer-chars:mlp-balanced",
    "resnet-synthetic:resnet-digits",
]
ALWAYS = {"XOVER_COMM_THREADS": "always"}


def speeds(report: dict, mode: str, alone: dict[str, float]) -> dict[str, float | None]:
    """Each job's samples/s in `mode` (while both ran; alone: the whole run) over `alone`."""
    out = {}
    for job in report["jobs"]:
        if job["mode"] == mode:
            rate = job["samples_per_s"] if mode == "sequential" else job["samples_per_s_shared"]
            out[job["name"]] = rate / alone[job["name"]] if rate and alone.get(job["name"]) else None
    return out


def total(values: dict[str, float | None]) -> float | None:
    return None if not values or None in values.values() else sum(values.values())


def run_round(pair: list[str], engine: str, seconds: float, bandwidth: str, always_first: bool) -> dict:
    args = [
        "--group",
        *pair,
        "--mode",
        "all",
        "--policy",
        "work-conserving",
        "--engine",
        engine,
        "--seconds",
        str(seconds),
        "--bandwidth",
        bandwidth,
    ]
    reports = {
        key: xover("run", *args, env=ALWAYS if key == "always" else None)
        for key in (["always", "default"] if always_first else ["default", "always"])
    }
    alone = {j["name"]: j["samples_per_s"] for j in reports["default"]["jobs"] if j["mode"] == "sequential"}
    row = {
        f"{mode}_{key}": speeds(reports[key], mode, alone)
        for key in reports
        for mode in ("sequential", "concurrent", "crossover")
    }
    row["threads"] = {key: sorted({j.get("comm_threads") or "-" for j in reports[key]["jobs"]}) for key in reports}
    row["same_loss"] = all(
        len({j["final_loss"] for r in reports.values() for j in r["jobs"] if j["name"] == name}) == 1 for name in alone
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser, PAIRS, rounds=2)
    args = parser.parse_args()
    pairs = profiled_pairs(parser, args)
    rows: dict[str, list[dict]] = {}
    for index in range(args.rounds):
        for pair in pairs:
            print(f"\nround {index + 1}/{args.rounds}: {' + '.join(pair)}", flush=True)
            rows.setdefault(" + ".join(pair), []).append(
                run_round(pair, args.engine, args.seconds, args.bandwidth, always_first=index % 2 == 1)
            )

    print(
        f"\nthe thread policy in every mode (XOVER_COMM_THREADS=always) vs the default: {args.engine}, "
        f"{args.bandwidth}; speeds over the default run's jobs alone, summed over the pair"
    )
    print(
        f"{'pair':36} {'round':>5} {'alone+pol.':>10} {'conc':>6} {'conc+pol.':>9} {'crossover':>9} "
        f"{'xo always':>9} {'xo/best conc':>12}"
    )
    for name, runs in rows.items():
        leads = []
        for index, row in enumerate(runs, 1):
            cells = {key: total(row[key]) for key in row if key not in ("threads", "same_loss")}
            best = max((v for v in (cells["concurrent_default"], cells["concurrent_always"]) if v), default=None)
            lead = cells["crossover_default"] / best if cells["crossover_default"] and best else None
            if lead:
                leads.append(lead)
            print(
                f"{name:36} {index:5d} {fmt(cells['sequential_always']):>10} {fmt(cells['concurrent_default']):>6} "
                f"{fmt(cells['concurrent_always']):>9} {fmt(cells['crossover_default']):>9} "
                f"{fmt(cells['crossover_always']):>9} {fmt(lead):>12}"
            )
        if leads:
            print(f"{'':36} {'p50':>5} {'':10} {'':6} {'':9} {'':9} {'':9} {fmt(statistics.median(leads)):>12}")
    print("\nper job, over the rounds (speed alone without the policy = 1)")
    print(
        f"{'job':20} {'in pair':36} {'alone+pol.':>10} {'conc':>10} {'conc+pol.':>10} {'crossover':>10} "
        f"{'threads (default; always)':>26} {'same loss':>9}"
    )
    for name, runs in rows.items():
        for job in runs[0]["sequential_default"]:
            cells = {
                key: "/".join(fmt(r[key].get(job)) for r in runs)
                for key in ("sequential_always", "concurrent_default", "concurrent_always", "crossover_default")
            }
            threads = f"{','.join(runs[0]['threads']['default'])}; {','.join(runs[0]['threads']['always'])}"
            print(
                f"{job:20} {name:36} {cells['sequential_always']:>10} {cells['concurrent_default']:>10} "
                f"{cells['concurrent_always']:>10} {cells['crossover_default']:>10} {threads:>26} "
                f"{str(all(r['same_loss'] for r in runs)):>9}"
            )


if __name__ == "__main__":
    main()
