"""Turn policies and their measurements, the owner of an experiment (to find lost runs), turn
events, Slurm job ids; link rates stored canonically (1000mbit and 1gbit are one profile key).

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

from xover.rates import canonical_rate_or_none
from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW_0001

revision = "0003"
down_revision = "0002"

ADDED: dict[str, list[sa.Column]] = {
    "experiments": [
        sa.Column("owner_host", sa.String(255)),
        sa.Column("owner_pid", sa.Integer),
        sa.Column("owner_started", sa.Float),
    ],
    "runs": [
        sa.Column("policy", sa.String(40)),
        sa.Column("turn_stats", sa.JSON),
        sa.Column("slurm_job_id", sa.String(40)),
        sa.Column("checkpoints", sa.Integer),
        sa.Column("device", sa.String(40)),
    ],
    "iteration_metrics": [
        sa.Column("yields", sa.Integer),
        sa.Column("link_s", sa.Float),
        sa.Column("comm_cpu_s", sa.Float),
        sa.Column("held", sa.JSON),
    ],
    "profiles": [
        sa.Column("link_ms", sa.Float),
        sa.Column("comm_cpu_ms", sa.Float),
        sa.Column("checkpoints", sa.Integer),
        sa.Column("hosts", sa.Integer, nullable=False, server_default="1"),
    ],
}


def upgrade() -> None:
    """Add the columns of ADDED and the turn_events table; store the link rates already there canonically."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)  # SQLite rebuilds tables in batch mode; the view would break
    for table, columns in ADDED.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(column)
    op.create_table(
        "turn_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.String(40), sa.ForeignKey("experiments.id"), nullable=False, index=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id")),
        sa.Column("group_index", sa.Integer),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("slot", sa.Integer),
        sa.Column("device", sa.Integer),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
    )
    bind = op.get_bind()
    for table in ("profiles", "experiments"):
        rows = bind.execute(sa.text(f"SELECT id, bandwidth FROM {table} WHERE bandwidth IS NOT NULL")).fetchall()
        for row_id, rate in rows:
            canonical = canonical_rate_or_none(rate)
            if canonical and canonical != rate:
                bind.execute(
                    sa.text(f"UPDATE {table} SET bandwidth = :rate WHERE id = :id"), {"rate": canonical, "id": row_id}
                )
    op.execute(RUN_THROUGHPUT_VIEW_0001)


def downgrade() -> None:
    """Drop turn_events and the columns of ADDED; the rates stay canonical."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.drop_table("turn_events")
    for table, columns in ADDED.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column.name)
    op.execute(RUN_THROUGHPUT_VIEW_0001)
