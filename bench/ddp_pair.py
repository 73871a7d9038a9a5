"""Benchmark: an unmodified DDP script (recipes/examples/ddp_digits.py under torchrun) in crossover groups.

Two groups, each run sequential / concurrent / crossover under every turn policy, over an emulated
shared link, with the figures of bench/crossover_pair.py (per job and mode; aggregate throughput vs
sequential and concurrent; the model on this run's sequential medians - the fluid bound, each
policy's prediction, strict round robin's period; parity):
  ddp_digits + ddp_digits   two copies of the script (`xover run --script S --script S`)
  ddp_digits + RECIPE       the script next to a recipe, in one group
                            (`xover run --group RECIPE --script SCRIPT`)
The script's length is calibrated first (a short sequential run of each job alone) so that it
lasts longer than its partner alone, by `--margin`: it overlaps its partner for the whole run, and
the aggregate is measured over the time both ran past their warm-up. The model takes each recipe's
interference from its stored profile, as `xover report` does (a script has none).
Usage:

    .venv/bin/python bench/ddp_pair.py [--recipe resnet-synthetic] [--bandwidth 1gbit] [--iterations 60]
                                       [--script-args "--hidden 1024 --batch-size 256"]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import xover  # noqa: E402
from xover.analysis import group_model, profile_of_run  # noqa: E402
from xover.links import HOST, Link  # noqa: E402
from xover.plan import round_robin_gain, round_robin_period  # noqa: E402
from xover.results import RunResult  # noqa: E402
from xover.store.models import utcnow  # noqa: E402
from xover.store.profiles import stored_interference  # noqa: E402
from xover.store.session import open_store  # noqa: E402

SCRIPT = "recipes/examples/ddp_digits.py"
LOSS_LINE = re.compile(r"^(?:step \d+|final) loss \S+$", re.MULTILINE)


def run_with_recipe(recipe: str, iterations: int, bandwidth: str, mode: str, script_args: list[str]) -> dict:
    """The script and a recipe in one group: `xover run --group RECIPE --script SCRIPT -- ARGS`."""
    return xover(
        "run",
        "--engine",
        "torch",
        "--group",
        recipe,
        "--script",
        SCRIPT,
        "--iterations",
        str(iterations),
        "--bandwidth",
        bandwidth,
        "--mode",
        mode,
        "--policy",
        "all",
        "--",
        *script_args,
    )


def calibrate(recipe: str, iterations: int, bandwidth: str, script_args: list[str], margin: float) -> int:
    """Steps for the script: its time per step alone vs the partner's whole run alone, times margin."""
    probe = run_with_recipe(recipe, max(10, iterations // 3), bandwidth, "sequential", [*script_args, "--steps", "40"])
    by = {j["name"]: j for j in probe["jobs"]}
    partner_s = by[recipe]["iteration_ms"] * iterations / 1000
    steps = math.ceil(margin * partner_s * 1000 / by["ddp_digits"]["iteration_ms"])
    print(
        f"  calibration: {recipe} {by[recipe]['iteration_ms']:.1f} ms/iteration x {iterations} = {partner_s:.1f} s "
        f"alone; ddp_digits {by['ddp_digits']['iteration_ms']:.1f} ms/step -> {steps} steps",
        flush=True,
    )
    return steps


def printed_losses(log_dir: str) -> list[str] | None:
    found = list(Path(log_dir).glob("ranks/**/attempt_*/0/stdout.log"))
    return LOSS_LINE.findall(found[0].read_text()) if found else None


def report_group(report: dict, bandwidth: str) -> tuple[float, float, float]:
    jobs = report["jobs"]
    names = list(dict.fromkeys(j["name"] for j in jobs))
    by = {(j["name"], j["mode"], j["policy"]): j for j in jobs}
    [group] = report["groups"]
    print(f"\nexperiment {report['experiment']}  engine torch  bandwidth {bandwidth}")
    print(
        f"{'job':16} {'mode':11} {'policy':16} {'iters':>5} {'samples/s':>10} {'iter ms':>8} {'compute':>8} "
        f"{'comm':>8} {'wait':>7} {'slowdown':>8}"
    )
    for j in jobs:
        device_ms = j["compute_ms"] + (j["data_ms"] or 0.0) if j["compute_ms"] is not None else None
        print(
            f"{j['name']:16} {j['mode']:11} {j['policy'] or '':16} {j['iterations']:5d} {_num(j['samples_per_s'], 10)} "
            f"{_num(j['iteration_ms'], 8)} {_num(device_ms, 8)} {_num(j['communication_ms'], 8)} "
            f"{_num(j['wait_ms'], 7)} {_num(j['slowdown'], 8, 2)}"
        )

    link = Link.parse(bandwidth) or HOST
    alone = {n: RunResult.from_summary(by[(n, "sequential", None)]) for n in names}
    with open_store(None).session() as session:  # as `xover report` does: a recipe's interference from its profile
        for n, job in alone.items():
            interference, link_share = stored_interference(session, by[(n, "sequential", None)], link.key, utcnow())
            alone[n] = dataclasses.replace(job, interference=interference, interference_link_share=link_share)
    print(
        "interference from stored profiles (a script has none): "
        + ", ".join(f"{n} {alone[n].interference:+.0%}" for n in names)
    )
    # the model on this run's sequential medians: the fluid bound (no schedule does better), each
    # policy simulated, and strict round robin's closed form period max(sum c, sum m, max c+m)
    model = group_model([alone[n] for n in names], link, sorted(group["policies"]))
    profiles = [profile_of_run(alone[n], link) for n in names]
    period = round_robin_period(profiles)
    bound = model.fluid_bound
    concurrent = group["concurrent_vs_sequential"]
    print("\naggregate throughput over the overlap, each job normalised by its speed alone (sequential = 1.00):")
    print(
        f"  concurrent / sequential   {_x(concurrent)}   (the jobs overlapped "
        f"{_pct(group['concurrent_overlap'])} of the run)"
    )
    for policy, entry in group["policies"].items():
        measured = entry["aggregate"]
        simulated = model.predicted.get(policy)
        predicted = simulated.gain if simulated is not None else None
        period_ms = statistics.mean(by[(n, "crossover", policy)]["iteration_ms"] for n in names)
        print(
            f"  crossover {policy:15} / sequential {_x(measured)}, / concurrent {_x(entry['vs_concurrent'])}, "
            f"{_pct(measured / bound if measured and bound else None)} of the bound; predicted {_x(predicted)} "
            f"(error {_signed_pct(measured / predicted - 1 if measured and predicted else None)}); "
            f"mean period {period_ms:.1f} ms; together {_num(entry['window_s'], 0)} s = {_pct(entry['overlap'])} "
            f"of the mode's time"
        )
    print(
        f"  model: fluid bound {_x(bound)}; strict round robin {_x(round_robin_gain(profiles))} "
        f"(period max(sum c, sum m, max c+m) = {period:.1f} ms)"
    )
    for n in names:
        alone_losses = printed_losses(alone[n].log_dir) if n.startswith("ddp_digits") else None
        for policy in group["policies"]:
            shared = by[(n, "crossover", policy)]
            if alone_losses is not None:  # the script's own printed losses, every logged step
                same = printed_losses(shared["log_dir"]) == alone_losses
                what = f"{len(alone_losses)} printed losses"
            else:
                same = shared["final_loss"] == alone[n].final_loss
                what = f"final loss {alone[n].final_loss!r}"
            print(f"  parity {n} ({policy}): {what} alone vs crossover -> {'equal' if same else 'DIFFERENT'}")
    chosen = group["policies"][group["crossover_policy"]]
    return chosen["aggregate"], chosen["vs_concurrent"], bound


def _num(value: float | None, width: int, digits: int = 1) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "n/a"


def _pct(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value is not None else "n/a"


def _signed_pct(value: float | None) -> str:
    return f"{100 * value:+.1f}%" if value is not None else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="resnet-synthetic", help="the script's partner in the second group")
    parser.add_argument("--bandwidth", default="1gbit")
    parser.add_argument("--iterations", type=int, default=150, help="the recipe's iterations")
    parser.add_argument("--steps", type=int, default=150, help="the script's steps in the pair of copies")
    parser.add_argument("--script-args", default="--hidden 1024 --batch-size 256 --log-every 1")
    parser.add_argument("--margin", type=float, default=1.6, help="the script's time alone / its partner's")
    args = parser.parse_args()
    script_args = shlex.split(args.script_args)
    summary = []

    report = xover(
        "run",
        "--engine",
        "torch",
        "--script",
        SCRIPT,
        "--script",
        SCRIPT,
        "--bandwidth",
        args.bandwidth,
        "--mode",
        "all",
        "--policy",
        "all",
        "--",
        *script_args,
        "--steps",
        str(args.steps),
    )
    summary.append(("ddp_digits + ddp_digits", *report_group(report, args.bandwidth)))

    steps = calibrate(args.recipe, args.iterations, args.bandwidth, script_args, args.margin)
    report = run_with_recipe(args.recipe, args.iterations, args.bandwidth, "all", [*script_args, "--steps", str(steps)])
    summary.append((f"ddp_digits + {args.recipe}", *report_group(report, args.bandwidth)))

    print(f"\n{'group':34} {'xover/seq':>9} {'xover/conc':>10} {'bound':>6} {'of bound':>8}   (work-conserving)")
    for name, crossover, vs_concurrent, bound in summary:
        print(
            f"{name:34} {_x(crossover):>9} {_x(vs_concurrent):>10} {_x(bound):>6} "
            f"{_pct(crossover / bound if crossover and bound else None):>8}"
        )


if __name__ == "__main__":
    main()
