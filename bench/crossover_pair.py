"""Benchmark: pairs of jobs in every mode and turn policy, against the model, side by side per pair.

For each engine, every recipe is profiled at the emulated link rate (`xover profile --force`: alone,
then next to the reference partner for its interference).
Then for each pair, in one `xover run --mode all --policy all --seconds S` (each job gets the
iterations it does in about S seconds alone, so the two overlap from start to end):
  sequential (each alone), concurrent (no coordination), crossover under each policy, adaptive (turns
  and none measured while it runs, under the default policy). With --repeats, every other repeat runs
  the ways after sequential in the reverse order (adaptive, crossover, concurrent; --order fixed: never),
  so a machine that slows within a row costs each way alike over two repeats, not always the last.
Before each pair's run, what `xover plan` would pick for it now and why (from the stored profiles, and
the pair's measurements from earlier runs where the store has them); after it, adaptive against the best
of crossover and concurrent, its time in each way and its decisions (an adaptive group whose two ways earlier
runs measured clearly apart settles on them without probing: XOVER_ADAPTIVE=measured=probe makes every row
probe); at the end the issue-60 targets over every row (and, with --repeats, on each way's mean over a pair's
runs, and against the bench's own noise: how much one way moves from one run of a row to the next), and a
re-plan of each pair from what the bench just measured against what it measured.
Printed per pair: each job's speed relative to alone (measured over the time both ran, and predicted by
the simulation of the policy from the profiles), the aggregate (sum of speeds), crossover vs concurrent,
the fluid bound and crossover's fraction of it, turn waiting (p50/p90), rank skew, the socket
priority a job's all-reduces carried on the link (6: served first; 0: the default band), and each
job's device time alone in the run over its profile's (the machine's drift since profiling, which
moves every speed relative to alone; the prediction's hit rate is also given over the rows within 10%),
and the same model's prediction from the row's own runs alone (`xover report`'s, which no drift since
profiling moves: what is left of its error is the model's; the planner's own prediction is the one from
the profiles).
Figures are ratios measured in one run: the machine is shared and noisy, compare within a row.

    .venv/bin/python bench/crossover_pair.py [--pairs A:B ...] [--engines horovod torch]
                                             [--bandwidth 1gbit] [--seconds 15] [--skip-token]
                                             [--repeats N] [--order alternate|fixed]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import xover  # noqa: E402
from xover.analysis import alone_vs_profile, model_of_profiles  # noqa: E402
from xover.links import HOST, Link  # noqa: E402
from xover.plan import predict_group  # noqa: E402
from xover.plan.make import local_hosts  # noqa: E402
from xover.plan.predict import pick_sharing, predict_considered  # noqa: E402
from xover.plan.step import copies_named, measurements_of, profiles_of_recipes  # noqa: E402
from xover.recipes import load_recipe  # noqa: E402
from xover.report.data import find_experiment, jobs_and_groups  # noqa: E402
from xover.results import RunResult  # noqa: E402
from xover.run.adaptive import AdaptiveSettings  # noqa: E402
from xover.runtime.turn_client import CrossoverToken  # noqa: E402
from xover.store.models import IterationMetric, Run, SharingSegment  # noqa: E402
from xover.store.session import open_store  # noqa: E402
from xover.turns import DEFAULT_POLICY, POLICIES  # noqa: E402

# (pair, kind): compute-heavy with communication-heavy, balanced, compute-heavy with compute-heavy;
# `make demo`'s plan forms communication-heavy + balanced and the first two compute-heavy
# (on the emulated cluster, from profiles taken there).
PAIRS = [
    ("resnet-synthetic:mlp-synthetic", "compute-heavy + communication-heavy"),
    ("resnet-synthetic:vgg-synthetic", "compute-heavy + communication-heavy"),
    ("transformer-chars:mlp-balanced", "compute-heavy + balanced"),
    ("mlp-balanced:mlp-balanced", "two balanced"),
    ("mlp-synthetic:mlp-balanced", "communication-heavy + balanced (demo group)"),
    ("resnet-synthetic:transformer-chars", "two compute-heavy (demo group)"),
    ("resnet-synthetic:resnet-digits", "two compute-heavy"),
]
POLICY_ORDER = [DEFAULT_POLICY] + [p for p in POLICIES if p != DEFAULT_POLICY]


def predictions(pair: list[str], bandwidth: str, engine: str) -> dict:
    """The model from the stored profiles, as `xover plan` reads them: fluid bound, each policy's
    predicted speeds."""
    recipes = copies_named([load_recipe(name) for name in pair])  # two copies: name, name#2, as the run names them
    profiles, _, _, _ = profiles_of_recipes(None, recipes, Link.parse(bandwidth), engine=engine)
    model = model_of_profiles(profiles, POLICIES)
    blind = [dataclasses.replace(profile, interference=0.0) for profile in profiles]
    pick = plans_pick(pair, profiles, bandwidth, engine)
    return {
        "fluid": model.fluid_bound,
        "policies": {policy: simulated.speeds for policy, simulated in model.predicted.items()},
        "concurrent": model.without_turns["concurrent"].gain,
        "pick": pick.sharing,
        "pick_reason": pick.reason,
        "without_interference": predict_group(blind, DEFAULT_POLICY).gain,
        "interference": {p.name: p.interference for p in profiles},
        "profiles": profiles,
    }


def plans_pick(pair: list[str], profiles: list, bandwidth: str, engine: str):
    """What `xover plan` of the pair would pick now, and why: from the profiles, and the pair's measurements
    kept from earlier runs where the store has some (a pair of two copies is keyed by one recipe twice)."""
    recipes = [load_recipe(name) for name in pair]
    identities = measurements_of(
        None, list({r.name: r for r in recipes}.values()), engine, local_hosts(2), Link.parse(bandwidth) or HOST
    )
    named = dataclasses.replace(
        identities, identities={p.name: identities.identities[p.name.split("#")[0]] for p in profiles}
    )
    predictions, sources = predict_considered(profiles, DEFAULT_POLICY, measured=named)
    return pick_sharing(predictions, profiles, sources)


STATE_WAYS = {"crossover": ("crossover", DEFAULT_POLICY), "concurrent": ("concurrent", None)}  # its column's run


def state_compute(experiment_id: str, warmup: int = 5) -> dict[str, float]:
    """Each job's compute per iteration in adaptive's turns and free states (its probe and settled stretches)
    over the same job's in the row's crossover (default policy) and concurrent runs, averaged over the jobs,
    by way: whether a state ran its device as fast as the same way's own run in the row. Compute is the
    device's work alone (no turn wait, no exposed all-reduce), so a ratio away from 1 is the machine (it
    slowed or sped up between the two runs) or the thread policy (adaptive's free state keeps crossover's
    SCHED_BATCH communication threads, which plain concurrent runs without), not the decision."""
    store = open_store(None)
    try:
        with store.session() as session:
            runs = session.query(Run).filter(Run.experiment_id == experiment_id, Run.status == "finished").all()
            segments = (
                session.query(SharingSegment)
                .filter(SharingSegment.experiment_id == experiment_id, SharingSegment.kind.in_(("probe", "settled")))
                .all()
            )
            stretches = {
                way: [(s.started, s.ended) for s in segments if s.way == way and s.ended] for way in STATE_WAYS
            }
            iterations = {
                run.id: [
                    (i.wall_time, i.compute_s)
                    for i in session.query(IterationMetric).filter(
                        IterationMetric.run_id == run.id, IterationMetric.step >= warmup
                    )
                ]
                for run in runs
            }
    finally:
        store.close()
    ratios: dict[str, list[float]] = {way: [] for way in STATE_WAYS}
    for name in {run.name for run in runs}:
        of_job = {(run.mode, run.policy): run.id for run in runs if run.name == name}
        adaptive = of_job.get(("adaptive", DEFAULT_POLICY))
        for way, column in STATE_WAYS.items():
            if adaptive is None or column not in of_job:
                continue
            inside = [c for t, c in iterations[adaptive] if any(a <= t <= b for a, b in stretches[way])]
            alone = [c for _, c in iterations[of_job[column]]]
            if len(inside) >= 5 and alone and statistics.fmean(alone) > 0:
                ratios[way].append(statistics.fmean(inside) / statistics.fmean(alone))
    return {way: statistics.fmean(values) for way, values in ratios.items() if values}


def model_from_runs_alone(experiment_id: str):
    """The default policy's and concurrent's simulated gains from the comparison's own runs alone, as
    `xover report` computes them: the model given the machine as it was during the row, not when it was
    profiled; and the group as the report has it (adaptive's timeline)."""
    store = open_store(None)
    try:
        with store.session() as session:
            experiment = find_experiment(session, experiment_id, "the bench's store")
            _, [group] = jobs_and_groups(session, experiment)
    finally:
        store.close()
    simulated = group.simulated.get(DEFAULT_POLICY)
    concurrent = group.model.without_turns.get("concurrent")
    return (
        simulated.gain if simulated is not None else None,
        concurrent.gain if concurrent is not None else None,
        group,
    )


MODES_FORWARD = "sequential,concurrent,crossover,adaptive"  # as `--mode all` runs them
MODES_REVERSED = "sequential,adaptive,crossover,concurrent"


def bench_pair(pair: list[str], bandwidth: str, seconds: float, engine: str, modes: str = MODES_FORWARD) -> dict:
    model = predictions(pair, bandwidth, engine)
    print(f"\n{':'.join(pair)} ({engine}): the plan would pick {model['pick']}: {model['pick_reason']}")
    report = xover(
        "run",
        "--group",
        *pair,
        "--mode",
        modes,
        "--policy",
        "all",
        "--seconds",
        str(seconds),
        "--bandwidth",
        bandwidth,
        "--engine",
        engine,
    )
    [group] = report["groups"]
    jobs = [RunResult.from_summary(job) for job in report["jobs"]]
    print(
        f"\nexperiment {report['experiment']}  engine {engine}  link {bandwidth}  ~{seconds:g} s per job alone"
        f"  run in the order {modes.replace(',', ', ')}"
    )
    print(
        f"{'job':20} {'mode':11} {'policy':16} {'samples/s':>9} {'speed':>6} {'predicted':>9} {'iter ms':>8} "
        f"{'wait p50':>8} {'p90':>6} {'yields':>6} {'skew p50':>8} {'p90':>6} {'link prio':>9}"
    )
    for j in jobs:
        predicted = model["policies"].get(j.policy or "", {}).get(j.name) if j.mode == "crossover" else None
        print(
            f"{j.name:20} {j.mode:11} {j.policy or '-':16} {j.samples_per_s or 0:9.1f} "
            f"{_f(j.speed, 6, 2)} {_f(predicted, 9, 2)} {_f(j.iteration_ms, 8, 1)} {_f(j.wait_ms, 8, 1)} "
            f"{_f(j.wait_p90_ms, 6, 1)} {j.yields or 0:6d} {_f(j.skew_p50_ms, 8, 2)} "
            f"{_f(j.skew_p90_ms, 6, 2)} {_f(j.link_priority, 9, 0)}"
        )
    concurrent = group["concurrent_vs_sequential"]
    # each job's device time alone in this run over its profile's: the machine's drift since profiling,
    # which moves every speed relative to alone (and so the prediction's error) by about as much
    profiled = {profile.name: profile.device_ms for profile in model["profiles"]}
    drift = {j.name: alone_vs_profile(j, profiled.get(j.name)) for j in jobs if j.mode == "sequential"}
    drift = {name: ratio for name, ratio in drift.items() if ratio is not None}
    from_alone, concurrent_from_alone, reported = model_from_runs_alone(report["experiment"])
    row = {
        "pair": ":".join(pair),
        "engine": engine,
        "concurrent": concurrent,
        "fluid": model["fluid"],
        "policies": {},
        "without_interference": model["without_interference"],
        "alone_vs_profile": drift,
        "predicted_from_alone": from_alone,
        "concurrent_predicted": model["concurrent"],
        "concurrent_from_alone": concurrent_from_alone,
        "pick": model["pick"],
        "pick_reason": model["pick_reason"],
        "adaptive": group.get("adaptive_vs_sequential"),
        "adaptive_time": reported.time_in_ways,
        "adaptive_way": reported.adaptive_way,
        "decisions": [s["decision"] for s in reported.timeline if s["kind"] == "settled"],
        "windows": [(s["way"], s["aggregate"]) for s in reported.timeline if s["kind"] == "probe" and s["aggregate"]],
    }
    for policy in POLICY_ORDER:
        entry = group["policies"].get(policy, {})
        predicted = sum(model["policies"][policy].values())
        row["policies"][policy] = {
            "aggregate": entry.get("aggregate"),
            "vs_concurrent": entry.get("vs_concurrent"),
            "predicted": predicted,
        }
    default = row["policies"][DEFAULT_POLICY]
    print(
        f"\n  sequential 1.00 | concurrent {_f(concurrent, 0, 2)} | "
        + " | ".join(
            f"crossover {p} {_f(v['aggregate'], 0, 2)} ({_f(v['vs_concurrent'], 0, 2)}x concurrent, "
            f"predicted {v['predicted']:.2f})"
            for p, v in row["policies"].items()
        )
    )
    if default["aggregate"]:
        print(
            f"  fluid bound {model['fluid']:.2f}: crossover ({DEFAULT_POLICY}) reaches "
            f"{default['aggregate'] / model['fluid']:.0%}; "
            f"prediction error {_error_pct(default['predicted'], default['aggregate']):+.1f}% "
            f"(interference measured next to the reference partner: "
            + ", ".join(f"{name} {value:+.0%}" for name, value in model["interference"].items())
            + f"; without it: predicted {model['without_interference']:.2f}, "
            f"{_error_pct(model['without_interference'], default['aggregate']):+.1f}%)"
        )
    if default["aggregate"] and from_alone:
        print(
            f"  predicted from this run's jobs alone (the model without the drift since profiling): {from_alone:.2f}, "
            f"{_error_pct(from_alone, default['aggregate']):+.1f}%"
        )
    if concurrent:
        print(
            f"  concurrent predicted {model['concurrent']:.2f} from the profiles "
            f"({_error_pct(model['concurrent'], concurrent):+.1f}%)"
            + (
                f", {concurrent_from_alone:.2f} from this run's jobs alone "
                f"({_error_pct(concurrent_from_alone, concurrent):+.1f}%)"
                if concurrent_from_alone
                else ""
            )
        )
    measured_ways = {"concurrent": concurrent, "crossover": default["aggregate"]}
    best = max((way for way in measured_ways if measured_ways[way]), key=lambda way: measured_ways[way], default=None)
    measured_ways["adaptive"] = row["adaptive"]
    if best and measured_ways.get(row["pick"]):
        row["pick_vs_best"] = measured_ways[row["pick"]] / measured_ways[best]
        print(f"  the plan's pick: {row['pick']}; best measured: {best}; pick / best {row['pick_vs_best']:.3f}")
    if best and row["adaptive"]:
        row["adaptive_vs_best"] = row["adaptive"] / measured_ways[best]
        row["adaptive_vs_concurrent"] = row["adaptive"] / concurrent if concurrent else None
        print(
            f"  adaptive {row['adaptive']:.2f}: {row['adaptive_vs_best']:.3f} of the best of crossover and concurrent "
            f"({best}); settled in {reported.adaptive_way}; time "
            + ", ".join(f"{way} {share:.0%}" for way, share in reported.time_in_ways.items())
        )
        for segment in reported.timeline:
            if segment["kind"] in ("probe", "settled"):
                print(
                    f"    {segment['kind']:8} {segment['way']:11} "
                    f"{_f(segment.get('aggregate'), 6, 3)}  {segment['reason']}"
                )
        row["state_compute"] = state_compute(report["experiment"])
        if row["state_compute"]:
            print(
                "  adaptive's compute per iteration over its column's run's: "
                + ", ".join(f"{way} {ratio:.2f}" for way, ratio in row["state_compute"].items())
            )
    print(
        "  device time alone in this run / in its profile: "
        + ", ".join(f"{name} {ratio:.2f}" for name, ratio in drift.items())
    )
    parity = [(j.name, j.final_loss) for j in jobs]
    losses = {}
    for name, loss in parity:
        losses.setdefault(name, set()).add(loss)
    print(
        "  final losses equal in every mode and policy: "
        + ", ".join(f"{name} {'yes' if len(values) == 1 else 'NO ' + str(values)}" for name, values in losses.items())
    )
    return row


def worst_drift(row: dict) -> float | None:
    """The job's alone / profile device time farthest from 1 in the row."""
    ratios = list(row["alone_vs_profile"].values())
    return max(ratios, key=lambda ratio: abs(ratio - 1.0)) if ratios else None


def _error_pct(predicted: float, measured: float) -> float:
    return 100 * (predicted / measured - 1)


def print_prediction_errors(rows: list[dict], steady: float = 0.1) -> None:
    """How many predictions are within 5%: of all rows, of the rows whose jobs ran alone within
    `steady` of their profiles (where the machine kept its speed, so the error is the model's), and
    of the predictions from each row's own runs alone (the model with no drift at all)."""
    measured = [r for r in rows if r["policies"][DEFAULT_POLICY]["aggregate"]]
    errors = [
        (
            abs(_error_pct(r["policies"][DEFAULT_POLICY]["predicted"], r["policies"][DEFAULT_POLICY]["aggregate"])),
            worst_drift(r),
        )
        for r in measured
    ]
    kept = [error for error, drift in errors if drift is not None and abs(drift - 1.0) <= steady]
    from_alone = [
        abs(_error_pct(r["predicted_from_alone"], r["policies"][DEFAULT_POLICY]["aggregate"]))
        for r in measured
        if r.get("predicted_from_alone")
    ]
    print(
        f"\nprediction ({DEFAULT_POLICY}) within 5% of measured: {sum(e <= 5 for e, _ in errors)} of {len(errors)} "
        "rows; "
        f"on the {len(kept)} rows whose jobs ran alone within {steady:.0%} of their profiles: "
        f"{sum(e <= 5 for e in kept)} of {len(kept)}; "
        f"predicted from each row's own runs alone: {sum(e <= 5 for e in from_alone)} of {len(from_alone)}"
        + (
            f" (mean error {statistics.mean(from_alone):.1f}%, from the profiles "
            f"{statistics.mean(e for e, _ in errors):.1f}%)"
            if from_alone
            else ""
        )
    )


def print_sharing(rows: list[dict]) -> None:
    """Concurrent predicted against measured (from the profiles and from each row's runs alone), and the
    plan's pick against the best mode measured."""
    print("\nconcurrent predicted vs measured, and the plan's pick vs the best measured mode")
    print(
        f"{'pair':36} {'engine':8} {'conc':>5} {'predicted':>9} {'error':>6} {'from alone':>10} {'error':>6} "
        f"{'pick':>10} {'pick/best':>9}"
    )
    for row in rows:
        measured = row["concurrent"]
        if not measured:
            continue
        alone = row.get("concurrent_from_alone")
        print(
            f"{row['pair']:36} {row['engine']:8} {measured:5.2f} {row['concurrent_predicted']:9.2f} "
            f"{_error_pct(row['concurrent_predicted'], measured):+5.1f}% {_f(alone, 10, 2)} "
            + (f"{_error_pct(alone, measured):+5.1f}%" if alone else f"{'-':>6}")
            + f" {row['pick']:>10} {_f(row.get('pick_vs_best'), 9, 3)}"
        )


def adaptive_began(decisions: Sequence[dict | None]) -> str:
    """How a row's adaptive group began, from its settled segments' decisions in order: `measured`, `no time`
    (its first settling was not probed: no window fitted before a job's end) or `probed`."""
    rules = [(decision or {}).get("rule") for decision in decisions]
    if "measured" in rules:
        return "measured"
    return "no time" if rules and rules[0] == "not probed" else "probed"


def print_targets(rows: list[dict]) -> None:
    """Issue 60's targets over the rows: adaptive at least 0.98 of the better of crossover and concurrent, at
    least 0.99 of concurrent, and 0.95 of crossover where crossover leads concurrent by 10% or more."""
    measured = [r for r in rows if r.get("adaptive") and r["concurrent"] and r["policies"][DEFAULT_POLICY]["aggregate"]]
    if not measured:
        return
    print("\nadaptive against the fixed ways (issue 60's targets), and what the plan picked and why")
    print(f"{'pair':36} {'engine':8} {'ad/best':>7} {'ad/conc':>7} {'ad/cross':>8} {'adaptive':>8} {'pick':>10}  why")
    met = {"best": 0, "concurrent": 0, "crossover": 0}
    leads = on_measurements = 0
    for row in measured:
        crossover = row["policies"][DEFAULT_POLICY]["aggregate"]
        versus = (
            row["adaptive"] / max(crossover, row["concurrent"]),
            row["adaptive"] / row["concurrent"],
            row["adaptive"] / crossover,
        )
        met["best"] += versus[0] >= 0.98
        met["concurrent"] += versus[1] >= 0.99
        if crossover >= 1.10 * row["concurrent"]:
            leads += 1
            met["crossover"] += versus[2] >= 0.95
        # how adaptive began: probing, settled on what earlier runs measured on the same jobs, or settled where
        # it started because no window fitted before a job's end ("no time")
        began = adaptive_began(row.get("decisions", ()))
        on_measurements += began == "measured"
        print(
            f"{row['pair']:36} {row['engine']:8} {versus[0]:7.3f} {versus[1]:7.3f} {versus[2]:8.3f} {began:>8} "
            f"{row['pick']:>10}  {row.get('pick_reason', '')}"
        )
    print(
        f"adaptive >= 0.98 x the better of crossover and concurrent: {met['best']} of {len(measured)}; "
        f">= 0.99 x concurrent: {met['concurrent']} of {len(measured)}; "
        f">= 0.95 x crossover where crossover led by 10% or more: {met['crossover']} of {leads}; "
        f"settled on earlier measurements without probing: {on_measurements} of {len(measured)}"
    )
    print_targets_over_repeats(measured)
    print_by_order(measured)
    print_windows_against_columns(measured)
    print_one_way_throughout(measured)
    noise = run_to_run_noise(measured)
    if noise is not None:
        ratio = noise * math.sqrt(2)  # of two ways, each measured once
        beyond = [
            row
            for row in measured
            if row["adaptive"] / max(row["policies"][DEFAULT_POLICY]["aggregate"], row["concurrent"]) < 1 - 2 * ratio
            or row["adaptive"] / row["concurrent"] < 1 - 2 * ratio
        ]
        print(
            f"the bench's noise: one way's aggregate moves {noise:.1%} from one run of a row to the next (root "
            f"mean square, crossover and concurrent over the repeats), a ratio of two ways {ratio:.1%}: "
            f"adaptive below {1 - 2 * ratio:.3f} x the better or x concurrent (twice that) on "
            f"{len(beyond)} of {len(measured)} rows"
            + (": " + ", ".join(f"{row['pair']} ({row['engine']})" for row in beyond) if beyond else "")
        )


def one_way_throughout(rows: list[dict]) -> list[tuple[dict, str, float]]:
    """The rows whose adaptive group ran one way of the two for all its time (it never probed: settled on what
    ran before, or no time), each with that way and adaptive over that way's own column: the same way measured
    twice in one row."""
    found = []
    for row in rows:
        shares = row.get("adaptive_time") or {}
        way = next((way for way, share in shares.items() if share >= 0.999), None)
        column = {"crossover": row["policies"][DEFAULT_POLICY]["aggregate"], "concurrent": row["concurrent"]}.get(
            way or ""
        )
        if way and column:
            found.append((row, way, row["adaptive"] / column))
    return found


def print_one_way_throughout(rows: list[dict]) -> None:
    """What the 0.98 target asks of a row where adaptive ran one way throughout: that way measured twice, against
    the better of two columns measured once each. How often such a row meets it is how often a perfect adaptive
    could, on this machine's noise."""
    found = one_way_throughout(rows)
    if len(found) < 2:
        return
    ratios = [ratio for _, _, ratio in found]
    best = sum(
        row["adaptive"] / max(row["policies"][DEFAULT_POLICY]["aggregate"], row["concurrent"]) >= 0.98
        for row, _, _ in found
    )
    print(
        f"adaptive that ran one way throughout ({len(found)} rows): {statistics.fmean(ratios):.3f} of that way's own "
        f"column (standard deviation {statistics.stdev(ratios):.3f}); >= 0.98 x the better of crossover and "
        f"concurrent on {best} of {len(found)}: the same way run twice in one row, against the 0.98 target"
    )


def print_windows_against_columns(rows: list[dict]) -> None:
    """Adaptive's probe windows against the same row's whole runs: crossover over concurrent in the windows (each
    way's mean) over the same in the columns, over the rows that probed both ways (below 1: the windows favour
    free; why what ran before weighs in, docs/design.md); and the decisions what ran before weighed in on, how
    many it turned (the windows' difference and the combined one on either side of the rule's margin) and how
    many of those toward the way the row's columns put ahead."""
    ratios = []
    for row in rows:
        windows = row.get("windows", ())
        by_way = {way: [value for w, value in windows if w == way] for way in ("crossover", "concurrent")}
        crossover = row["policies"][DEFAULT_POLICY]["aggregate"]
        if all(by_way.values()) and crossover and row["concurrent"]:
            in_windows = statistics.fmean(by_way["crossover"]) / statistics.fmean(by_way["concurrent"])
            ratios.append(in_windows / (crossover / row["concurrent"]))
    if len(ratios) > 1:
        print(
            f"adaptive's windows against the row's whole runs: crossover / concurrent in the windows is "
            f"{statistics.fmean(ratios):.3f} of the columns' (standard error "
            f"{statistics.stdev(ratios) / math.sqrt(len(ratios)):.3f}, {len(ratios)} rows that probed both ways)"
        )
    weighed = turned = toward = 0
    for row in rows:
        crossover = row["policies"][DEFAULT_POLICY]["aggregate"]
        for decision in row.get("decisions", ()):
            if not decision or "combined" not in decision or "aggregate" not in decision:
                continue
            weighed += 1
            margin = AdaptiveSettings().margin  # turns must lead by it on an undecided estimate (the default)
            free = max(decision["aggregate"]["free"], 1e-9)
            alone = "crossover" if decision["difference"] / free > margin else "concurrent"
            both = "crossover" if decision["combined"]["difference"] > margin else "concurrent"
            if alone != both:
                turned += 1
                toward += both == ("crossover" if crossover > row["concurrent"] else "concurrent")
    if weighed:
        print(
            f"what ran before weighed in on {weighed} decisions; it turned {turned} of them, {toward} toward the way "
            f"the row's columns put ahead"
        )


def _by_pair(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    found: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        found.setdefault((row["pair"], row["engine"]), []).append(row)
    return found


def print_targets_over_repeats(rows: list[dict]) -> None:
    """Where a pair ran more than once: the first two targets on each way's mean over its runs (one run's figure
    is one sample of a noisy machine; the mean of n moves 1/sqrt(n) as much)."""
    repeated = {key: runs for key, runs in _by_pair(rows).items() if len(runs) > 1}
    if not repeated:
        return
    best = concurrent = 0
    for runs in repeated.values():
        adaptive = statistics.mean(r["adaptive"] for r in runs)
        mean_concurrent = statistics.mean(r["concurrent"] for r in runs)
        crossover = statistics.mean(r["policies"][DEFAULT_POLICY]["aggregate"] for r in runs)
        best += adaptive / max(crossover, mean_concurrent) >= 0.98
        concurrent += adaptive / mean_concurrent >= 0.99
    print(
        f"on each way's mean over a pair's runs: adaptive >= 0.98 x the better of crossover and concurrent: "
        f"{best} of {len(repeated)} pairs; >= 0.99 x concurrent: {concurrent} of {len(repeated)}"
    )


def print_by_order(rows: list[dict]) -> None:
    """Adaptive / best and adaptive / concurrent, in the rows run forward (adaptive last) and those run
    reversed (adaptive first after sequential, concurrent last): what a way's place in the row is worth here."""
    by_order: dict[str, list[dict]] = {}
    for row in rows:
        by_order.setdefault(row.get("order", "forward"), []).append(row)
    if len(by_order) < 2:
        return
    parts = []
    for order, runs in sorted(by_order.items()):
        best = [r["adaptive"] / max(r["policies"][DEFAULT_POLICY]["aggregate"], r["concurrent"]) for r in runs]
        concurrent = [r["adaptive"] / r["concurrent"] for r in runs]
        parts.append(
            f"{order} ({len(runs)} rows) adaptive / best {statistics.fmean(best):.3f}, "
            f"adaptive / concurrent {statistics.fmean(concurrent):.3f}"
        )
    print("by the order the ways ran in, mean of the rows: " + "; ".join(parts))
    for order, runs in sorted(by_order.items()):
        compute = {
            way: [r["state_compute"][way] for r in runs if way in r.get("state_compute", {})] for way in STATE_WAYS
        }
        if any(compute.values()):
            print(
                f"  {order}: adaptive's compute per iteration over its column's run's, mean of the rows: "
                + ", ".join(f"{way} {statistics.fmean(v):.3f} ({len(v)} rows)" for way, v in compute.items() if v)
            )


def run_to_run_noise(rows: list[dict]) -> float | None:
    """How much one way's aggregate moves from one run of a pair to the next: the root mean square of the log
    ratio of consecutive runs (crossover under the default policy, and concurrent; a shift between the runs
    counts as noise too), over sqrt 2 (each run is one sample). None without at least four such ratios."""
    ratios = []
    for runs in _by_pair(rows).values():
        for first, second in zip(runs, runs[1:]):
            for way in (lambda r: r["policies"][DEFAULT_POLICY]["aggregate"], lambda r: r["concurrent"]):
                if way(first) and way(second):
                    ratios.append(math.log(way(first) / way(second)))
    if len(ratios) < 4:
        return None
    return math.sqrt(statistics.fmean(value * value for value in ratios) / 2)


def print_replan(rows: list[dict], bandwidth: str) -> None:
    """Each pair planned again now, from what this bench measured (plans learn from what ran): each way the
    row measured, predicted against measured; a pair of two copies of one recipe as `xover plan` plans them
    (name, name#2)."""
    print("\na re-plan of each pair from what it measured (the target: each measured way within 3%)")
    print(f"{'pair':36} {'engine':8} {'way':11} {'measured':>8} {'re-plan':>8} {'from':>9} {'error':>7}")
    within, total = 0, 0
    for row in rows:
        recipes = copies_named([load_recipe(name) for name in row["pair"].split(":")])
        found, _, link, _ = profiles_of_recipes(None, recipes, Link.parse(bandwidth), engine=row["engine"])
        measured = measurements_of(None, recipes, row["engine"], local_hosts(2), link)
        predicted, sources = predict_considered(found, DEFAULT_POLICY, measured=measured)
        for way, value in (
            ("crossover", row["policies"][DEFAULT_POLICY]["aggregate"]),
            ("concurrent", row["concurrent"]),
            ("adaptive", row.get("adaptive")),
        ):
            if not value or way not in predicted:
                continue
            error = _error_pct(predicted[way].gain, value)
            total += 1
            within += abs(error) <= 3.0
            print(
                f"{row['pair']:36} {row['engine']:8} {way:11} {value:8.2f} {predicted[way].gain:8.2f} "
                f"{sources[way]:>9} {error:+6.1f}%"
            )
    print(f"re-planned within 3% of what was measured: {within} of {total}")


def print_spread(rows: list[dict]) -> None:
    """Per pair and engine over the repeats: the crossover / concurrent ratio's median and range, and in
    how many runs crossover (default policy) was at least as fast as concurrent."""
    print(f"\nover the repeats: crossover ({DEFAULT_POLICY}) / concurrent, and the prediction's error")
    print(
        f"{'pair':36} {'engine':8} {'runs':>4} {'conc':>11} {'crossover':>11} {'ratio p50':>9} {'range':>11} "
        f"{'>= conc':>7} {'error p50':>9}"
    )
    for (pair, engine), runs in _by_pair(rows).items():
        measured = [
            (r["concurrent"], r["policies"][DEFAULT_POLICY])
            for r in runs
            if r["concurrent"] and r["policies"][DEFAULT_POLICY]["aggregate"]
        ]
        if not measured:
            continue
        concurrent = [c for c, _ in measured]
        crossover = [d["aggregate"] for _, d in measured]
        ratios = [d["aggregate"] / c for c, d in measured]
        errors = [_error_pct(d["predicted"], d["aggregate"]) for _, d in measured]
        print(
            f"{pair:36} {engine:8} {len(measured):4d} {min(concurrent):5.2f}-{max(concurrent):<5.2f} "
            f"{min(crossover):5.2f}-{max(crossover):<5.2f} {statistics.median(ratios):8.2f}x "
            f"{min(ratios):5.2f}-{max(ratios):<5.2f} {sum(r >= 1.0 for r in ratios):3d}/{len(ratios):<3d} "
            f"{statistics.median(errors):+8.1f}%"
        )


def _f(value, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


# ------------------------------------------------------------------------------------ the token


def start_turn_server(path: str, devices: list[str], served: bool = False) -> tuple[subprocess.Popen, int | None]:
    """A turn server, and the port it serves its figures on (`served`) or None."""
    extra = ["--metrics-address", "127.0.0.1"] if served else []
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xover.turns.server",
            "--socket",
            path,
            "--policy",
            "round-robin",
            *[f"--device={d}" for d in devices],
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    port = int(server.stdout.readline().split()[1]) if served else None
    assert server.stdout.readline().strip() == "ready"
    # then its lines (the turns' spans, streamed) are read and dropped: a server whose stdout pipe is full
    # blocks on its next line, and its workers wait for a grant until they give up on it
    threading.Thread(target=server.stdout.read, daemon=True).start()
    return server, port


def _ping_pong(path: str, slot: int, rounds: int, queue) -> None:
    token = CrossoverToken(path, 0, slot)
    records = []
    for i in range(rounds):
        token.acquire()
        records.append((slot, i, time.perf_counter_ns()))
        token.checkpoint()  # nobody asks to yield: the cost of a layer boundary
        records.append((slot, i, time.perf_counter_ns()))
        token.release()
    token.close()
    queue.put(records)


def _scrape_every(port: int, interval_s: float, done: threading.Event, scrapes: list[int]) -> None:
    import urllib.request

    while not done.wait(interval_s):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            answer.read()
        scrapes.append(1)


def handoff_latency(rounds: int = 3000, scraped_every_s: float | None = None) -> dict[str, float]:
    """Time from one job's release to the next job's grant, two processes through the turn server; with
    `scraped_every_s`, the server serves its figures (as with --metrics-port) and is scraped that often."""
    import multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server, port = start_turn_server(path, ["0=0,1"], served=scraped_every_s is not None)
        done, scrapes = threading.Event(), []
        scraper = threading.Thread(target=_scrape_every, args=(port, scraped_every_s, done, scrapes), daemon=True)
        if port is not None:
            scraper.start()
        queue: mp.Queue = mp.Queue()
        procs = [mp.Process(target=_ping_pong, args=(path, slot, rounds, queue)) for slot in (0, 1)]
        for p in procs:
            p.start()
        records = queue.get() + queue.get()
        for p in procs:
            p.join()
        done.set()
        if port is not None:
            scraper.join()  # a scrape in flight ends before the server does (else its connection is reset)
        server.terminate()
    grants = sorted(records[::2], key=lambda r: r[2])
    releases = sorted(records[1::2], key=lambda r: r[2])
    gaps = sorted((b[2] - a[2]) / 1000 for a, b in zip(releases, grants[1:]) if a[0] != b[0])[50:]
    return {
        "median_us": statistics.median(gaps),
        "p90_us": gaps[int(len(gaps) * 0.9)],
        "p99_us": gaps[int(len(gaps) * 0.99)],
        "handoffs": len(gaps),
        "scrapes": len(scrapes),
    }


def handoff_latency_served(repeats: int = 4, rounds: int = 20000, scraped_every_s: float = 0.1) -> None:
    """Handoffs with the server's figures off and served (scraped every `scraped_every_s`), alternated, side by side."""
    for _ in range(repeats):
        for scraped in (None, scraped_every_s):
            latency = handoff_latency(rounds, scraped)
            what = f"served, {latency['scrapes']} scrapes" if scraped else "not served"
            print(
                f"  figures {what:24} median {latency['median_us']:4.0f} us  p90 {latency['p90_us']:4.0f} us  "
                f"p99 {latency['p99_us']:5.0f} us  ({latency['handoffs']} handoffs)",
                flush=True,
            )


def checkpoint_cost(calls: int = 1_000_000) -> float:
    """ns per layer-boundary check when nobody waits (a read of the shared yield page)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server, _ = start_turn_server(path, ["0=0"])
        token = CrossoverToken(path, 0, 0)
        token.acquire()
        start = time.perf_counter_ns()
        for _ in range(calls):
            token.checkpoint()
        cost = (time.perf_counter_ns() - start) / calls
        token.release()
        token.close()
        server.terminate()
    return cost


def waiting_cpu(seconds: float = 5.0) -> float:
    """Percent of a core used by a job blocked waiting for its turn while its partner holds it."""
    import multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server, _ = start_turn_server(path, ["0=0,1"])
        waiter = mp.Process(target=_ping_pong, args=(path, 1, 1, mp.Queue()))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=[pair for pair, _ in PAIRS])
    parser.add_argument("--bandwidth", default="1gbit")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--engines", nargs="+", default=["horovod", "torch"])
    parser.add_argument("--skip-token", action="store_true")
    parser.add_argument(
        "--token-only",
        action="store_true",
        help="only the turn token's costs: handoff latency (with the server's figures off and "
        "served to a scraper, alternated), the layer-boundary check, a waiter's CPU",
    )
    parser.add_argument(
        "--keep-profiles",
        action="store_true",
        help="reuse the stored profiles where they match (default: measure them again, --force)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every pair this many times (in turn, pair after pair), and summarise the spread",
    )
    parser.add_argument(
        "--order",
        choices=("alternate", "fixed"),
        default="alternate",
        help="alternate (default): every other repeat runs the ways in the reverse order (adaptive first after "
        "sequential, concurrent last); fixed: always as --mode all runs them",
    )
    args = parser.parse_args()
    recipes = sorted({name for pair in args.pairs for name in pair.split(":")})
    rows = []
    for engine in [] if args.token_only else args.engines:
        xover(
            "profile",
            *recipes,
            "--bandwidth",
            args.bandwidth,
            "--engine",
            engine,
            *([] if args.keep_profiles else ["--force"]),
        )
        for repeat in range(args.repeats):
            modes = MODES_REVERSED if args.order == "alternate" and repeat % 2 else MODES_FORWARD
            for pair in args.pairs:
                row = bench_pair(pair.split(":"), args.bandwidth, args.seconds, engine, modes)
                rows.append(row | {"order": "reversed" if modes == MODES_REVERSED else "forward"})
    if args.token_only:
        token_costs()
        return
    kinds = dict(PAIRS)
    print(f"\nsummary (aggregate speed relative to alone, measured while both jobs ran; link {args.bandwidth})")
    print(
        f"{'pair':36} {'kind':44} {'engine':8} {'conc':>5} "
        + " ".join(f"{p[:12]:>12}" for p in POLICY_ORDER)
        + f" {'WC/conc':>7} {'adaptive':>8} {'ad/best':>7} {'pick':>10}"
        + f" {'fluid':>5} {'of fluid':>8} {'predicted':>9} {'error':>6} {'no-interf.':>10} {'error':>6}"
        + f" {'alone/prof.':>11} {'from alone':>10} {'error':>6}"
    )
    for row in rows:
        default = row["policies"][DEFAULT_POLICY]
        measured = default["aggregate"]
        print(
            f"{row['pair']:36} {kinds.get(row['pair'], ''):44} {row['engine']:8} {_f(row['concurrent'], 5, 2)} "
            + " ".join(_f(row["policies"][p]["aggregate"], 12, 2) for p in POLICY_ORDER)
            + f" {_f(default['vs_concurrent'], 7, 2)} {_f(row['adaptive'], 8, 2)}"
            + f" {_f(row.get('adaptive_vs_best'), 7, 3)}"
            + f" {row['pick']:>10} {row['fluid']:5.2f} "
            + (f"{measured / row['fluid']:8.0%}" if measured else f"{'-':>8}")
            + f" {default['predicted']:9.2f} "
            + (f"{_error_pct(default['predicted'], measured):+5.1f}%" if measured else f"{'-':>6}")
            + f" {row['without_interference']:10.2f} "
            + (f"{_error_pct(row['without_interference'], measured):+5.1f}%" if measured else f"{'-':>6}")
            + f" {_f(worst_drift(row), 11, 2)} {_f(row.get('predicted_from_alone'), 10, 2)} "
            + (
                f"{_error_pct(row['predicted_from_alone'], measured):+5.1f}%"
                if measured and row.get("predicted_from_alone")
                else f"{'-':>6}"
            )
        )
    print_prediction_errors(rows)
    print_sharing(rows)
    print_targets(rows)
    print_replan(rows, args.bandwidth)
    if args.repeats > 1:
        print_spread(rows)
    if not args.skip_token:
        token_costs()


def token_costs() -> None:
    latency = handoff_latency()
    print(
        f"\nturn handoff (release -> the other job's grant, two processes): median {latency['median_us']:.0f} us, "
        f"p90 {latency['p90_us']:.0f} us over {latency['handoffs']} handoffs"
    )
    print("turn handoff with the server's figures not served and served (--metrics-port), scraped every 100 ms:")
    handoff_latency_served()
    print(f"layer-boundary check while nobody waits: {checkpoint_cost():.0f} ns")
    print(f"a job blocked waiting for its turn uses {waiting_cpu():.2f}% of a core")


if __name__ == "__main__":
    main()
