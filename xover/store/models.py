"""The schema: typed SQLAlchemy 2.0 models over plain tables that `sqlite3` can query directly.

An *experiment* is one invocation (`xover train`, `xover run`, `xover profile`); a *run* is one
launched job inside it (one recipe, one mode); metrics and evaluations belong to a run.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ..sharing import OPEN_STATUSES, RunStatus

# Tables change through Alembic migrations (store/migrations/); schema_info keeps the xover that
# last upgraded the database. A database written by a newer xover is refused, not misread.
SCHEMA_VERSION = 3

# A run is pending, running, finished, failed, interrupted, lost, timeout or cancelled; pending/running
# are the only non-terminal states; `lost`: the xover that ran it is gone (killed, machine rebooted)
# and a later command found its processes gone; `timeout`: ended by --timeout.
ACTIVE_STATUSES = OPEN_STATUSES  # (RunStatus: xover/sharing.py)


def utcnow() -> datetime:
    """Now in UTC, without a time zone: how every time is stored."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    """The models' declarative base."""

    pass


class SchemaInfo(Base):
    """One row: the schema version and the xover that last upgraded the database."""

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
    """One invocation of `xover train`, `run` or `profile`, and the process that runs it."""

    __tablename__ = "experiments"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # train | run | profile
    command: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default=RunStatus.RUNNING.value)
    bandwidth: Mapped[str | None] = mapped_column(String(40))
    hosts: Mapped[str] = mapped_column(Text, default="localhost")  # every host a job of it ran on
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id"))
    hardware: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]
    # the xover process that runs it, so a later command can tell a dead run from a live one
    owner_host: Mapped[str | None] = mapped_column(String(255))
    owner_pid: Mapped[int | None]
    owner_started: Mapped[float | None]  # the owner's process start time (pids are reused)
    runs: Mapped[list[Run]] = relationship(back_populates="experiment", order_by="Run.id")


