"""The replay against Muri's simulator, on Muri's own traces: the comparison table (theirs, ours, error).

    .venv/bin/python bench/muri_compare.py [--traces trace3 job_type_1] [--skip-xover-model]

Muri's figures are those of its public simulator (`Rivendile/Muri`, `simulator/run_sim.py
--cluster_spec=cluster_spec/n8g8.csv --scheme=yarn --multi_resource 4`, then `calc.py`) run as published on
a CPU (issue 61, docs/measurements.md): average JCT on trace3 (992 jobs, 64 GPUs): Tiresias (dlas-gpu)
347,213 s, SRTF (shortest) 193,082 s, Muri-L 88,687 s, Muri-S 83,242 s.

Replayed here on the same cluster (8 hosts x 8 GPUs), under `--semantics muri` (what Muri's simulator takes
for granted: every event re-decides everything, every running job pays its model's restart overhead at
every event, a job alone runs 1.015x its trace's iteration, first-fit placement, Tiresias by device count):
* no sharing: SRTF and Tiresias against Muri's, SRSF and FIFO beside them;
* sharing under Muri's interleaving factors (1.33 for 2 jobs, 1.5 for 3, 1.37 for 4): xover's grouping
  (groups of up to 4, over SRSF's order as Muri-S; over Tiresias' as Muri-L) against Muri-S and Muri-L;
* sharing under xover's own model (its simulation of the turn policy, concurrent and MPS; groups of 2),
  reported with the model named: the trace's resource times as data, compute and communication.
job_type_1 (BERT and GPT-2 only): xover's grouping against the best policy without sharing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xover.plan.throughput import MURI_ALONE_FACTOR, MURI_FACTORS, InterleaveModel, XoverModel  # noqa: E402
from xover.replay.engine import ReplayRules, replay  # noqa: E402
from xover.replay.metrics import summarise  # noqa: E402
from xover.replay.policies import POLICIES  # noqa: E402
from xover.replay.traces import load_trace  # noqa: E402

TRACES = ROOT / "bench" / "traces" / "muri"
HOSTS = [(f"n{index}", 8) for index in range(8)]  # Muri's cluster_spec/n8g8.csv
# average JCT (s) of Muri's simulator, as published, by trace and policy (its names: dlas-gpu, shortest,
# multi-resource-blossom-same-gpu-unaware, multi-resource-blossom-same-gpu)
MURI = {
    "trace3": {"tiresias": 347_213, "srtf": 193_082, "Muri-L": 88_687, "Muri-S": 83_242},
}
# (our policy, model, largest group, Muri's policy it is compared with)
RUNS = [
    ("fifo", "interleave", 1, None),
    ("srtf", "interleave", 1, "srtf"),
    ("srsf", "interleave", 1, None),
    ("tiresias", "interleave", 1, "tiresias"),
    ("xover", "interleave", 4, "Muri-S"),
    ("xover-las", "interleave", 4, "Muri-L"),
    ("xover", "xover", 2, None),
]


def rules(policy: str, max_group: int) -> ReplayRules:
    """--semantics muri, as `xover simulate` sets it."""
    placement = "anywhere" if POLICIES[policy].order == "attained-service" else "first-fit"
    return ReplayRules(
        placement=placement,
        reschedule="repack",
        restart="every-event",
        alone_factor=MURI_ALONE_FACTOR,
        max_group=max_group,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", default=["trace3", "job_type_1"])
    parser.add_argument("--skip-xover-model", action="store_true", help="leave out the replays under xover's model")
    args = parser.parse_args()
    rows = []
    for name in args.traces:
        trace = load_trace(TRACES / f"{name}.csv")
        alone = {job.name: job.alone_ms for job in trace.instances}
        found: dict[str, float] = {}
        for policy, model_name, max_group, theirs in RUNS:
            if model_name == "xover" and args.skip_xover_model:
                continue
            model = (
                InterleaveModel(MURI_FACTORS, MURI_ALONE_FACTOR, alone) if model_name == "interleave" else XoverModel()
            )
            started = time.perf_counter()
            outcome = replay(trace.instances, HOSTS, POLICIES[policy], model, rules(policy, max_group))
            wall = time.perf_counter() - started
            summary = summarise(outcome)
            label = policy if max_group == 1 else f"{policy} ({model_name}, groups of <= {max_group})"
            found[label] = summary.avg_jct_s
            reference = MURI.get(name, {}).get(theirs) if theirs else None
            rows.append(
                (
                    name,
                    label,
                    reference,
                    summary.avg_jct_s,
                    (summary.avg_jct_s / reference - 1) * 100 if reference else None,
                    summary.grouped_share,
                    wall,
                )
            )
            print(f"{name:10} {label:42} avg JCT {summary.avg_jct_s:12,.0f} s  ({wall:.1f} s)", file=sys.stderr)
        best = min((found[p] for p in ("fifo", "srtf", "srsf", "tiresias") if p in found), default=None)
        if best is not None:
            for label, value in found.items():
                if label.startswith("xover"):
                    print(f"{name}: {label} over the best without sharing: {value / best:.3f}", file=sys.stderr)
    print(
        "| trace | policy | Muri's simulator: avg JCT (s) | this replay: avg JCT (s) | error | grouped | replay (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, label, reference, ours, error, grouped, wall in rows:
        theirs = f"{reference:,.0f}" if reference else "-"
        shown = f"{error:+.2f}%" if error is not None else "-"
        print(f"| {name} | {label} | {theirs} | {ours:,.0f} | {shown} | {grouped:.0%} | {wall:.1f} |")


if __name__ == "__main__":
    main()
