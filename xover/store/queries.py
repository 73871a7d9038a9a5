"""Reading and writing the store in the shapes the commands need."""

from __future__ import annotations

import secrets
import statistics
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..recipes import Recipe
from .models import Evaluation, Experiment, IterationMetric, Plan, PlanGroup, RecipeSnapshot, Run


def new_experiment_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def snapshot_recipe(session: Session, recipe: Recipe) -> RecipeSnapshot:
    found = session.scalars(select(RecipeSnapshot).where(RecipeSnapshot.hash == recipe.hash)).first()
    if found is None:
        found = RecipeSnapshot(name=recipe.name, hash=recipe.hash, path=recipe.path, body=recipe.to_dict())
        session.add(found)
        session.flush()
    return found


def warmup_steps(iterations: int) -> int:
    """Iterations left out of steady-state figures (start-up, first all-reduces, caches)."""
    return min(5, max(1, iterations // 10))


def run_summary(session: Session, run: Run) -> dict[str, Any]:
    """One job of one mode, in the names scripts rely on (`xover run --json`, `xover report`)."""
    metrics = session.scalars(select(IterationMetric).where(IterationMetric.run_id == run.id)
                              .order_by(IterationMetric.step)).all()
    steady = metrics[warmup_steps(len(metrics)):] or metrics
    seconds = sum(m.iteration_s for m in steady)
    evaluations = session.scalars(select(Evaluation).where(Evaluation.run_id == run.id)
                                  .order_by(Evaluation.step)).all()
    final_eval = {e.metric: e.value for e in evaluations if e.step == max(x.step for x in evaluations)} if evaluations else {}

    def median_ms(attribute: str) -> float | None:
        return statistics.median(getattr(m, attribute) for m in steady) * 1000 if steady else None

    return {
        "run_id": run.id, "experiment": run.experiment_id, "name": run.name, "recipe": run.recipe.path,
        "mode": run.mode, "group": run.group_index, "slot": run.slot, "engine": run.engine, "np": run.np,
        "status": run.status, "exit_code": run.exit_code, "iterations": len(metrics),
        "iterations_planned": run.iterations_planned,
        "samples_per_s": sum(m.samples for m in steady) / seconds if seconds > 0 else None,
        "iteration_ms": median_ms("iteration_s"), "compute_ms": median_ms("compute_s"),
        "data_ms": median_ms("data_s"), "communication_ms": median_ms("communication_s"),
        "wait_ms": median_ms("wait_s"),
        "final_loss": metrics[-1].loss if metrics else None,
        "accuracy": final_eval.get("test_accuracy", final_eval.get("test_token_accuracy")),
        "evaluations": final_eval,
        "wall_s": (run.ended_at - run.started_at).total_seconds() if run.ended_at and run.started_at else None,
        "log_dir": run.log_dir, "error": run.error,
    }


def experiment_jobs(session: Session, experiment_id: str) -> list[dict[str, Any]]:
    experiment = session.get(Experiment, experiment_id)
    return [run_summary(session, run) for run in experiment.runs] if experiment else []


def losses(session: Session, run_id: int) -> list[float]:
    return list(session.scalars(select(IterationMetric.loss).where(IterationMetric.run_id == run_id)
                                .order_by(IterationMetric.step)))


def compare_modes(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group: aggregate throughput of each mode, normalised by each job's speed alone.

    A job alone runs at its sequential (solo) samples/s, so sequential aggregates to 1.0 job-worth
    of work per second; crossover aggregates to sum_j (samples/s under crossover / alone).
    """
    # the same recipe may sit in two groups of a plan: compare a job with its own group's run alone
    alone = {(j["group"], j["name"]): j["samples_per_s"] for j in jobs
             if j["mode"] in ("sequential", "solo") and j["samples_per_s"]}
    groups: dict[int, dict[str, Any]] = {}
    for job in jobs:
        if job["mode"] not in ("concurrent", "crossover") or job["group"] is None:
            continue
        group = groups.setdefault(job["group"], {"group": job["group"], "jobs": [], "normalized": {}})
        if job["name"] not in group["jobs"]:
            group["jobs"].append(job["name"])
        solo = alone.get((job["group"], job["name"]))
        if job["samples_per_s"] and solo:
            job["slowdown"] = solo / job["samples_per_s"]
            group["normalized"].setdefault(job["mode"], 0.0)
            group["normalized"][job["mode"]] += job["samples_per_s"] / solo
    for group in groups.values():
        normalized = group.pop("normalized")
        group["crossover_vs_sequential"] = normalized.get("crossover")
        group["concurrent_vs_sequential"] = normalized.get("concurrent")
        if normalized.get("crossover") and normalized.get("concurrent"):
            group["crossover_vs_concurrent"] = normalized["crossover"] / normalized["concurrent"]
        else:
            group["crossover_vs_concurrent"] = None
    for job in jobs:
        if job["mode"] in ("sequential", "solo") and job["samples_per_s"]:
            job["slowdown"] = 1.0
        job.setdefault("slowdown", None)
    return sorted(groups.values(), key=lambda g: g["group"])


def store_plan(session: Session, body: dict[str, Any], path: str | None = None) -> int:
    """A plan file's content as rows (plans, plan_groups); returns the plan's id."""
    plan = Plan(algo=body.get("algo", "?"), body=body, path=path,
                predicted_aggregate_gain=body.get("predicted_aggregate_gain", 1.0))
    session.add(plan)
    session.flush()
    for index, group in enumerate(body["groups"]):
        session.add(PlanGroup(plan_id=plan.id, index=index, jobs=group["jobs"], devices=group["devices"],
                              wave=group.get("wave", 0), predicted_period_ms=group.get("predicted_period_ms", 0.0),
                              predicted_gain=group.get("predicted_gain", 1.0)))
    return plan.id
