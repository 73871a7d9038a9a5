"""Does adaptive's turns state run the devices as crossover does? Interleaved rounds, side by side.

Issue 60's benches saw each job's compute per iteration inside adaptive's turns stretches above the same job's in
the row's crossover run (1.02-1.08 on the rows' means), one row even where adaptive never left turns. Compute is the
device's own work (no turn wait, no exposed all-reduce): if the turns state itself were slower, adaptive would lose
to crossover wherever it settles in turns, and its windows would measure turns low. Two checks, per pair and round,
with the order of the two runs alternating between rounds (a machine that slows within a round costs each alike):

  pinned     `xover run --mode crossover` beside `XOVER_ADAPTIVE=start=turns,warmup=100000 xover run --mode
             adaptive`, which never leaves turns: adaptive's machinery (its controller, the servers' counts,
             the switch fence) without a switch; per job, samples/s and compute per iteration, adaptive
             over crossover
  switching  one comparison `--mode crossover,adaptive` (or `adaptive,crossover`) whose adaptive group probes
             all its time (short windows, a recheck every 2 s: a switch every second or two); per job,
             compute per iteration inside its turns stretches over the crossover run's
             (crossover_pair.state_compute), averaged over the jobs

Printed: each round's ratios, then their geometric mean and standard error. A mean within two standard errors of
1 says the state costs the devices nothing this many rounds can see. No run here has a sequential run, so
nothing here is kept for the plan (run/learn.py keeps whole comparisons only).

    .venv/bin/python bench/turns_state.py [--pairs A:B ...] [--rounds 10] [--engine torch]
                                          [--seconds 15] [--bandwidth 1gbit] [--check pinned switching]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_pair_arguments, profiled_pairs, xover  # noqa: E402
from bench.crossover_pair import state_compute  # noqa: E402

PAIRS = ["resnet-synthetic:vgg-synthetic"]
PINNED = {"XOVER_ADAPTIVE": "start=turns,warmup=100000"}
SWITCHING = {
    "XOVER_ADAPTIVE": "start=turns,measured=probe,until=sure,window=1,max_window=2,recheck=2,share=0.5,probe_share=0.9"
}


def pinned_round(common: list[str], crossover_first: bool) -> dict[str, dict[str, float]]:
    """Per job: adaptive pinned to turns over crossover, in samples/s and compute per iteration."""
    runs = {}
    for mode in ("crossover", "adaptive") if crossover_first else ("adaptive", "crossover"):
        report = xover("run", *common, "--mode", mode, env=PINNED if mode == "adaptive" else None)
        runs[mode] = {job["name"]: job for job in report["jobs"]}
    return {
        name: {
            "samples/s": job["samples_per_s_shared"] / runs["crossover"][name]["samples_per_s_shared"],
            "compute": job["compute_ms"] / runs["crossover"][name]["compute_ms"],
        }
        for name, job in runs["adaptive"].items()
    }


def switching_round(common: list[str], crossover_first: bool) -> float | None:
    """Compute per iteration in the switching adaptive's turns stretches over the crossover run's, jobs averaged."""
    modes = "crossover,adaptive" if crossover_first else "adaptive,crossover"
    report = xover("run", *common, "--mode", modes, env=SWITCHING)
    return state_compute(report["experiment"]).get("crossover")


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.geometric_mean(values)
    error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{mean:.3f} (standard error {error:.3f}, {len(values)} rounds: {', '.join(f'{v:.3f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser, PAIRS, rounds=10)
    parser.add_argument("--check", nargs="+", choices=["pinned", "switching"], default=["pinned", "switching"])
    parser.set_defaults(engine="torch")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    pairs = profiled_pairs(parser, args)
    for pair in pairs:
        common = ["--group", *pair, "--engine", args.engine, "--seconds", str(args.seconds)]
        common += ["--bandwidth", args.bandwidth]
        pinned: dict[str, dict[str, list[float]]] = {name: {"samples/s": [], "compute": []} for name in pair}
        switching: list[float] = []
        for index in range(args.rounds):
            crossover_first = index % 2 == 0
            print(f"\n{' + '.join(pair)}, round {index + 1}/{args.rounds}", flush=True)
            if "pinned" in args.check:
                for name, ratios in pinned_round(common, crossover_first).items():
                    for key, value in ratios.items():
                        pinned[name][key].append(value)
                    print(
                        f"  pinned / crossover {name}: {ratios['samples/s']:.3f} samples/s, "
                        f"{ratios['compute']:.3f} compute",
                        flush=True,
                    )
            if "switching" in args.check:
                ratio = switching_round(common, crossover_first)
                if ratio is not None:
                    switching.append(ratio)
                shown = f"{ratio:.3f}" if ratio is not None else "-"
                print(f"  switching adaptive's turns compute / crossover's: {shown}", flush=True)
        print(f"\n{' + '.join(pair)} ({args.engine}, {args.bandwidth}, {args.seconds:g} s a job), rounds alternating")
        if "pinned" in args.check:
            for name in pair:
                for key in ("samples/s", "compute"):
                    print(f"  adaptive pinned to turns / crossover, {name} {key}: {summary(pinned[name][key])}")
        if "switching" in args.check:
            print(f"  switching adaptive's turns stretches / crossover, compute per iteration: {summary(switching)}")


if __name__ == "__main__":
    main()
