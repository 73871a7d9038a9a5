"""Benchmark: how busy the shaped link is under concurrent and under crossover, on the emulated cluster.

A link-bound pair gains only what crossover keeps the link busier than naive co-location does. This
samples every emulated host's egress byte counter (eth0, inside its namespace) every 5 ms, for a
window in the middle of each run, while
  xover run --group A B -H <the cluster's hosts> --mode concurrent|crossover --seconds S
runs (modes alternating between rounds). Printed per run and host: mean egress (Gbit/s) and the
share of 5 ms windows under a tenth of the link's rate (the link idle); then, per pair, crossover over
concurrent. Needs a live cluster (`xover cluster up --hosts 2 --devices-per-host 1 --bandwidth
1gbit`) and the pair's profiles on it (`xover profile A B -H ...`: --seconds needs them).

    .venv/bin/python bench/link_busy.py [--pairs A:B ...] [--rounds 2] [--seconds 20]
                                        [--delay 9] [--window 8]

The window should lie where both jobs train: after start-up (processes, rendezvous: about 5 s here)
and before the first job ends (S seconds of work alone each, longer when shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xover.emulation import cluster  # noqa: E402
from xover.rates import parse_rate  # noqa: E402

PAIRS = ["mlp-synthetic:mlp-balanced"]
SAMPLE_S = 0.005
IDLE_FRACTION = 0.1  # a window under this share of the link's rate counts as idle

# Runs inside a host's namespace (`ip netns exec`), where /sys/class/net is that namespace's.
SAMPLER = """
import json, sys, time
window = float(sys.argv[1]); step = float(sys.argv[2]); samples = []
start = time.monotonic(); due = start
while time.monotonic() - start < window:
    with open("/sys/class/net/eth0/statistics/tx_bytes") as counter:
        samples.append((time.monotonic(), int(counter.read())))
    due += step
    time.sleep(max(0.0, due - time.monotonic()))
print(json.dumps(samples))
"""


def link_figures(samples: list[tuple[float, int]], rate_bps: float) -> dict:
    rates = [(b2 - b1) * 8 / (t2 - t1) for (t1, b1), (t2, b2) in zip(samples, samples[1:]) if t2 > t1]
    return {
        "gbit_s": statistics.mean(rates) / 1e9,
        "idle": sum(r < IDLE_FRACTION * rate_bps for r in rates) / len(rates),
    }


def measured_run(pair: list[str], hosts: list[tuple[str, int]], mode: str, args, rate_bps: float) -> dict:
    host_spec = ",".join(f"{name}:{slots}" for name, slots in hosts)
    command = [
        str(ROOT / ".venv/bin/xover"),
        "run",
        "--json",
        "--group",
        *pair,
        "-H",
        host_spec,
        "--mode",
        mode,
        "--seconds",
        str(args.seconds),
    ]
    print("$ xover", " ".join(command[1:]), flush=True)
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(args.delay)
    samplers = {
        name: subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-c", SAMPLER, str(args.window), str(SAMPLE_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, _ in hosts
    }
    links = {}
    for name, sampler in samplers.items():
        out, _ = sampler.communicate()
        if sampler.returncode != 0:
            run.terminate()
            sys.exit(f"sampling {name}'s egress failed (ip netns exec {name}): is the cluster still up?")
        links[name] = link_figures(json.loads(out), rate_bps)
    out, err = run.communicate()
    if run.returncode != 0:
        sys.exit(err[-4000:])
    jobs = json.loads(out)["jobs"]
    if any(job["ended_at"] and job["wall_s"] < args.delay + args.window for job in jobs):
        print("  warning: a job ended before the window did; lengthen --seconds or shorten --delay/--window")
    for name, figures in links.items():
        print(f"  {mode:10} {name}: {figures['gbit_s']:.2f} Gbit/s, idle {figures['idle']:.0%} of 5 ms windows")
    return {
        "gbit_s": statistics.mean(f["gbit_s"] for f in links.values()),
        "idle": statistics.mean(f["idle"] for f in links.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=PAIRS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--delay", type=float, default=9.0)
    parser.add_argument("--window", type=float, default=8.0)
    args = parser.parse_args()
    hosts = cluster.cluster_hosts()
    if not hosts:
        sys.exit("no emulated cluster is up: `xover cluster up --hosts 2 --devices-per-host 1 --bandwidth 1gbit`")
    rate = cluster.cluster_rate()
    if rate is None:
        sys.exit("the emulated cluster's NICs are not shaped: bring it up with --bandwidth")
    rate_bps = parse_rate(rate)
    summary = []
    for pair in args.pairs:
        jobs = pair.split(":")
        figures: dict[str, list[dict]] = {"concurrent": [], "crossover": []}
        for round_index in range(args.rounds):
            modes = ["concurrent", "crossover"] if round_index % 2 == 0 else ["crossover", "concurrent"]
            for mode in modes:
                figures[mode].append(measured_run(jobs, hosts, mode, args, rate_bps))
        mean = {
            mode: {key: statistics.mean(f[key] for f in runs) for key in ("gbit_s", "idle")}
            for mode, runs in figures.items()
        }
        summary.append((pair, mean))
    print(
        f"\nsummary (link {rate}, mean over hosts and rounds; idle: 5 ms windows under {IDLE_FRACTION:.0%} of the rate)"
    )
    for pair, mean in summary:
        ratio = mean["crossover"]["gbit_s"] / mean["concurrent"]["gbit_s"]
        print(
            f"{pair.replace(':', ' + ')}: concurrent {mean['concurrent']['gbit_s']:.2f} Gbit/s "
            f"(idle {mean['concurrent']['idle']:.0%}), crossover {mean['crossover']['gbit_s']:.2f} Gbit/s "
            f"(idle {mean['crossover']['idle']:.0%}); crossover / concurrent {ratio:.2f}x"
        )


if __name__ == "__main__":
    main()
