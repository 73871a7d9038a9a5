"""Adaptive groups and plans that learn: sharing_segments (an adaptive group's timeline of ways, each
decision with the figures it was made on) and sharing_measurements (a group's measured aggregate per way,
for the next plan of the same jobs).

It creates only the tables it finds missing: a store made on the adaptive branch before it followed 0015
(the launcher's job id) upgrades all the same.

Revision ID: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"


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
