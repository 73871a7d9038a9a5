"""Gathering what a report shows from the store: one experiment in full, or every experiment in brief.

Everything here returns plain dicts and lists (no ORM objects), so the renderers (tables, JSON, CSV,
pictures, HTML) work after the session is closed and scripts get the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ..analysis import (ALONE_MODES, MODE_ORDER, SHARED_MODES, alone_vs_profile, compare_groups, group_model,
                        loss_parity)
from ..errors import XoverError
from ..run.record import reconcile_lost
from ..store.models import Experiment, PlanGroup
from ..store.profiles import profile_device_ms, stored_interference
from ..store.queries import experiment_jobs, iteration_rows
from ..store.session import Store, missing_sqlite_file, open_store

ITERATION_FIELDS = ("experiment", "run_id", "name", "mode", "policy", "step", "wall_time", "iteration_s", "data_s",
                    "compute_s", "communication_s", "wait_s", "samples", "loss", "yields", "link_s", "comm_cpu_s")


class ReportError(XoverError):
    pass


@dataclass
class ExperimentReport:
    """One experiment: its row, its jobs (one per job and mode), group comparisons, loss parity,
    and every iteration of rank 0 per run (run id -> rows in step order)."""

    experiment: dict[str, Any]
    jobs: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    parity: list[dict[str, Any]]
    iterations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.experiment["id"]

    @property
    def is_comparison(self) -> bool:
        return self.experiment["kind"] == "run"


# ------------------------------------------------------------------------------------ opening


def open_existing_store(db: str | None) -> Store:
    """The store, refusing to create an empty database just to report that it is empty."""
    missing = missing_sqlite_file(db)
    if missing is not None:
        raise ReportError(f"no database at {missing}: nothing has been run yet "
                          "(start with `xover train mlp-digits`, or point --db / XOVER_DB at one)")
    store = open_store(db)
    reconcile_lost(store)  # experiments whose xover is gone show as lost, not running
    return store


def find_experiment(session: Session, target: str, where: str) -> Experiment:
    """'latest', an exact id, or an unambiguous start or end of one (the random suffix is enough)."""
    if target == "latest":
        newest = session.scalars(select(Experiment)
                                 .order_by(Experiment.created_at.desc(), Experiment.id.desc())).first()
        if newest is None:
            raise ReportError(f"the database {where} holds no experiments yet: run `xover train` or `xover run` first")
        return newest
    exact = session.get(Experiment, target)
    if exact is not None:
        return exact
    matches = session.scalars(select(Experiment).where(or_(Experiment.id.startswith(target, autoescape=True),
                                                           Experiment.id.endswith(target, autoescape=True)))
                              .order_by(Experiment.id)).all()
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ReportError(f"'{target}' matches {len(matches)} experiments ({', '.join(m.id for m in matches[:5])}"
                          f"{', ...' if len(matches) > 5 else ''}): give more of the id")
    if session.scalars(select(Experiment.id)).first() is None:
        raise ReportError(f"the database {where} holds no experiments yet: run `xover train` or `xover run` first")
    raise ReportError(f"no experiment '{target}' in {where}: `xover report all` lists the experiments")


# ------------------------------------------------------------------------------------ one experiment


def job_order(job: dict[str, Any]) -> tuple:
    group = job["group"] if job["group"] is not None else -1
    mode = MODE_ORDER.index(job["mode"]) if job["mode"] in MODE_ORDER else len(MODE_ORDER)
    return group, job["name"], mode, job.get("policy") or "", job["run_id"]


def experiment_row(experiment: Experiment) -> dict[str, Any]:
    return {"id": experiment.id, "kind": experiment.kind, "status": experiment.status,
            "command": experiment.command, "bandwidth": experiment.bandwidth, "hosts": experiment.hosts,
            "plan_id": experiment.plan_id, "hardware": experiment.hardware,
            "created_at": _utc_text(experiment.created_at), "ended_at": _utc_text(experiment.ended_at)}


def _utc_text(moment: datetime | None) -> str | None:
    # The store keeps naive UTC; say so, so that scripts do not read it as local time.
    return moment.isoformat(sep=" ", timespec="seconds") + " UTC" if moment else None


def jobs_and_groups(session: Session, experiment: Experiment,
                    iterations: dict[int, list[dict[str, Any]]] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Jobs with speeds and slowdowns, and per group: throughput by mode (crossover per policy) over the
    jobs' overlap window, the plan's predicted gain, the model's fluid bound and simulated gains, the
    measured gain and its error."""
    if iterations is None:
        iterations = iteration_rows(session, [run.id for run in experiment.runs])
    jobs = sorted(experiment_jobs(session, experiment.id, iterations), key=job_order)
    groups = compare_groups(jobs, iterations)
    planned: dict[int, float] = {}
    if experiment.plan_id is not None:
        planned = {g.index: g.predicted_gain for g in
                   session.scalars(select(PlanGroup).where(PlanGroup.plan_id == experiment.plan_id))}
    for group in groups:
        alone = [j for j in jobs if j["group"] == group["group"] and j["mode"] == "sequential"
                 and j["name"] in group["jobs"]]
        measured = group["crossover_vs_sequential"]
        predicted = planned.get(group["group"])
        drift = {}
        for job in alone:
            job["interference"], job["interference_link_share"] = stored_interference(session, job, experiment.bandwidth)
            drift[job["name"]] = alone_vs_profile(job, profile_device_ms(session, job, experiment.bandwidth,
                                                                        _hosts_of(job), experiment.created_at))
        group["alone_vs_profile"] = {name: ratio for name, ratio in drift.items() if ratio is not None}
        model = group_model(alone, experiment.bandwidth, sorted(group["policies"])) \
            if len(alone) == len(group["jobs"]) else {"fluid_bound": None, "predicted": {}}
        group["predicted_gain"] = predicted
        group["fluid_bound"] = model["fluid_bound"]
        group["model_gain"] = model["fluid_bound"]  # the model's ideal: the fluid bound
        group["simulated"] = model["predicted"]
        group["measured_gain"] = measured
        group["of_fluid_bound"] = measured / model["fluid_bound"] if measured and model["fluid_bound"] else None
        group["gain_error_pct"] = (measured / predicted - 1) * 100 if measured and predicted else None
    return jobs, groups


