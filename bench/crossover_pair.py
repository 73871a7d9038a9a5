"""Benchmark: pairs of jobs in the three modes, the model's ideal, and the token's costs.

Prints figures measured side by side in one run (the machine is shared and noisy: compare ratios,
not absolute numbers across runs). Two pairs by default:
  resnet-synthetic:mlp-synthetic  complementary (compute-heavy + communication-heavy)
  mlp-balanced:mlp-balanced       two copies of a job whose compute ~ communication
Usage:

    .venv/bin/python bench/crossover_pair.py [--pairs A:B ...] [--engines horovod torch]
                                             [--bandwidth 1gbit] [--iterations 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xover.planner import JobProfile, group_gain, predicted_period  # noqa: E402
from xover.runtime.turn_client import CrossoverToken  # noqa: E402


def start_turn_server(path: str, devices: list[str]) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "xover.turns.server", "--socket", path,
                               *[f"--device={d}" for d in devices]], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert server.stdout.readline().strip() == "ready"
    return server


def _ping_pong(path: str, slot: int, rounds: int, out: "list[tuple[int, int, int]]") -> None:
    token = CrossoverToken(path, 0, slot)
    for i in range(rounds):
        token.acquire()
        granted = time.perf_counter_ns()
        released = time.perf_counter_ns()
        out.append((slot, i, granted, released))
        token.release()
    token.close()


def handoff_latency(rounds: int = 3000) -> dict[str, float]:
    """Time from one job's release to the next job's grant (both in this process's threads would
    share the GIL, so each job is its own process)."""
    import multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server = start_turn_server(path, ["0=0,1"])
        queue: mp.Queue = mp.Queue()

        def job(slot):
            records: list = []
            _ping_pong(path, slot, rounds, records)
            queue.put(records)

        procs = [mp.Process(target=job, args=(slot,)) for slot in (0, 1)]
        for p in procs:
            p.start()
        records = queue.get() + queue.get()
        for p in procs:
            p.join()
        server.terminate()
    records.sort(key=lambda r: r[2])
    gaps = [(b[2] - a[3]) / 1000 for a, b in zip(records, records[1:]) if a[0] != b[0]][50:]
    gaps.sort()
    return {"median_us": statistics.median(gaps), "p90_us": gaps[int(len(gaps) * 0.9)], "handoffs": len(gaps)}


def waiting_cpu(seconds: float = 5.0) -> float:
    """Percent of a core used by a job blocked waiting for its turn while its partner holds it."""
    import multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server = start_turn_server(path, ["0=0,1"])
        waiter = mp.Process(target=_ping_pong, args=(path, 1, 1, []))
        waiter.start()
        holder = CrossoverToken(path, 0, 0)
        holder.acquire()  # slot 0 goes first: the waiter (slot 1) is now blocked until the release
        time.sleep(0.5)
        proc = psutil.Process(waiter.pid)
        before = sum(proc.cpu_times()[:2])
        time.sleep(seconds)
        used = sum(proc.cpu_times()[:2]) - before
        holder.release()
        waiter.join()
        holder.close()
        server.terminate()
    return 100.0 * used / seconds


def xover(*args: str) -> dict:
    command = [str(ROOT / ".venv/bin/xover"), *args, "--json"]
    print("$ xover", " ".join(args), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        sys.exit(result.stderr[-4000:])
    return json.loads(result.stdout)


def run_pair(pair: list[str], bandwidth: str, iterations: int, engine: str) -> tuple[dict, dict | None]:
    """Distinct recipes: profile, plan, then run the plan (so the plan's prediction meets the
    measurement). The same recipe twice cannot be planned (job names must differ): run as a group."""
    link = ["--bandwidth", bandwidth] if bandwidth else []
    if len(set(pair)) == len(pair):
        xover("profile", *pair, *link, "--engine", engine, "--force")
        plan_path = str(ROOT / "results" / "bench-plan.json")
        plan = xover("plan", *pair, "--devices", "2", "--max-group", str(len(pair)), *link, "--out", plan_path)
        if len(plan["groups"]) == 1 and len(plan["groups"][0]["jobs"]) == len(pair):
            return xover("run", plan_path, "--mode", "all", "--iterations", str(iterations), *link,
                         "--engine", engine), plan
        print("  (the planner would not group this pair; running it as an ad-hoc group)")
    return xover("run", "--group", *pair, "--mode", "all", "--iterations", str(iterations), *link,
                 "--engine", engine), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=["resnet-synthetic:mlp-synthetic", "mlp-balanced:mlp-balanced"])
    parser.add_argument("--bandwidth", default="1gbit")
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--engines", nargs="+", default=["horovod", "torch"])
    parser.add_argument("--skip-token", action="store_true")
    args = parser.parse_args()
    summary = []
    for pair in args.pairs:
        for engine in args.engines:
            summary.append((pair, engine, *bench_pair(pair.split(":"), args.bandwidth, args.iterations, engine)))
    print(f"\n{'pair':34} {'engine':8} {'xover/seq':>9} {'xover/conc':>10} {'ideal':>6} {'of ideal':>8}")
    for pair, engine, crossover, vs_concurrent, ideal in summary:
        print(f"{pair:34} {engine:8} {crossover:9.2f} {vs_concurrent:10.2f} {ideal:6.2f} {100 * crossover / ideal:7.0f}%")
    if not args.skip_token:
        latency = handoff_latency()
        print(f"\ncrossover token: handoff median {latency['median_us']:.0f} us, p90 {latency['p90_us']:.0f} us "
              f"over {latency['handoffs']} handoffs between two processes")
        print(f"crossover token: a job waiting for its turn uses {waiting_cpu():.2f}% of a core")


def bench_pair(pair: list[str], bandwidth: str, iterations: int, engine: str) -> tuple[float, float, float]:
    report, plan = run_pair(pair, bandwidth, iterations, engine)
    jobs = report["jobs"]
    names = [j["name"] for j in jobs if j["mode"] == "crossover"]  # a recipe twice runs as name, name#2
    by = {(j["name"], j["mode"]): j for j in jobs}
    print(f"\nexperiment {report['experiment']}  engine {engine}  bandwidth {bandwidth}  iterations {iterations}")
    print(f"{'job':22} {'mode':11} {'samples/s':>10} {'iter ms':>8} {'compute':>8} {'comm':>8} {'wait':>7} {'slowdown':>8}")
    for j in jobs:
        print(f"{j['name']:22} {j['mode']:11} {j['samples_per_s']:10.1f} {j['iteration_ms']:8.1f} "
              f"{j['compute_ms'] + j['data_ms']:8.1f} {j['communication_ms']:8.1f} {j['wait_ms']:7.1f} "
              f"{j['slowdown'] or 0:8.2f}")

    profiles = [JobProfile(name=n, devices=by[(n, "sequential")]["np"], compute_ms=by[(n, "sequential")]["compute_ms"],
                           data_ms=by[(n, "sequential")]["data_ms"], comm_ms=by[(n, "sequential")]["communication_ms"],
                           memory_gb=0.0) for n in names]
    period = predicted_period(profiles)
    ideal = group_gain(profiles)
    [group] = report["groups"]
    crossover, concurrent = group["crossover_vs_sequential"], group["concurrent_vs_sequential"]
    measured_period = statistics.mean(by[(n, "crossover")]["iteration_ms"] for n in names)
    print("\naggregate throughput, each job normalised by its speed alone (sequential = 1.00):")
    print(f"  concurrent / sequential   {concurrent:.2f}x")
    print(f"  crossover  / sequential   {crossover:.2f}x")
    print(f"  crossover  / concurrent   {group['crossover_vs_concurrent']:.2f}x")
    print(f"  model ideal (period = max(sum c, sum m, max c+m) = {period:.1f} ms)   {ideal:.2f}x")
    print(f"  crossover as a fraction of the ideal   {100 * crossover / ideal:.0f}%")
    print(f"  model on this run's sequential medians: period {period:.1f} ms vs measured {measured_period:.1f} ms under crossover "
          f"(error {100 * (measured_period - period) / period:+.1f}%); predicted gain {ideal:.2f} vs measured "
          f"{crossover:.2f} (error {100 * (crossover - ideal) / ideal:+.1f}%)")
    if plan is not None:
        [planned] = plan["groups"]
        p_period, p_gain = planned["predicted_period_ms"], planned["predicted_gain"]
        print(f"  plan (xover profile + xover plan): predicted period {p_period:.1f} ms vs measured {measured_period:.1f} ms "
              f"(error {100 * (measured_period - p_period) / p_period:+.1f}%); predicted gain {p_gain:.2f} vs measured "
              f"{crossover:.2f} (error {100 * (crossover - p_gain) / p_gain:+.1f}%)")
    for n in names:
        alone, cross = by[(n, "sequential")]["final_loss"], by[(n, "crossover")]["final_loss"]
        print(f"  parity {n}: final loss alone {alone!r} vs crossover {cross!r} -> {'equal' if alone == cross else 'DIFFERENT'}")
    return crossover, group["crossover_vs_concurrent"], ideal



if __name__ == "__main__":
    main()
