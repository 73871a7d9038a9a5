"""How the replay's cost grows with the trace: wall time and peak memory at 1k, 10k and 100k jobs.

    .venv/bin/python bench/replay_scale.py [--sizes 1000 10000 100000] [--policies fifo srtf tiresias xover]
        [--hosts 64] [--load 1.0] [--seed 0] [--write-trace PATH]

Philly's own job log cannot be fetched here (its repository keeps it in Git LFS), so the traces are drawn
from the distributions Gavel samples from the Philly trace (`scheduler/utils.py` of stanford-futuredata/gavel):
a job's GPUs 1 (70%), 2 (10%), 4 (15%) or 8 (5%); its run time alone 60 x 10^U(1.5, 3) s with probability
0.8, else 60 x 10^U(3, 4) s; Poisson arrivals at the rate that keeps `--load` of the cluster's GPUs busy on
average (mean 1.9 GPUs x 60,363 s a job). Each job is one of the bench's own profiles
(`bench/traces/bench_profiles.csv`: the CPU pairs measured in FACTS.md section 6), drawn uniformly.
The cluster: `--hosts` hosts of 8 GPUs; xover's semantics (running jobs keep their devices), xover's model.

Each (size, policy) runs in a process of its own, so that its peak memory (ru_maxrss) is its own. Printed:
jobs, events, the replay's wall time, microseconds per job, peak RSS, and the growth exponent of wall time
against jobs between sizes (1.0: linear). Run it on a quiet machine: other work on the cores shows in the
times.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xover.plan.instances import JobInstance  # noqa: E402
from xover.plan.trace import load_trace_csv  # noqa: E402

PROFILES = ROOT / "bench" / "traces" / "bench_profiles.csv"
GPUS = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))
MEAN_GPUS = sum(gpus * share for gpus, share in GPUS)


def _mean_run_s() -> float:
    def mean_power(low: float, high: float) -> float:  # E[10^U(low, high)]
        return (10**high - 10**low) / ((high - low) * math.log(10))

    return 60 * (0.8 * mean_power(1.5, 3) + 0.2 * mean_power(3, 4))


def philly_like(jobs: int, hosts: int, load: float, seed: int) -> list[JobInstance]:
    """`jobs` instances drawn as the module says, for `hosts` hosts of 8 GPUs kept `load` busy."""
    rng = random.Random(seed)
    kinds = load_trace_csv(PROFILES)
    rate = load * hosts * 8 / (MEAN_GPUS * _mean_run_s())  # arrivals per second
    instances = []
    at = 0.0
    for index in range(jobs):
        at += rng.expovariate(rate)
        roll, gpus = rng.random(), 8
        for count, share in GPUS:
            if roll < share:
                gpus = count
                break
            roll -= share
        run_s = 60 * 10 ** (rng.uniform(1.5, 3) if rng.random() < 0.8 else rng.uniform(3, 4))
        kind = rng.choice(kinds)
        iterations = max(1, round(run_s * 1000 / kind.solo_ms))
        instances.append(JobInstance(f"job{index}", kind, iterations, at, devices=gpus))
    return instances


def one(size: int, policy: str, hosts: int, load: float, seed: int) -> dict:
    """One replay, in this process: its figures as a dict."""
    from xover.plan.throughput import XoverModel
    from xover.replay.engine import ReplayRules, replay
    from xover.replay.metrics import summarise
    from xover.replay.policies import POLICIES

    started = time.perf_counter()
    instances = philly_like(size, hosts, load, seed)
    drawn = time.perf_counter() - started
    started = time.perf_counter()
    outcome = replay(instances, [(f"n{i}", 8) for i in range(hosts)], POLICIES[policy], XoverModel(), ReplayRules())
    wall = time.perf_counter() - started
    summary = summarise(outcome)
    return {
        "jobs": size,
        "policy": policy,
        "events": outcome.events,
        "draw_s": drawn,
        "replay_s": wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "avg_jct_s": summary.avg_jct_s,
        "utilisation": summary.utilisation,
        "grouped_share": summary.grouped_share,
        "unfinished": len(outcome.unfinished),
    }


def write_trace(path: Path, instances: list[JobInstance]) -> None:
    """The drawn trace as a plain CSV for `xover simulate --profiles bench/traces/bench_profiles.csv`."""
    lines = ["arrival_s,gpus,duration_s,model,name"]
    lines += [f"{job.arrival_s:.3f},{job.gpus},{job.work_s:.3f},{job.kind.name},{job.name}" for job in instances]
    path.write_text("\n".join(lines) + "\n")


PHILLY_NEVER_STARTED = 0.05  # shares of the log's entries, about as many as in the log of the last measurement
PHILLY_STILL_RUNNING = 0.02
PHILLY_START = 1_506_816_000  # 2017-10-01 00:00:00 UTC, the month Philly's log begins


def write_philly(path: Path, instances: list[JobInstance], seed: int) -> None:
    """The drawn trace as Philly's job log (the schema of msr-fiddle/philly-traces' `cluster_job_log`), for
    `xover simulate --assign`: a job's one attempt starts at its arrival and ends its run time later (whole
    seconds), on `gpus // 8` machines of 8 GPUs or one of fewer; about PHILLY_NEVER_STARTED of the entries never
    started and PHILLY_STILL_RUNNING were still running (skipped when read, as the real log's are)."""
    rng = random.Random(seed + 1)

    def when(seconds: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(PHILLY_START + int(seconds)))

    with path.open("w") as handle:
        handle.write("[")
        for number, job in enumerate(instances):
            roll = rng.random()
            machines = [
                {"ip": f"m{host}", "gpus": [f"gpu{gpu}" for gpu in range(min(8, job.gpus))]}
                for host in range(max(1, job.gpus // 8))
            ]
            end = "None" if roll < PHILLY_STILL_RUNNING else when(job.arrival_s + max(1.0, job.work_s))
            attempts = (
                []
                if roll > 1 - PHILLY_NEVER_STARTED
                else [{"start_time": when(job.arrival_s), "end_time": end, "detail": machines}]
            )
            entry = {
                "status": "Pass",
                "vc": "bench",
                "jobid": f"application_{number}",
                "attempts": attempts,
                "submitted_time": when(job.arrival_s),
                "user": "bench",
            }
            handle.write(("," if number else "") + "\n" + json.dumps(entry))
        handle.write("\n]\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 10000, 100000])
    parser.add_argument("--policies", nargs="+", default=["fifo", "srtf", "tiresias", "xover"])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-trace", type=Path, help="write the largest size's trace as a plain CSV, and stop")
    parser.add_argument(
        "--write-philly", type=Path, help="write the largest size's trace as Philly's job log (JSON), and stop"
    )
    parser.add_argument("--one", nargs=2, metavar=("SIZE", "POLICY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1], args.hosts, args.load, args.seed)))
        return
    if args.write_trace:
        write_trace(args.write_trace, philly_like(max(args.sizes), args.hosts, args.load, args.seed))
        print(f"wrote {args.write_trace}")
        return
    if args.write_philly:
        write_philly(args.write_philly, philly_like(max(args.sizes), args.hosts, args.load, args.seed), args.seed)
        print(f"wrote {args.write_philly}")
        return
    results = []
    for policy in args.policies:
        for size in args.sizes:
            command = [
                sys.executable,
                __file__,
                "--one",
                str(size),
                policy,
                "--hosts",
                str(args.hosts),
                "--load",
                str(args.load),
                "--seed",
                str(args.seed),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout)
            results.append(result)
            print(
                f"{policy:9} {size:>7} jobs: {result['replay_s']:7.1f} s, {result['peak_rss_mib']:6.0f} MiB",
                file=sys.stderr,
            )
    print(
        f"Philly-like traces (Gavel's distributions), {args.hosts} hosts x 8 GPUs, load {args.load}, seed {args.seed}"
    )
    print("| policy | jobs | events | replay (s) | us per job | peak RSS (MiB) | growth | avg JCT (s) | utilisation |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    previous: dict[str, dict] = {}
    for result in results:
        before = previous.get(result["policy"])
        growth = (
            math.log(result["replay_s"] / before["replay_s"]) / math.log(result["jobs"] / before["jobs"])
            if before and before["replay_s"] > 0
            else None
        )
        previous[result["policy"]] = result
        print(
            f"| {result['policy']} | {result['jobs']:,} | {result['events']:,} | {result['replay_s']:.2f} | "
            f"{result['replay_s'] / result['jobs'] * 1e6:.0f} | {result['peak_rss_mib']:.0f} | "
            f"{'-' if growth is None else f'{growth:.2f}'} | {result['avg_jct_s']:,.0f} | {result['utilisation']:.2f} |"
        )


if __name__ == "__main__":
    main()
