"""How well the model's interference predicts the runs already in the store.

Every stored comparison of a group (`xover run --group A B --mode all`, work-conserving measured) is
predicted again from the profiles its recipes had when it started (the newest of that name with a co-run, same np,
hosts, link rate, engine and hardware, created before the experiment), as `make bench` predicted it
then, with the traffic part of each job's interference (the model's `Calibration.interference_traffic_part`,
`plan/calibration.py`) set from 0 (charged alike next to any partner) to 1 (all of it scaled by the
partners' link share), and the link's leak to the band behind (`Calibration.link_band_leak`) as given.
Each try is a `Calibration` passed to the model. It reads the store and runs nothing; `--write FILE`
writes the calibration that fitted best (most comparisons within 5%, then the lowest mean error) as JSON
(`Calibration.read` reads it back).

    .venv/bin/python bench/interference_fit.py [--since 2026-11-22] [--rows] [--link-leak 0.3] [--db FILE]
                                               [--write calibration.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select  # noqa: E402

from xover.errors import XoverError  # noqa: E402
from xover.links import Link  # noqa: E402
from xover.plan.calibration import SHIPPED, Calibration  # noqa: E402
from xover.plan.from_profiles import job_profile  # noqa: E402
from xover.plan.model import interference_next_to  # noqa: E402
from xover.plan.predict import predict_group  # noqa: E402
from xover.report.data import gather_report, open_existing_store  # noqa: E402
from xover.store.models import Experiment, Profile, Run  # noqa: E402
from xover.store.profiles import interference_profile_before  # noqa: E402
from xover.turns.policies import DEFAULT_POLICY  # noqa: E402

PARTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def profile_then(session, run: Run, experiment: Experiment) -> Profile | None:
    # by name, as `xover report` finds a job's interference: a run's recipe carries the iterations
    # that --seconds chose, so its hash is not the profiled recipe's
    hosts = len({h.split(":")[0] for h in run.hosts.split(",")})
    return interference_profile_before(
        session,
        run.name,
        run.np,
        hosts,
        run.engine,
        Link.of_key(experiment.bandwidth).key,
        experiment.hardware,
        experiment.created_at,
    )


def comparisons(session, since: datetime) -> list[dict]:
    """Each group comparison with a measured work-conserving aggregate and a profile for every job."""
    found = []
    for experiment in session.scalars(
        select(Experiment)
        .where(Experiment.kind == "run", Experiment.created_at >= since)
        .order_by(Experiment.created_at)
    ):
        report = gather_report(session, experiment)
        for group in report.groups:
            entry = group.policies.get(DEFAULT_POLICY)
            measured = entry.aggregate if entry is not None else None
            if not measured or len(group.jobs) < 2:
                continue
            profiles = []
            for name in group.jobs:
                run = next((r for r in experiment.runs if r.name == name and r.mode == "sequential"), None)
                stored = profile_then(session, run, experiment) if run is not None else None
                if stored is None:
                    break
                body = run.recipe.body
                recipe = SimpleNamespace(
                    name=name,
                    np=run.np,
                    iterations=body.get("iterations") or 100,
                    max_slowdown=body.get("max_slowdown"),
                    memory_gb=body.get("memory_gb"),
                )
                profiles.append(job_profile(recipe, stored))
            else:
                found.append(
                    {
                        "experiment": experiment.id,
                        "engine": experiment.runs[0].engine,
                        "jobs": group.jobs,
                        "measured": measured,
                        "profiles": profiles,
                    }
                )
    return found


def error_pct(profiles, measured: float, calibration: Calibration) -> float:
    """The prediction's error under `calibration`: each job's interference next to this group, fixed in
    advance (no reference share left to scale)."""
    fixed = [
        dataclasses.replace(
            job,
            interference_link_share=None,
            interference=interference_next_to(job, [*profiles[:i], *profiles[i + 1 :]], calibration),
        )
        for i, job in enumerate(profiles)
    ]
    return 100 * (predict_group(fixed, DEFAULT_POLICY, calibration).gain / measured - 1)


def best_fit(errors: dict[Calibration, list[float]], rows: int, since: datetime) -> Calibration:
    """The calibration with the most comparisons within 5%, then the lowest mean error, saying what it was fitted on."""

    def score(calibration: Calibration) -> tuple[int, float]:
        absolute = [abs(e) for e in errors[calibration]]
        return sum(e <= 5 for e in absolute), -statistics.mean(absolute)

    best = max(errors, key=score)
    return dataclasses.replace(
        best,
        fitted_on=f"bench/interference_fit.py: {rows} group comparisons in the store "
        f"since {since:%Y-%m-%d} (traffic parts {', '.join(map(str, PARTS))}; "
        f"link leak given), {datetime.now():%Y-%m-%d}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--since",
        type=datetime.fromisoformat,
        default=datetime(2000, 1, 1),
        help="only experiments started on or after this date (YYYY-MM-DD)",
    )
    parser.add_argument("--rows", action="store_true", help="print every comparison's errors")
    parser.add_argument("--db", default=None, help="the store (default: $XOVER_DB or results/xover.db)")
    parser.add_argument(
        "--link-leak",
        type=float,
        default=None,
        help=f"the share of the link the band behind gets (the model: {SHIPPED.link_band_leak})",
    )
    parser.add_argument("--write", metavar="FILE", help="write the best-fitting calibration here (JSON)")
    args = parser.parse_args()
    try:
        given = SHIPPED if args.link_leak is None else dataclasses.replace(SHIPPED, link_band_leak=args.link_leak)
        store = open_existing_store(args.db)
    except XoverError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    with store.session() as session:
        rows = comparisons(session, args.since)
    if not rows:
        sys.exit("no group comparison with profiles that measured interference in the store")
    tries = {part: dataclasses.replace(given, interference_traffic_part=part) for part in PARTS}
    errors = {tries[part]: [error_pct(row["profiles"], row["measured"], tries[part]) for row in rows] for part in PARTS}
    if args.rows:
        print(f"{'experiment':22} {'engine':7} {'jobs':40} {'measured':>8} " + " ".join(f"{p:>7}" for p in PARTS))
        for index, row in enumerate(rows):
            print(
                f"{row['experiment']:22} {row['engine']:7} {' + '.join(row['jobs']):40} {row['measured']:8.2f} "
                + " ".join(f"{errors[tries[p]][index]:+6.1f}%" for p in PARTS)
            )
    print(
        f"{len(rows)} group comparisons, link leak {given.link_band_leak}; prediction error by traffic "
        f"part of the interference (the model uses {SHIPPED.interference_traffic_part}):"
    )
    for part in PARTS:
        absolute = [abs(e) for e in errors[tries[part]]]
        print(
            f"  {part:4}: within 5% on {sum(e <= 5 for e in absolute)} of {len(rows)}, "
            f"mean |error| {statistics.mean(absolute):.1f}%, median {statistics.median(absolute):.1f}%"
        )
    if args.write:
        best = best_fit(errors, len(rows), args.since)
        best.write(args.write)
        print(f"wrote {args.write}: traffic part {best.interference_traffic_part}, link leak {best.link_band_leak}")


if __name__ == "__main__":
    main()
