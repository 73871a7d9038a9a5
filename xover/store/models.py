"""The schema: typed SQLAlchemy 2.0 models over plain tables that `sqlite3` can query directly.

An *experiment* is one invocation (`xover train`, `xover run`, `xover profile`); a *run* is one
launched job inside it (one recipe, one mode); metrics and evaluations belong to a run.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Bump when a table or column changes; a database written by a newer xover is refused, not misread.
SCHEMA_VERSION = 1

RUN_STATUSES = ("pending", "running", "finished", "failed", "interrupted")
RUN_MODES = ("solo", "sequential", "concurrent", "crossover", "profile")


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class SchemaInfo(Base):
    __tablename__ = "schema_info"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int]
    written_by: Mapped[str] = mapped_column(String(32))


class RecipeSnapshot(Base):
    """A recipe as it was run, so a later edit of the file never rewrites history."""

    __tablename__ = "recipes"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(Text)
    body: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Experiment(Base):
    __tablename__ = "experiments"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # train | run | profile
    command: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default="running")
    bandwidth: Mapped[Optional[str]] = mapped_column(String(40))
    hosts: Mapped[str] = mapped_column(Text, default="localhost")  # every host a job of it ran on
    plan_id: Mapped[Optional[int]] = mapped_column(ForeignKey("plans.id"))
    hardware: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[Optional[datetime]]
    runs: Mapped[list["Run"]] = relationship(back_populates="experiment", order_by="Run.id")


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id"))
    name: Mapped[str] = mapped_column(String(200))  # the job's name (the recipe's name)
    mode: Mapped[str] = mapped_column(String(20))
    group_index: Mapped[Optional[int]]
    slot: Mapped[Optional[int]]  # the job's turn position inside its group
    engine: Mapped[str] = mapped_column(String(20), default="horovod")
    hosts: Mapped[str] = mapped_column(Text)
    np: Mapped[int]
    devices: Mapped[Optional[str]] = mapped_column(Text)
    iterations_planned: Mapped[Optional[int]]
    status: Mapped[str] = mapped_column(String(20), default="pending")
    exit_code: Mapped[Optional[int]]
    error: Mapped[Optional[str]] = mapped_column(Text)  # last log lines of a failed job
    started_at: Mapped[Optional[datetime]]
    ended_at: Mapped[Optional[datetime]]
    log_dir: Mapped[Optional[str]] = mapped_column(Text)
    gradient_bytes: Mapped[Optional[int]]  # per iteration, per rank (the all-reduce's size)
    peak_memory_gb: Mapped[Optional[float]]  # rank 0: GPU allocator peak, or CPU resident set
    experiment: Mapped[Experiment] = relationship(back_populates="runs")
    recipe: Mapped[RecipeSnapshot] = relationship()


class IterationMetric(Base):
    """One training iteration of rank 0. Phases in seconds; `time_s` counts from the run's start."""

    __tablename__ = "iteration_metrics"
    __table_args__ = (UniqueConstraint("run_id", "step"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int]
    time_s: Mapped[float]
    wall_time: Mapped[float]  # unix time at the end of the iteration, for timelines across jobs
    iteration_s: Mapped[float]
    data_s: Mapped[float]
    compute_s: Mapped[float]
    communication_s: Mapped[float]  # exposed: waiting for the previous step's all-reduce
    wait_s: Mapped[float]  # waiting for the crossover turn
    samples: Mapped[int]  # samples processed by all ranks in this iteration
    loss: Mapped[Optional[float]]  # unknown for unmodified scripts (they print their own)


class Evaluation(Base):
    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int]
    metric: Mapped[str] = mapped_column(String(60))
    value: Mapped[float]


class Profile(Base):
    """A job measured alone: medians over iterations after warm-up, keyed so it can be reused."""

    __tablename__ = "profiles"
    __table_args__ = (Index("ix_profiles_key", "recipe_hash", "np", "bandwidth", "hardware", "engine"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id"))
    recipe_hash: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id"))
    name: Mapped[str] = mapped_column(String(200))
    np: Mapped[int]
    engine: Mapped[str] = mapped_column(String(20), default="horovod")
    bandwidth: Mapped[str] = mapped_column(String(40))  # "host" when the network was not shaped
    hardware: Mapped[str] = mapped_column(Text)
    iterations: Mapped[int]
    data_ms: Mapped[float]
    compute_ms: Mapped[float]
    comm_ms: Mapped[float]
    iteration_ms: Mapped[float]
    samples_per_s: Mapped[float]
    memory_gb: Mapped[float]
    gradient_bytes: Mapped[int]
    spread: Mapped[dict] = mapped_column(JSON)  # per-phase p10/p90
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    recipe: Mapped[RecipeSnapshot] = relationship()


class Plan(Base):
    __tablename__ = "plans"
    id: Mapped[int] = mapped_column(primary_key=True)
    algo: Mapped[str] = mapped_column(String(20))
    body: Mapped[dict] = mapped_column(JSON)  # the plan file's content
    predicted_aggregate_gain: Mapped[float]
    path: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    groups: Mapped[list["PlanGroup"]] = relationship(back_populates="plan", order_by="PlanGroup.index")


class PlanGroup(Base):
    __tablename__ = "plan_groups"
    id: Mapped[int] = mapped_column(primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id"), index=True)
    index: Mapped[int]
    jobs: Mapped[list] = mapped_column(JSON)
    devices: Mapped[list] = mapped_column(JSON)
    wave: Mapped[int]
    predicted_period_ms: Mapped[float]
    predicted_gain: Mapped[float]
    plan: Mapped[Plan] = relationship(back_populates="groups")
