"""A profile's tuning: the settings that change how fast a job runs alone (XOVER_THREADS_PER_RANK,
XOVER_PIN_CORES, XOVER_TORCH_BACKEND, XOVER_DETERMINISTIC) it was taken under, those unlike their defaults, so
that a profile taken with other threads or another backend is never reused, planned with or ordered by.

Revision ID: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"


def upgrade() -> None:
    """Add profiles.tuning (rows before it: NULL, read as the defaults), unless it is there: a store taken back
    to an older revision by hand (as the store's tests do) keeps the columns of later ones."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("profiles")}
    if "tuning" not in columns:
        with op.batch_alter_table("profiles") as batch:
            batch.add_column(sa.Column("tuning", sa.Text()))


def downgrade() -> None:
    """Drop profiles.tuning."""
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("tuning")
