"""Gathering what a report shows from the store: one experiment in full, or every experiment in brief.

Everything here returns plain dicts and lists (no ORM objects), so the renderers (tables, JSON, CSV,
pictures, HTML) work after the session is closed and scripts get the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ..errors import XoverError
from ..planner import InvalidJobProfile, JobProfile, group_gain
from ..store.models import Experiment, IterationMetric, PlanGroup, Run
from ..store.queries import compare_modes, experiment_jobs
from ..store.session import Store, database_url, open_store
from .timeline import overlap_fraction

# Modes in the order a reader compares them: alone first, then sharing without and with turns.
MODE_ORDER = ("solo", "profile", "sequential", "concurrent", "crossover")
ALONE_MODES = ("solo", "sequential", "profile")
SHARED_MODES = ("concurrent", "crossover")

ITERATION_FIELDS = ("experiment", "run_id", "name", "mode", "step", "wall_time", "iteration_s", "data_s",
                    "compute_s", "communication_s", "wait_s", "samples", "loss")


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
    url = database_url(db)
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix + ":memory:" and not Path(url[len(prefix):]).exists():
        raise ReportError(f"no database at {url[len(prefix):]}: nothing has been run yet "
                          "(start with `xover train mlp-digits`, or point --db / XOVER_DB at one)")
    return open_store(db)


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
    return group, job["name"], mode, job["run_id"]


def experiment_row(experiment: Experiment) -> dict[str, Any]:
    return {"id": experiment.id, "kind": experiment.kind, "status": experiment.status,
            "command": experiment.command, "bandwidth": experiment.bandwidth, "hosts": experiment.hosts,
            "plan_id": experiment.plan_id, "hardware": experiment.hardware,
            "created_at": _utc_text(experiment.created_at), "ended_at": _utc_text(experiment.ended_at)}


def _utc_text(moment: datetime | None) -> str | None:
    # The store keeps naive UTC; say so, so that scripts do not read it as local time.
    return moment.isoformat(sep=" ", timespec="seconds") + " UTC" if moment else None


def model_gain(sequential_jobs: list[dict[str, Any]]) -> float | None:
    """The model's ideal crossover gain from each job's medians measured alone (None if unknown)."""
    try:
        profiles = [JobProfile(name=job["name"], devices=job["np"], compute_ms=job["compute_ms"],
                               comm_ms=job["communication_ms"], memory_gb=0.0, data_ms=job["data_ms"] or 0.0)
                    for job in sequential_jobs]
    except InvalidJobProfile:  # a job that failed before its first iteration has no medians
        return None
    return group_gain(profiles) if profiles else None


def jobs_and_groups(session: Session, experiment: Experiment) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Jobs with slowdowns, and per group: throughput by mode, predicted, model and measured gain."""
    jobs = sorted(experiment_jobs(session, experiment.id), key=job_order)
    groups = compare_modes(jobs)
    planned: dict[int, float] = {}
    if experiment.plan_id is not None:
        planned = {g.index: g.predicted_gain for g in
                   session.scalars(select(PlanGroup).where(PlanGroup.plan_id == experiment.plan_id))}
    for group in groups:
        alone = [j for j in jobs if j["group"] == group["group"] and j["mode"] == "sequential"
                 and j["name"] in group["jobs"]]
        measured = group["crossover_vs_sequential"]
        predicted = planned.get(group["group"])
        group["sequential"] = 1.0 if alone else None
        group["predicted_gain"] = predicted
        group["model_gain"] = model_gain(alone) if len(alone) == len(group["jobs"]) else None
        group["measured_gain"] = measured
        group["gain_error_pct"] = (measured / predicted - 1) * 100 if measured and predicted else None
    return jobs, groups


