"""`make demo`'s last word: the plan's run against its jobs one after another, both measured, and each group's pick
beside the best way measured.

    .venv/bin/python bench/demo_summary.py PLANNED.json COMPARISON.json [--one-after-another SEQUENTIAL.json]

PLANNED.json is `xover report --format json` of `xover run PLAN` (each group in the way the plan picked,
adaptive where it picked it, as scheduled); COMPARISON.json that of `xover run PLAN --mode all` (each group
alone job by job, then in every way of sharing); SEQUENTIAL.json that of `xover run PLAN --mode sequential`
(the plan's jobs, each alone, as scheduled). The planned run's makespan (its first job's start to its last
job's end) is set beside the sequential run's, measured the same way: both schedules start and end units on
the same devices, and both count the time between them. Without SEQUENTIAL.json, beside the comparison's
runs alone (each one's start to end, summed: without the time between them, which the planned run's
makespan counts). Both measured, nothing predicted. Each group's pick, and why, beside what each way measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

WAYS = ("crossover", "concurrent", "adaptive")


def _seconds(job: dict[str, Any]) -> float | None:
    if not job.get("started_at") or not job.get("ended_at"):
        return None
    return (datetime.fromisoformat(job["ended_at"]) - datetime.fromisoformat(job["started_at"])).total_seconds()


def one_after_another_s(comparison: dict[str, Any]) -> float | None:
    """The jobs one after another, as measured: every sequential run's wall time (its start to its end), summed;
    None unless every one finished."""
    alone = [job for job in comparison["jobs"] if job["mode"] == "sequential"]
    times = [_seconds(job) for job in alone]
    if not alone or any(job["status"] != "finished" for job in alone) or None in times:
        return None
    return sum(t for t in times if t is not None)


def planned_makespan_s(planned: dict[str, Any]) -> float | None:
    """A run of the plan's makespan as measured (as planned, or in one mode): its first job's start to its last
    job's end; None unless every job finished."""
    jobs = planned["jobs"]
    if not jobs or any(job["status"] != "finished" or not job.get("started_at") for job in jobs):
        return None
    starts = [datetime.fromisoformat(job["started_at"]) for job in jobs]
    ends = [datetime.fromisoformat(job["ended_at"]) for job in jobs]
    return (max(ends) - min(starts)).total_seconds()


def pick_rows(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    """Per group of the comparison: the plan's pick and why, each way's measured gain, the best, pick / best."""
    rows = []
    for group in comparison["groups"]:
        measured = {way: group.get(f"{way}_vs_sequential") for way in WAYS if group.get(f"{way}_vs_sequential")}
        pick = group.get("planned_sharing")
        best = max(measured, key=lambda way: measured[way]) if measured else None
        rows.append(
            {
                "group": group["group"],
                "jobs": " + ".join(group["jobs"]),
                "pick": pick,
                "why": group.get("planned_reason") or "",
                "measured": measured,
                "best": best,
                "pick_vs_best": measured[pick] / measured[best] if best and pick in measured else None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("planned", help="`xover report --format json` of `xover run PLAN` (as planned)")
    parser.add_argument("comparison", help="`xover report --format json` of `xover run PLAN --mode all`")
    parser.add_argument(
        "--one-after-another",
        dest="sequential",
        help="`xover report --format json` of `xover run PLAN --mode sequential`: its makespan beside the plan's",
    )
    args = parser.parse_args(argv)
    try:
        planned = json.loads(Path(args.planned).read_text())
        comparison = json.loads(Path(args.comparison).read_text())
        sequential = json.loads(Path(args.sequential).read_text()) if args.sequential else None
    except (OSError, ValueError) as error:
        print(f"demo_summary: cannot read the runs' JSON: {error}", file=sys.stderr)
        return 2
    header = f"{'group':>5}  {'jobs':40} {'the pick':>10}  {'measured (x one after another)':46} {'best':>10}"
    print(header + " pick/best")
    for row in pick_rows(comparison):
        shown = ", ".join(f"{way} {gain:.2f}" for way, gain in row["measured"].items())
        ratio = f"{row['pick_vs_best']:.3f}" if row["pick_vs_best"] is not None else "-"
        print(
            f"{row['group']:>5}  {row['jobs']:40} {row['pick'] or '-':>10}  {shown:46} {row['best'] or '-':>10} {ratio}"
        )
        if row["why"]:
            print(f"       why the pick: {row['why']}")
    made, summed = planned_makespan_s(planned), one_after_another_s(comparison)
    alone = planned_makespan_s(sequential) if sequential is not None else summed
    if made is None or alone is None:
        print("makespans: a run did not finish, so they are not set side by side")
        return 1
    verdict = "the plan beat one after another" if made < alone else "the plan did NOT beat one after another"
    if sequential is not None:
        measured = f"measured as a schedule (experiment {sequential['experiment']['id']})"
        if summed is not None:
            measured += f"; the comparison's runs alone summed, without the time between them: {summed:.1f} s"
    else:
        measured = f"measured (the sequential runs of experiment {comparison['experiment']['id']}, summed)"
    print(
        f"makespan of the plan as run: {made:.1f} s measured (experiment {planned['experiment']['id']}); its jobs one "
        f"after another: {alone:.1f} s {measured}; {alone / made:.2f}x: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
