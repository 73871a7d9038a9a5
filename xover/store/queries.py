"""Reading and writing the store in the shapes the commands need."""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..recipes import Recipe
from ..records import IterationRecord
from .models import IterationMetric, RecipeSnapshot, Run, utcnow


def new_experiment_id() -> str:
    """A new experiment's id: its start (local time), then four random hex digits."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def snapshot_recipe(session: Session, recipe: Recipe) -> RecipeSnapshot:
    """The stored snapshot of `recipe` (one per content hash), inserted if new. Several xover
    processes may do this at once: the insert does nothing when another one got there first."""
    query = select(RecipeSnapshot).where(RecipeSnapshot.hash == recipe.hash)
    found = session.scalars(query).first()
    if found is not None:
        return found
    values = {
        "name": recipe.name,
        "hash": recipe.hash,
        "path": recipe.path,
        "body": recipe.to_dict(),
        "created_at": utcnow(),
    }
    dialect = session.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite_insert if dialect == "sqlite" else postgresql_insert
        session.execute(insert(RecipeSnapshot).values(**values).on_conflict_do_nothing(index_elements=["hash"]))
    else:
        try:
            with session.begin_nested():
                session.add(RecipeSnapshot(**values))
        except IntegrityError:
            pass
    return session.scalars(query).one()


def run_inputs(recipe: Recipe) -> dict[str, str] | None:
    """The files a run of `recipe` is made from, whole paths as found now (runs.inputs): its job file and its
    script. The snapshot keeps the first path of a content only, and a copy elsewhere is a file of its own."""
    found = {"job_file": recipe.path, "script": recipe.script or ""}
    return {what: os.path.abspath(path) for what, path in found.items() if path} or None


# an iteration record's fields (xover/records.py), each a column of iteration_metrics
ITERATION_COLUMNS = tuple(spec.name for spec in fields(IterationRecord))


def iteration_metric(run_id: int, record: IterationRecord) -> IterationMetric:
    """An iteration's row: its record's fields, a loss that is not finite kept as its word (loss_not_finite)."""
    values = {column: getattr(record, column) for column in ITERATION_COLUMNS}
    loss = record.loss
    if loss is not None and not math.isfinite(loss):
        values["loss"], values["loss_not_finite"] = None, str(float(loss))  # 'nan', 'inf', '-inf'
    return IterationMetric(run_id=run_id, **values)


def loss_of(metric: IterationMetric) -> float | None:
    """An iteration's loss as it was: NaN or infinite where it was not finite, None where it is not known."""
    return float(metric.loss_not_finite) if metric.loss_not_finite is not None else metric.loss


def iteration_rows(session: Session, run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Every iteration of the runs, as plain rows in step order."""
    rows: dict[int, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
    if not run_ids:
        return rows
    query = (
        select(IterationMetric)
        .where(IterationMetric.run_id.in_(run_ids))
        .order_by(IterationMetric.run_id, IterationMetric.step)
    )
    for metric in session.scalars(query):
        row = {"run_id": metric.run_id, **{c: getattr(metric, c) for c in ITERATION_COLUMNS}}
        rows[metric.run_id].append({**row, "loss": loss_of(metric)})
    return rows


def run_fields(run: Run) -> dict[str, Any]:
    """A run's own fields as results carry them (RunResult's first ones): times as UTC text, and its wall time."""
    return {
        "run_id": run.id,
        "experiment": run.experiment_id,
        "name": run.name,
        "recipe": run.recipe.path,
        "mode": run.mode,
        "policy": run.policy,
        "group": run.group_index,
        "slot": run.slot,
        "engine": run.engine,
        "np": run.np,
        "hosts": run.hosts,
        "devices": run.devices,
        "status": run.status,
        "exit_code": run.exit_code,
        "iterations_planned": run.iterations_planned,
        "gradient_bytes": run.gradient_bytes,
        "started_at": run.started_at.isoformat(sep=" ") if run.started_at else None,  # UTC
        "ended_at": run.ended_at.isoformat(sep=" ") if run.ended_at else None,
        "wall_s": (run.ended_at - run.started_at).total_seconds() if run.ended_at and run.started_at else None,
        "log_dir": run.log_dir,
        "error": run.error,
        "turn_stats": run.turn_stats,
        "launcher_job_id": run.launcher_job_id,
        "link_priority": run.link_priority,
        "comm_threads": run.comm_threads,
        "checkpoints": run.checkpoints,
        "peak_memory_gb": run.peak_memory_gb,
        "device": run.device,
        "backend": run.backend,
        "deterministic": run.deterministic,
        "devices_per_gpu": run.devices_per_gpu,
        "gpu_sharing": run.gpu_sharing,
        # where its ranks gave up crossover turns (the rest of that rank's run went without them)
        "turns_lost": (run.turn_stats or {}).get("lost") or None,
    }
