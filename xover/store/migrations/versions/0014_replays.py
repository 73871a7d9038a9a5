"""`xover simulate`: each policy's replay of a trace, its jobs, and the cluster's use over time.

Revision ID: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    """Create replays, replay_jobs and replay_utilisation (those missing: a store rewound to an earlier
    revision and upgraded again has them already)."""
    present = set(sa.inspect(op.get_bind()).get_table_names())
    for name, columns in TABLES.items():
        if name not in present:
            op.create_table(name, *columns())


def _replays() -> list[sa.Column]:
    return [
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.String(40), sa.ForeignKey("experiments.id"), nullable=False, index=True),
        sa.Column("policy", sa.String(40), nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("trace", sa.Text, nullable=False),
        sa.Column("trace_format", sa.String(20), nullable=False),
        sa.Column("hosts", sa.Text, nullable=False),
        sa.Column("devices", sa.Integer, nullable=False),
        sa.Column("settings", sa.JSON, nullable=False),
        sa.Column("jobs", sa.Integer, nullable=False),
        sa.Column("finished", sa.Integer, nullable=False),
        sa.Column("avg_jct_s", sa.Float),
        sa.Column("median_jct_s", sa.Float),
        sa.Column("p99_jct_s", sa.Float),
        sa.Column("makespan_s", sa.Float),
        sa.Column("avg_queue_s", sa.Float),
        sa.Column("utilisation", sa.Float),
        sa.Column("grouped_share", sa.Float),
        sa.Column("by_sharing", sa.JSON, nullable=False),
        sa.Column("events", sa.Integer, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("wall_s", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    ]


def _replay_jobs() -> list[sa.Column]:
    return [
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("replay_id", sa.Integer, sa.ForeignKey("replays.id"), nullable=False, index=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(200), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("arrival_s", sa.Float, nullable=False),
        sa.Column("start_s", sa.Float),
        sa.Column("end_s", sa.Float),
        sa.Column("work_s", sa.Float, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("grouped_s", sa.Float, nullable=False),
    ]


def _replay_utilisation() -> list[sa.Column]:
    return [
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("replay_id", sa.Integer, sa.ForeignKey("replays.id"), nullable=False, index=True),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float, nullable=False),
        sa.Column("busy", sa.Float, nullable=False),
        sa.Column("grouped", sa.Float, nullable=False),
        sa.Column("waiting", sa.Float, nullable=False),
        sa.Column("running", sa.Float, nullable=False),
    ]


TABLES = {"replays": _replays, "replay_jobs": _replay_jobs, "replay_utilisation": _replay_utilisation}


def downgrade() -> None:
    """Drop the replays' tables."""
    op.drop_table("replay_utilisation")
    op.drop_table("replay_jobs")
    op.drop_table("replays")
