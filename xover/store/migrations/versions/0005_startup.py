"""A job's launch cost: from its launcher's start to its first iteration (processes, rendezvous,
imports, model and data set-up), measured by `xover profile` and charged by the plan's schedule.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    """Add the profiles' startup_ms."""
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("startup_ms", sa.Float))


def downgrade() -> None:
    """Drop the profiles' startup_ms."""
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("startup_ms")
