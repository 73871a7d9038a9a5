"""Adaptive groups and plans that learn: sharing_segments (an adaptive group's timeline of ways, each
decision with the figures it was made on) and sharing_measurements (a group's measured aggregate per way,
for the next plan of the same jobs).

0014 is `xover simulate`'s (its replays), made on a branch of its own at the same time as this one: this
migration follows it where it is there, and 0013 where it is not yet, so that either branch merges first
without a second head. A store upgraded by this migration before 0014 arrived gets 0014's tables at
the next upgrade all the same: 0014 creates the tables it finds missing.

Revision ID: 0015
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014" if any(Path(__file__).parent.glob("0014_*.py")) else "0013"


def upgrade() -> None:
    """Create sharing_segments and sharing_measurements (those missing)."""
    present = set(sa.inspect(op.get_bind()).get_table_names())
    if "sharing_segments" not in present:
        op.create_table(
            "sharing_segments",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("experiment_id", sa.String(40), sa.ForeignKey("experiments.id"), nullable=False, index=True),
            sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
            sa.Column("runs", sa.JSON, nullable=False),
            sa.Column("group_index", sa.Integer),
            sa.Column("seq", sa.Integer, nullable=False),
            sa.Column("kind", sa.String(20), nullable=False),
            sa.Column("way", sa.String(40), nullable=False),
            sa.Column("reason", sa.Text, nullable=False),
            sa.Column("started", sa.Float, nullable=False),
            sa.Column("ended", sa.Float),
            sa.Column("switch", sa.Integer),
            sa.Column("window", sa.JSON),
            sa.Column("speeds", sa.JSON, nullable=False),
            sa.Column("aggregate", sa.Float),
            sa.Column("error", sa.Float),
            sa.Column("decision", sa.JSON),
            sa.UniqueConstraint("run_id", "seq"),
        )
    if "sharing_measurements" not in present:
        op.create_table(
            "sharing_measurements",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("experiment_id", sa.String(40), sa.ForeignKey("experiments.id"), nullable=False, index=True),
            sa.Column("group_index", sa.Integer),
            sa.Column("jobs_key", sa.String(64), nullable=False),
            sa.Column("jobs", sa.JSON, nullable=False),
            sa.Column("link", sa.String(40), nullable=False),
            sa.Column("hardware", sa.Text, nullable=False),
            sa.Column("way", sa.String(40), nullable=False),
            sa.Column("policy", sa.String(40)),
            sa.Column("gain", sa.Float, nullable=False),
            sa.Column("speeds", sa.JSON, nullable=False),
            sa.Column("window_s", sa.Float),
            sa.Column("created_at", sa.DateTime, nullable=False),
        )
        op.create_index("ix_sharing_measurements_key", "sharing_measurements", ["jobs_key", "link", "hardware", "way"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_index("ix_sharing_measurements_key", table_name="sharing_measurements")
    op.drop_table("sharing_measurements")
    op.drop_table("sharing_segments")
