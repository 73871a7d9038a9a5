"""The schema of xover's first release (commit cc272ad), the base every database upgrades from.

Databases written before migrations existed are stamped with this revision and upgraded by the
next ones, which therefore only add what is missing.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW_0001

revision = "0001"
down_revision = None


def upgrade() -> None:
    """Create the first release's tables and its run_throughput view."""
    _create_recipe_and_experiment_tables()
    _create_run_tables()
    _create_evaluation_and_profile_tables()


def _create_recipe_and_experiment_tables() -> None:
    """The tables schema_info, recipes, plans and experiments."""
    op.create_table(
        "schema_info",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("written_by", sa.String(32), nullable=False),
    )
    op.create_table(
        "recipes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, index=True),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "plans",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("algo", sa.String(20), nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("predicted_aggregate_gain", sa.Float, nullable=False),
        sa.Column("path", sa.Text),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("bandwidth", sa.String(40)),
        sa.Column("hosts", sa.Text, nullable=False),
        sa.Column("plan_id", sa.Integer, sa.ForeignKey("plans.id")),
        sa.Column("hardware", sa.Text),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("ended_at", sa.DateTime),
    )


def _create_run_tables() -> None:
    """The tables plan_groups, runs and iteration_metrics."""
    op.create_table(
        "plan_groups",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("plan_id", sa.Integer, sa.ForeignKey("plans.id"), nullable=False, index=True),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("jobs", sa.JSON, nullable=False),
        sa.Column("devices", sa.JSON, nullable=False),
        sa.Column("wave", sa.Integer, nullable=False),
        sa.Column("predicted_period_ms", sa.Float, nullable=False),
        sa.Column("predicted_gain", sa.Float, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.String(40), sa.ForeignKey("experiments.id"), nullable=False, index=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("mode", sa.String(20), nullable=False),
        sa.Column("group_index", sa.Integer),
        sa.Column("slot", sa.Integer),
        sa.Column("engine", sa.String(20), nullable=False),
        sa.Column("hosts", sa.Text, nullable=False),
        sa.Column("np", sa.Integer, nullable=False),
        sa.Column("devices", sa.Text),
        sa.Column("iterations_planned", sa.Integer),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("started_at", sa.DateTime),
        sa.Column("ended_at", sa.DateTime),
        sa.Column("log_dir", sa.Text),
        sa.Column("gradient_bytes", sa.Integer),
        sa.Column("peak_memory_gb", sa.Float),
    )
    op.create_table(
        "iteration_metrics",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("time_s", sa.Float, nullable=False),
        sa.Column("wall_time", sa.Float, nullable=False),
        sa.Column("iteration_s", sa.Float, nullable=False),
        sa.Column("data_s", sa.Float, nullable=False),
        sa.Column("compute_s", sa.Float, nullable=False),
        sa.Column("communication_s", sa.Float, nullable=False),
        sa.Column("wait_s", sa.Float, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("loss", sa.Float, nullable=False),
        sa.UniqueConstraint("run_id", "step"),
    )


def _create_evaluation_and_profile_tables() -> None:
    """The tables evaluations and profiles (with the profiles' key index), then the run_throughput view."""
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(60), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id"), nullable=False),
        sa.Column("recipe_hash", sa.String(64), nullable=False),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id")),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("np", sa.Integer, nullable=False),
        sa.Column("bandwidth", sa.String(40), nullable=False),
        sa.Column("hardware", sa.Text, nullable=False),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("data_ms", sa.Float, nullable=False),
        sa.Column("compute_ms", sa.Float, nullable=False),
        sa.Column("comm_ms", sa.Float, nullable=False),
        sa.Column("iteration_ms", sa.Float, nullable=False),
        sa.Column("samples_per_s", sa.Float, nullable=False),
        sa.Column("memory_gb", sa.Float, nullable=False),
        sa.Column("gradient_bytes", sa.Integer, nullable=False),
        sa.Column("spread", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_profiles_key", "profiles", ["recipe_hash", "np", "bandwidth", "hardware"])
    op.execute(RUN_THROUGHPUT_VIEW_0001)


def downgrade() -> None:
    """Drop the view and every table."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    for table in (
        "profiles",
        "evaluations",
        "iteration_metrics",
        "runs",
        "plan_groups",
        "experiments",
        "plans",
        "recipes",
        "schema_info",
    ):
        op.drop_table(table)