class Run(Base):
    """One launched job of an experiment: one recipe in one mode, how and where it ran, and how it ended."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id"))
    name: Mapped[str] = mapped_column(String(200))  # the job's name (the recipe's name)
    mode: Mapped[str] = mapped_column(String(20))
    group_index: Mapped[int | None]
    slot: Mapped[int | None]  # the job's turn position inside its group
    policy: Mapped[str | None] = mapped_column(String(40))  # crossover: the turn policy it ran under
    engine: Mapped[str] = mapped_column(String(20), default="horovod")
    hosts: Mapped[str] = mapped_column(Text)
    np: Mapped[int]
    devices: Mapped[str | None] = mapped_column(Text)
    iterations_planned: Mapped[int | None]
    status: Mapped[str] = mapped_column(String(20), default=RunStatus.PENDING.value)
    exit_code: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(Text)  # last log lines of a failed job
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    log_dir: Mapped[str | None] = mapped_column(Text)
    gradient_bytes: Mapped[int | None]  # per iteration, per rank (the all-reduce's size)
    peak_memory_gb: Mapped[float | None]  # rank 0: GPU allocator peak, or CPU resident set
    turn_stats: Mapped[dict | None] = mapped_column(JSON)  # grants, yields, revocations, rank skew
    link_priority: Mapped[int | None]  # SO_PRIORITY its ranks' sockets carried (None: the default)
    comm_threads: Mapped[str | None] = mapped_column(String(10))  # batch | normal (runtime/thread_policy.py)
    checkpoints: Mapped[int | None]  # layer boundaries per iteration (where a turn can be yielded)
    device: Mapped[str | None] = mapped_column(String(40))  # rank 0's torch device, e.g. cpu, cuda:0
    backend: Mapped[str | None] = mapped_column(String(20))  # the engine's data path: nccl | gloo
    deterministic: Mapped[bool | None]  # deterministic kernels only (XOVER_DETERMINISTIC)
    devices_per_gpu: Mapped[int | None]  # devices one GPU counted as (XOVER_DEVICES_PER_GPU)
    gpu_sharing: Mapped[str | None] = mapped_column(String(20))  # time-slicing | mps (CUDA MPS daemon)
    launcher_job_id: Mapped[str | None] = mapped_column(String(40))  # its job at the launcher's scheduler
    # the job file and script it ran from, as found (a snapshot names the first file of its content only)
    inputs: Mapped[dict | None] = mapped_column(JSON)
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
    loss: Mapped[float | None]  # unknown for unmodified scripts (they print their own), or not finite (below)
    yields: Mapped[int | None]  # times the turn was given up mid-phase to a job ranked first
    link_s: Mapped[float | None]  # the step's all-reduces in flight: first gradient to last done
    comm_cpu_s: Mapped[float | None]  # CPU of the engine's communication threads in this iteration
    held: Mapped[list | None] = mapped_column(JSON)  # [start, end] wall times holding the turn
    evaluation_s: Mapped[float | None]  # of it, evaluating the model (IterationRecord.evaluation_s)
    # a loss that was 'nan', 'inf' or '-inf' (its loss NULL: SQLite keeps a NaN as NULL, which says "not known")
    loss_not_finite: Mapped[str | None] = mapped_column(String(4))


class Evaluation(Base):
    """One evaluation metric of a run at a step (test accuracy, loss)."""

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
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    name: Mapped[str] = mapped_column(String(200))
    np: Mapped[int]
    engine: Mapped[str] = mapped_column(String(20), default="horovod")
    bandwidth: Mapped[str] = mapped_column(String(40))  # "host" when the network was not shaped
    hosts: Mapped[int] = mapped_column(default=1)  # hosts its ranks spanned (their NICs carried the all-reduce)
    hardware: Mapped[str] = mapped_column(Text)
    iterations: Mapped[int]
    data_ms: Mapped[float]
    compute_ms: Mapped[float]
    comm_ms: Mapped[float]
    iteration_ms: Mapped[float]
    samples_per_s: Mapped[float]
    memory_gb: Mapped[float]
    gradient_bytes: Mapped[int]
    link_ms: Mapped[float | None]  # all-reduces in flight per iteration (the link's busy time)
    comm_cpu_ms: Mapped[float | None]  # CPU per iteration and rank taken by communication threads
    checkpoints: Mapped[int | None]  # layer boundaries per iteration where a turn can be yielded
    spread: Mapped[dict] = mapped_column(JSON)  # per-phase p10/p90
    # co-location: its device time per iteration next to a reference partner under crossover, and the
    # fraction by which that exceeds its device time alone (None: not measured; before 0009, the part
    # the partner's communication CPU did not explain)
    corun_partner: Mapped[str | None] = mapped_column(String(200))
    corun_device_ms: Mapped[float | None]
    interference: Mapped[float | None]
    corun_partner_link_share: Mapped[float | None]  # the partner's l / T (None: measured before 0007)
    startup_ms: Mapped[float | None]  # launcher start to first iteration (None: profiled before 0005)
    # its compute next to a partner computing the whole time, over alone, without turns: time-sliced and
    # under CUDA MPS (None: not measured)
    corun_stretch: Mapped[float | None]
    mps_stretch: Mapped[float | None]
    gpu_busy: Mapped[float | None]  # the GPU's utilisation (NVML) inside its compute windows, alone
    # the settings that change a job alone it was taken under, those unlike their defaults (Settings.tuning of
    # ALONE_FIELDS; '' and NULL, before migration 0019: the defaults)
    tuning: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    recipe: Mapped[RecipeSnapshot] = relationship()


class Plan(Base):
    """A plan as the planner made it: the plan file's content and its predicted gain."""

    __tablename__ = "plans"
    id: Mapped[int] = mapped_column(primary_key=True)
    algo: Mapped[str] = mapped_column(String(20))
    body: Mapped[dict] = mapped_column(JSON)  # the plan file's content
    predicted_aggregate_gain: Mapped[float]
    path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    groups: Mapped[list[PlanGroup]] = relationship(back_populates="plan", order_by="PlanGroup.index")


class PlanGroup(Base):
    """One group of a plan: its jobs, their devices, its wave and the planner's predictions for it."""

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


