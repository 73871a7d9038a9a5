"""A sharing measurement's tuning: the settings that change how jobs share devices (XOVER_COMM_THREADS,
XOVER_LINK_BANDS, ...) it was taken under, those unlike their defaults, so that a plan never uses a figure
measured with a switch turned off.

Revision ID: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    """Add sharing_measurements.tuning (rows before it: NULL, read as the defaults), unless it is there: a
    store taken back to an older revision by hand (as the store's tests do) keeps the columns of later ones."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("sharing_measurements")}
    if "tuning" not in columns:
        with op.batch_alter_table("sharing_measurements") as batch:
            batch.add_column(sa.Column("tuning", sa.Text()))


def downgrade() -> None:
    """Drop sharing_measurements.tuning."""
    with op.batch_alter_table("sharing_measurements") as batch:
        batch.drop_column("tuning")
