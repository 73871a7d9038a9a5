"""How a job's communication threads were scheduled on the cores it shared: 'batch' (crossover on a
CPU: SCHED_BATCH, no preempting a partner's compute on wake-up) or 'normal' (the default policy).

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    """Add the runs' comm_threads."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("comm_threads", sa.String(10)))


def downgrade() -> None:
    """Drop the runs' comm_threads."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("comm_threads")