class TurnEvent(Base):
    """Something a reader of the run should know: what the turn service did (a lease revoked, a registration
    refused, turns lost, an adaptive group's switch), and a unit the scheduler did not start, and why."""

    __tablename__ = "turn_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    group_index: Mapped[int | None]
    host: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(40))
    slot: Mapped[int | None]
    device: Mapped[int | None]
    detail: Mapped[dict] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class Replay(Base):
    """One policy's replay of a trace (`xover simulate`): the experiment it belongs to (kind simulate),
    what was replayed how, and its figures (seconds; shares as fractions)."""

    __tablename__ = "replays"
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    policy: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(Text)  # the throughput model, in words
    trace: Mapped[str] = mapped_column(Text)
    trace_format: Mapped[str] = mapped_column(String(20))
    hosts: Mapped[str] = mapped_column(Text)
    devices: Mapped[int]
    settings: Mapped[dict] = mapped_column(JSON)  # semantics, placement, factors, max group, ...
    jobs: Mapped[int]
    finished: Mapped[int]
    avg_jct_s: Mapped[float | None]
    median_jct_s: Mapped[float | None]
    p99_jct_s: Mapped[float | None]
    makespan_s: Mapped[float | None]
    avg_queue_s: Mapped[float | None]
    utilisation: Mapped[float | None]
    grouped_share: Mapped[float | None]
    by_sharing: Mapped[dict] = mapped_column(JSON)  # way of sharing -> share of busy device time
    events: Mapped[int]
    preemptions: Mapped[int]
    wall_s: Mapped[float]  # how long the replay took
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReplayJob(Base):
    """One job of a replay: when it arrived, first started and ended (s from the trace's start)."""

    __tablename__ = "replay_jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    replay_id: Mapped[int] = mapped_column(ForeignKey("replays.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(200))  # its profile's (model's) name
    gpus: Mapped[int]
    arrival_s: Mapped[float]
    start_s: Mapped[float | None]
    end_s: Mapped[float | None]
    work_s: Mapped[float]  # its run alone
    preemptions: Mapped[int]
    grouped_s: Mapped[float]  # time it ran in a group


class ReplayUtilisation(Base):
    """The cluster over one span of a replay: devices busy and grouped (shares), jobs waiting and running."""

    __tablename__ = "replay_utilisation"
    id: Mapped[int] = mapped_column(primary_key=True)
    replay_id: Mapped[int] = mapped_column(ForeignKey("replays.id"), index=True)
    start_s: Mapped[float]
    end_s: Mapped[float]
    busy: Mapped[float]
    grouped: Mapped[float]
    waiting: Mapped[float]
    running: Mapped[float]


class SharingSegment(Base):
    """A stretch of an adaptive group's time in one way of sharing (run/adaptive.py): its warm-up, a probe
    window, a settled stretch with the figures the decision was made on, or its last job alone."""

    __tablename__ = "sharing_segments"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))  # the unit's first run (its slot 0)
    runs: Mapped[list] = mapped_column(JSON)  # every run of the unit, by slot
    group_index: Mapped[int | None]
    seq: Mapped[int]  # its place in the unit's timeline, from 0
    kind: Mapped[str] = mapped_column(String(20))  # warm-up | probe | settled | alone
    way: Mapped[str] = mapped_column(String(40))  # crossover (turns), concurrent or mps (none)
    reason: Mapped[str] = mapped_column(Text)  # why it began
    started: Mapped[float]  # wall times (unix): when it began (a switch is commanded then) and ended
    ended: Mapped[float | None]
    switch: Mapped[int | None]  # the turn servers' switch that began it (None: no switch)
    window: Mapped[list | None] = mapped_column(JSON)  # [start, end] wall times it was measured over
    speeds: Mapped[dict] = mapped_column(JSON)  # job -> speed relative to alone, measured over the window
    aggregate: Mapped[float | None]  # their sum
    error: Mapped[float | None]  # its standard error
    decision: Mapped[dict | None] = mapped_column(JSON)  # a settled one's figures; a probe's length


class SharingMeasurement(Base):
    """A group's measured aggregate in one way of sharing (the sum of its jobs' speeds relative to alone, as a
    comparison measures it), kept so that the next plan of the same jobs uses it instead of its simulation
    (plan/measured.py). Keyed by what makes a measurement hold: each job's recipe content without its
    length, ranks, engine and hosts (`jobs_key`), the link, the hardware, and the settings it was taken under."""

    __tablename__ = "sharing_measurements"
    __table_args__ = (Index("ix_sharing_measurements_key", "jobs_key", "link", "hardware", "way"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id"), index=True)
    group_index: Mapped[int | None]
    jobs_key: Mapped[str] = mapped_column(String(64))
    jobs: Mapped[list] = mapped_column(JSON)  # [{name, workload, np, engine, hosts}] in the key's order
    link: Mapped[str] = mapped_column(String(40))
    hardware: Mapped[str] = mapped_column(Text)
    way: Mapped[str] = mapped_column(String(40))
    policy: Mapped[str | None] = mapped_column(String(40))  # crossover's turn policy
    gain: Mapped[float]  # the aggregate over sequential
    speeds: Mapped[dict] = mapped_column(JSON)  # job name -> speed relative to alone
    window_s: Mapped[float | None]  # the overlap window it was measured over
    # the settings that change sharing it was taken under, those unlike their defaults (Settings.tuning;
    # '': the defaults; None: stored before 0018, taken as the defaults)
    tuning: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
