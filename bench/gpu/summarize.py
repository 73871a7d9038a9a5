"""The GPU check's summary (scripts/gpu_check.sh): one table of every phase's group by mode and turn
policy, then each job's figures, loss parity and the GPU's NVML utilisation over each run.

    python3 bench/gpu/summarize.py WORKDIR PHASE...   (reads WORKDIR/PHASE.report.json, nvml.csv, probe.json)
"""

from __future__ import annotations

import csv
import json
import os
import sys
from datetime import datetime, timezone


def _epoch(text) -> float | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace(" UTC", "").replace("Z", ""))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def _nvml(path: str) -> list[tuple[float, float, float]]:
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [(float(r["t"]), float(r["gpu_util"]), float(r["proc_mem_mib"])) for r in csv.DictReader(handle)]


def _utilisation(samples, jobs) -> str:
    """Mean GPU utilisation over the runs' span (NVML; '-' without samples)."""
    spans = [(_epoch(j.get("started_at")), _epoch(j.get("ended_at"))) for j in jobs]
    spans = [(a, b) for a, b in spans if a and b]
    if not spans:
        return "-"
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    inside = [u for t, u, _ in samples if start <= t <= end]
    return f"{sum(inside) / len(inside):.0f}%" if inside else "-"


def _f(value, digits=2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _share(value) -> str:
    """How much of the run the jobs ran side by side: a figure over a short overlap is less sure."""
    return f"{value:.0%}" if isinstance(value, (int, float)) else "-"


def _setting(jobs, key) -> str:
    values = sorted({str(j.get(key)) for j in jobs if j.get(key) is not None})
    return "/".join(values) or "-"


def per_iteration_vs(members: list[dict], concurrent: list[dict]) -> str:
    """Where the experiment ran nothing alone (the MPS round) the aggregates cannot be formed: the jobs'
    summed steps per second against concurrent's, from their mean iteration times, marked '*'."""
    if len(members) != len(concurrent) or not members:
        return "-"
    ours = [j.get("iteration_ms") for j in members]
    theirs = [j.get("iteration_ms") for j in concurrent]
    if not all(ours) or not all(theirs):
        return "-"
    return f"{sum(1 / t for t in ours) / sum(1 / t for t in theirs):.2f}*"


def group_rows(name: str, report: dict, samples) -> list[list[str]]:
    """One row per way the group ran: sequential, concurrent, crossover under each policy."""
    jobs = report.get("jobs", [])
    link = report.get("experiment", {}).get("bandwidth") or "host"
    rows = []
    for group in report.get("groups", []):
        members = [j for j in jobs if j.get("group") == group.get("group")]
        label = " + ".join(group.get("jobs", []))
        parity = [p for p in report.get("parity") or [] if p.get("group") == group.get("group")]
        common = [name, label, _setting(members, "backend"), link, _setting(members, "gpu_sharing")]

        def by(mode, policy=None, members=members):
            return [j for j in members if j.get("mode") == mode and (policy is None or j.get("policy") == policy)]

        def parity_of(mode, policy=None, parity=parity):
            # only runs with steps to compare: a run cut before its first step proves nothing
            compared = [p for p in parity if p.get("mode") == mode and p.get("policy") == policy and p.get("steps")]
            worst = max((p.get("max_abs_loss_diff") or 0.0 for p in compared), default=None)
            return "exact" if worst == 0 else ("-" if worst is None else f"{worst:.2g}")

        if by("sequential"):  # a run in one mode (a plan as planned) has nothing alone to compare with
            rows.append(
                common
                + [
                    "sequential",
                    "1.00",
                    "-",
                    _f(group.get("fluid_bound")),
                    "-",
                    "-",
                    _utilisation(samples, by("sequential")),
                    "-",
                ]
            )
        # a way that ran has its row, its figures '-' where none could be measured (its jobs never ran together
        # past their warm-up, or one failed): the overlap column says which
        if by("concurrent") or group.get("concurrent_vs_sequential") is not None:
            rows.append(
                common
                + [
                    "concurrent",
                    _f(group.get("concurrent_vs_sequential")),
                    "1.00",
                    "",
                    _f(group.get("concurrent_predicted")),
                    _share(group.get("concurrent_overlap")),
                    _utilisation(samples, by("concurrent")),
                    parity_of("concurrent"),
                ]
            )
        simulated = group.get("simulated") or {}
        for policy, figures in sorted((group.get("policies") or {}).items()):
            predicted = (simulated.get(policy) or {}).get("gain")
            rows.append(
                common
                + [
                    f"crossover {policy}",
                    _f(figures.get("aggregate")),
                    _f(figures.get("vs_concurrent"))
                    if figures.get("vs_concurrent") is not None
                    else per_iteration_vs(by("crossover", policy), by("concurrent")),
                    "",
                    _f(predicted),
                    _share(figures.get("overlap")),
                    _utilisation(samples, by("crossover", policy)),
                    parity_of("crossover", policy),
                ]
            )
        if by("adaptive") or group.get("adaptive_vs_sequential") is not None:  # turns against none while it ran
            concurrent, adaptive = group.get("concurrent_vs_sequential"), group.get("adaptive_vs_sequential")
            time_in = ", ".join(f"{way} {share:.0%}" for way, share in (group.get("adaptive_time") or {}).items())
            rows.append(
                common
                + [
                    f"adaptive ({group.get('adaptive_way') or '-'}; {time_in or 'no timeline'})",
                    _f(adaptive),
                    _f(adaptive / concurrent)
                    if adaptive and concurrent
                    else per_iteration_vs(by("adaptive"), by("concurrent")),
                    "",
                    "-",
                    _share(group.get("adaptive_overlap")),
                    _utilisation(samples, by("adaptive")),
                    parity_of("adaptive", by("adaptive")[0].get("policy") if by("adaptive") else None),
                ]
            )
    return rows


def job_lines(report: dict) -> list[str]:
    lines = []
    for job in report.get("jobs", []):
        line = (
            f"    {job.get('name', '?'):20} {job.get('mode', '?'):10} {job.get('policy') or '-':15} "
            f"{job.get('status', '?'):8} iter {_f(job.get('iteration_ms'), 1):>7} ms  compute "
            f"{_f(job.get('compute_ms'), 1):>7}  comm {_f(job.get('communication_ms'), 1):>7}  wait "
            f"{_f(job.get('wait_ms'), 1):>7}  slowdown {_f(job.get('slowdown')):>5}  loss "
            f"{_f(job.get('final_loss'), 6):>10}  peak {_f(job.get('peak_memory_gb'))} GiB  {job.get('device') or ''}"
        )
        lines.append(line)
        if job.get("error"):
            lines.append(f"      error: {job['error'].strip().splitlines()[-1] if job['error'].strip() else ''}")
    return lines


HEADER = [
    "phase",
    "group",
    "backend",
    "link",
    "GPU sharing",
    "mode",
    "vs sequential",
    "vs concurrent",
    "fluid bound",
    "predicted",
    "overlap",
    "GPU util",
    "loss parity",
]


def table(rows: list[list[str]]) -> str:
    """A Markdown table (the summary goes into docs/measurements.md as it is)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    workdir, phases = sys.argv[1], sys.argv[2:]
    samples = _nvml(os.path.join(workdir, "nvml.csv"))
    probe = os.path.join(workdir, "probe.json")
    if os.path.exists(probe):
        for name, values in json.load(open(probe)).items():
            print(f"probe {name}: {json.dumps(values)}")
    rows, details = [], []
    for name in phases:
        path = os.path.join(workdir, f"{name}.report.json")
        try:
            report = json.load(open(path))
        except (OSError, ValueError):
            details.append(f"  {name}: no report ({path} missing or unreadable)")
            continue
        rows += group_rows(name, report, samples)
        experiment = report.get("experiment", {})
        details.append(
            f"  {name}: experiment {experiment.get('id')} ({experiment.get('status')}), hardware "
            f"{experiment.get('hardware')}"
        )
        for group in report.get("groups", []):
            if group.get("planned_sharing"):
                details.append(
                    f"  {name}: group {group.get('group')}: the plan's pick {group['planned_sharing']} "
                    f"(predicted {json.dumps(group.get('predicted_by_sharing'))}); best measured "
                    f"{group.get('best_measured')}; pick / best {_f(group.get('pick_vs_best'), 3)}"
                )
        details += job_lines(report)
    print(
        "\nGPU check summary (aggregate: sum over the jobs of their speed relative to alone, over the window "
        "they shared the devices; '*': no run alone in that experiment, steps per second from the runs' "
        "mean iteration times against concurrent's)\n"
    )
    print(table(rows))
    print("\njobs:")
    print("\n".join(details))
    print("\nprofiles:")
    print("\n".join(profile_lines(workdir)) or "  none")


def profile_lines(workdir: str) -> list[str]:
    """Each profile the call took (NAME.profile.json): compute, exposed communication, gradients, and on
    a GPU its co-run stretches and how busy it kept the GPU while computing alone."""
    lines = []
    for name in sorted(f for f in os.listdir(workdir) if f.endswith(".profile.json")):
        try:
            profiles = json.load(open(os.path.join(workdir, name)))
        except (OSError, ValueError):
            continue
        for p in profiles if isinstance(profiles, list) else []:
            lines.append(
                f"  {name[: -len('.profile.json')]}: {p.get('name')} link {p.get('bandwidth')} compute "
                f"{_f(p.get('compute_ms'), 1)} ms, comm {_f(p.get('comm_ms'), 1)} ms, gradients "
                f"{_f(p.get('gradient_mb'), 1)} MiB, stretch {_f(p.get('corun_stretch'))} (MPS "
                f"{_f(p.get('mps_stretch'))}), GPU busy while computing {_f(p.get('gpu_busy'))}"
            )
    return lines


if __name__ == "__main__":
    main()