def iteration_rows(session: Session, experiment_id: str) -> dict[int, list[dict[str, Any]]]:
    rows: dict[int, list[dict[str, Any]]] = {}
    query = (select(Run.name, Run.mode, IterationMetric).join(IterationMetric, IterationMetric.run_id == Run.id)
             .where(Run.experiment_id == experiment_id).order_by(Run.id, IterationMetric.step))
    for name, mode, metric in session.execute(query):
        rows.setdefault(metric.run_id, []).append(
            {"experiment": experiment_id, "run_id": metric.run_id, "name": name, "mode": mode, "step": metric.step,
             "wall_time": metric.wall_time, "iteration_s": metric.iteration_s, "data_s": metric.data_s,
             "compute_s": metric.compute_s, "communication_s": metric.communication_s, "wait_s": metric.wait_s,
             "samples": metric.samples, "loss": metric.loss})
    return rows


def loss_parity(jobs: list[dict[str, Any]], iterations: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per job shared with others: the largest per-iteration |loss difference| from the same job alone.

    Taking turns must not change what is computed, so on deterministic devices this is exactly 0.
    """
    alone = {(j["group"], j["name"]): j for j in jobs if j["mode"] == "sequential"}
    parity = []
    for job in jobs:
        reference = alone.get((job["group"], job["name"]))
        if job["mode"] not in SHARED_MODES or reference is None:
            continue
        alone_losses = {row["step"]: row["loss"] for row in iterations.get(reference["run_id"], [])}
        shared_losses = {row["step"]: row["loss"] for row in iterations.get(job["run_id"], [])}
        # unmodified scripts report no loss (they print their own): nothing to compare for them
        steps = sorted(s for s in alone_losses.keys() & shared_losses.keys()
                       if alone_losses[s] is not None and shared_losses[s] is not None)
        largest = max((abs(shared_losses[s] - alone_losses[s]) for s in steps), default=None)
        parity.append({"group": job["group"], "name": job["name"], "mode": job["mode"], "steps": len(steps),
                       "max_abs_loss_diff": largest, "identical": largest == 0.0 if steps else None})
    return parity


def add_overlaps(groups: list[dict[str, Any]], jobs: list[dict[str, Any]],
                 iterations: dict[int, list[dict[str, Any]]]) -> None:
    """`concurrent_overlap` / `crossover_overlap`: share of the mode's run time that all jobs ran together."""
    for group in groups:
        for mode in SHARED_MODES:
            runs = [iterations.get(j["run_id"], []) for j in jobs if j["group"] == group["group"] and j["mode"] == mode]
            group[f"{mode}_overlap"] = overlap_fraction(runs)


def overlap_warnings(report: ExperimentReport, least: float = 0.5) -> list[str]:
    warnings = []
    for group in report.groups:
        for mode in SHARED_MODES:
            overlap = group.get(f"{mode}_overlap")
            if overlap is not None and overlap < least:
                warnings.append(f"group {group['group']}: the {mode} jobs ran at the same time for only "
                                f"{overlap:.0%} of that run, so its figures mostly describe jobs running alone "
                                "(a short run: give more --iterations)")
    return warnings


def gather_report(session: Session, experiment: Experiment) -> ExperimentReport:
    jobs, groups = jobs_and_groups(session, experiment)
    iterations = iteration_rows(session, experiment.id)
    add_overlaps(groups, jobs, iterations)
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

    Predicted is the plan's figure when the run came from a plan, else the model's ideal from the
    group's sequential runs; groups with neither, or not measured, are left out.
    """
    points = []
    for brief in briefs:
        for group in brief.groups:
            predicted = group["predicted_gain"] if group["predicted_gain"] is not None else group["model_gain"]
            if predicted is None or group["measured_gain"] is None:
                continue
            points.append({"experiment": brief.experiment["id"], "group": group["group"], "jobs": group["jobs"],
                           "predicted_gain": predicted,
                           "predicted_from": "plan" if group["predicted_gain"] is not None else "model",
                           "measured_gain": group["measured_gain"]})
    return points