def _hosts_of(job: dict[str, Any]) -> int:
    """How many hosts a job spanned, from its -H spec."""
    return len({entry.split(":")[0] for entry in (job.get("hosts") or "").split(",") if entry})


def gather_report(session: Session, experiment: Experiment) -> ExperimentReport:
    iterations = iteration_rows(session, [run.id for run in experiment.runs])
    jobs, groups = jobs_and_groups(session, experiment, iterations)
    for job in jobs:  # rows that stand on their own in a CSV file
        for row in iterations.get(job["run_id"], []):
            row.update(experiment=experiment.id, name=job["name"], mode=job["mode"], policy=job.get("policy"))
    return ExperimentReport(experiment_row(experiment), jobs, groups, loss_parity(jobs, iterations), iterations)


# ------------------------------------------------------------------------------------ every experiment


@dataclass
class ExperimentBrief:
    experiment: dict[str, Any]
    jobs: list[dict[str, Any]]
    groups: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        gains = [g["measured_gain"] for g in self.groups if g["measured_gain"] is not None]
        modes = sorted({j["mode"] for j in self.jobs},
                       key=lambda m: MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER))
        return {"id": self.experiment["id"], "kind": self.experiment["kind"], "status": self.experiment["status"],
                "created_at": self.experiment["created_at"], "jobs": len({j["name"] for j in self.jobs}),
                "runs": len(self.jobs), "modes": ",".join(modes),
                "best_crossover_gain": max(gains) if gains else None}


def all_experiments(session: Session) -> list[ExperimentBrief]:
    """Every experiment, newest first, with its jobs and (for comparison runs) group gains."""
    experiments = session.scalars(select(Experiment).order_by(Experiment.created_at.desc(), Experiment.id.desc())).all()
    briefs = []
    for experiment in experiments:
        jobs, groups = jobs_and_groups(session, experiment)
        briefs.append(ExperimentBrief(experiment_row(experiment), jobs, groups))
    return briefs


def gain_points(briefs: list[ExperimentBrief]) -> list[dict[str, Any]]:
    """Predicted vs measured crossover gain for every group of every comparison run.

    Predicted is the plan's figure when the run came from a plan, else the simulation of the policy
    crossover ran under, from the group's sequential runs (the fluid bound is a limit, not a
    prediction); groups with neither, or not measured, are left out.
    """
    points = []
    for brief in briefs:
        for group in brief.groups:
            simulated = (group.get("simulated") or {}).get(group.get("crossover_policy") or "", {}).get("gain")
            predicted = group["predicted_gain"] if group["predicted_gain"] is not None else simulated
            if predicted is None or group["measured_gain"] is None:
                continue
            points.append({"experiment": brief.experiment["id"], "group": group["group"], "jobs": group["jobs"],
                           "predicted_gain": predicted,
                           "predicted_from": "plan" if group["predicted_gain"] is not None else "model",
                           "measured_gain": group["measured_gain"]})
    return points
