"""The socket priority a job's all-reduces carried on the shared link (crossover, work-conserving: the
job that needs the link least goes first), as its ranks applied it.

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    """Add the runs' link_priority."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("link_priority", sa.Integer))


def downgrade() -> None:
    """Drop the runs' link_priority."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("link_priority")
