"""Co-location interference per profile: a job's compute measured next to a reference partner and
the slow-down left once the model's own terms (the partner's communication CPU) are accounted for.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

COLUMNS = [
    sa.Column("corun_partner", sa.String(200)),
    sa.Column("corun_device_ms", sa.Float),
    sa.Column("interference", sa.Float),
]


def upgrade() -> None:
    """Add the profiles' interference columns."""
    with op.batch_alter_table("profiles") as batch:
        for column in COLUMNS:
            batch.add_column(column)


def downgrade() -> None:
    """Drop the profiles' interference columns."""
    with op.batch_alter_table("profiles") as batch:
        for column in COLUMNS:
            batch.drop_column(column.name)
