"""Benchmark: one runtime setting of crossover off and on (the default), side by side with concurrent.

`--off VAR=VALUE` names the setting by the environment variable that turns it off:
  XOVER_COMM_THREADS=normal   the engines' threads keep the default scheduling policy
                              (runtime/thread_policy.py); the default
  XOVER_LINK_BANDS=off        the link stays shared first come, first served (turns/policies.py: link_bands)
  XOVER_WAIT=poll             a rank polls for its all-reduces from the start instead of sleeping through
                              most of the transfer it expects (runtime/gradient_wait.py)

Profiles the recipes first (stored ones are reused: the policy's order comes from them). Per pair and
round, two `xover run`s back to back (their order alternates between rounds):
  xover run --group A B --mode all --policy work-conserving     sequential, concurrent, crossover (on)
  VAR=VALUE xover run --group A B --mode crossover              crossover with the setting off
Each figure is the sum over the pair of each job's samples/s while both ran over its samples/s alone
in the same round's sequential run. Per job: speed, device time and exposed communication (ms per
iteration) off and on, the socket priority and thread policy it ran with when on, and whether its
losses matched.

    .venv/bin/python bench/ablation.py [--off XOVER_COMM_THREADS=normal] [--pairs A:B ...] [--rounds 3]
                                       [--engine horovod] [--seconds 15] [--bandwidth 1gbit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_pair_arguments, profiled_pairs, xover  # noqa: E402
from xover.console import fmt  # noqa: E402

PAIRS = ["resnet-synthetic:mlp-synthetic", "mlp-synthetic:mlp-balanced", "transformer-chars:mlp-balanced"]
SETTINGS = {"XOVER_COMM_THREADS": "normal", "XOVER_LINK_BANDS": "off", "XOVER_WAIT": "poll"}  # what turns each off


def run_round(
    pair: list[str], engine: str, seconds: float, bandwidth: str, off: dict[str, str], off_first: bool
) -> dict:
    common = ["--group", *pair, "--engine", engine, "--seconds", str(seconds), "--bandwidth", bandwidth]
    variants = {"on": (["--mode", "all", "--policy", "work-conserving"], None), "off": (["--mode", "crossover"], off)}
    reports = {
        key: xover("run", *common, *variants[key][0], env=variants[key][1])
        for key in (["off", "on"] if off_first else ["on", "off"])
    }
    on_report, off_report = reports["on"], reports["off"]
    alone = {j["name"]: j["samples_per_s"] for j in on_report["jobs"] if j["mode"] == "sequential"}
    [group] = on_report["groups"]
    row = {"concurrent": group["concurrent_vs_sequential"], "on": group["crossover_vs_sequential"], "jobs": {}}
    off_total = 0.0
    for name in pair:
        on = next(j for j in on_report["jobs"] if j["name"] == name and j["mode"] == "crossover")
        off_job = next(j for j in off_report["jobs"] if j["name"] == name)
        off_speed = (
            off_job["samples_per_s_shared"] / alone[name] if off_job["samples_per_s_shared"] and alone[name] else None
        )
        off_total = off_total + off_speed if off_speed is not None and off_total is not None else None
        row["jobs"][name] = {
            "off": off_speed,
            "on": on["speed"],
            "device_off": off_job["compute_ms"],
            "device_on": on["compute_ms"],
            "comm_off": off_job["communication_ms"],
            "comm_on": on["communication_ms"],
            "priority": on.get("link_priority"),
            "threads": on.get("comm_threads"),
            "same_loss": on["final_loss"] == off_job["final_loss"],
        }
    row["off"] = off_total
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


def parse_off(text: str) -> dict[str, str]:
    variable, _, value = text.partition("=")
    if SETTINGS.get(variable) != value:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected one of {', '.join(f'{k}={v}' for k, v in SETTINGS.items())}"
        )
    return {variable: value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--off", type=parse_off, default={"XOVER_COMM_THREADS": "normal"}, help="the setting to turn off, as VAR=VALUE"
    )
    add_pair_arguments(parser, PAIRS, rounds=3)
    args = parser.parse_args()
    pairs = profiled_pairs(parser, args)
    [(variable, value)] = args.off.items()
    rows: dict[str, list[dict]] = {}
    for index in range(args.rounds):
        for pair in pairs:
            print(f"\nround {index + 1}/{args.rounds}: {' + '.join(pair)}", flush=True)
            rows.setdefault(" + ".join(pair), []).append(
                run_round(pair, args.engine, args.seconds, args.bandwidth, args.off, off_first=index % 2 == 1)
            )

    print(
        f"\n{variable}={value} (off) vs the default (on): {args.engine}, {args.bandwidth}, {args.rounds} rounds; "
        "aggregate speed relative to alone while both ran"
    )
    print(f"{'pair':36} {'round':>5} {'concurrent':>10} {'off':>7} {'on':>7} {'on/off':>7} {'on/conc':>7}")
    for name, runs in rows.items():
        for index, row in enumerate(runs, 1):
            print(
                f"{name:36} {index:5d} {fmt(row['concurrent']):>10} {fmt(row['off']):>7} {fmt(row['on']):>7} "
                f"{fmt(ratio(row['on'], row['off'])):>7} {fmt(ratio(row['on'], row['concurrent'])):>7}"
            )
        gains = [g for g in (ratio(r["on"], r["off"]) for r in runs) if g]
        leads = [g for g in (ratio(r["on"], r["concurrent"]) for r in runs) if g]
        if gains and leads:
            print(
                f"{'':36} {'p50':>5} {'':10} {'':7} {'':7} {fmt(statistics.median(gains)):>7} "
                f"{fmt(statistics.median(leads)):>7}"
            )
    print(
        "\nper job (speed alone = 1; device time and exposed communication, ms per iteration; socket priority "
        "and thread policy when on)"
    )
    print(
        f"{'job':34} {'in pair':36} {'speed off':>9} {'on':>9} {'device off':>10} {'on':>9} {'comm off':>9} "
        f"{'on':>9} {'prio':>4} {'threads':>7} {'same loss':>9}"
    )
    for name, runs in rows.items():
        for job in runs[0]["jobs"]:
            per = [r["jobs"][job] for r in runs]
            spans = {
                key: value_range([p[key] for p in per], 2 if key in ("off", "on") else 0)
                for key in ("off", "on", "device_off", "device_on", "comm_off", "comm_on")
            }
            print(
                f"{job:34} {name:36} {spans['off']:>9} {spans['on']:>9} {spans['device_off']:>10} "
                f"{spans['device_on']:>9} {spans['comm_off']:>9} {spans['comm_on']:>9} {fmt(per[0]['priority']):>4} "
                f"{str(per[0]['threads']):>7} {str(all(p['same_loss'] for p in per)):>9}"
            )


if __name__ == "__main__":
    main()
