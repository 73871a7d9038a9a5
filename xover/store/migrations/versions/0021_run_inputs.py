"""A run's own files: the job file and the script it ran from, as that run found them (runs.inputs). A recipe's
snapshot is kept once per content and names the path of the first file it was read from, so a byte-identical
copy elsewhere (a project folder copied for the next experiment) was no file of any run, and `report --out`
wrote over it.

Revision ID: 0021
"""

import sqlalchemy as sa
from alembic import op

from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    """Add runs.inputs (rows before it: NULL, their snapshot's paths stand for them), unless it is there: a store
    taken back to an older revision by hand (as the store's tests do) keeps the columns of later ones."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("runs")}
    if "inputs" not in columns:  # in place: a batch rebuilt runs, which other tables' keys refer to
        op.add_column("runs", sa.Column("inputs", sa.JSON()))


def downgrade() -> None:
    """Drop runs.inputs in place (SQLite 3.35+ and PostgreSQL alike; the view over runs made again around it)."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute("ALTER TABLE runs DROP COLUMN inputs")
    op.execute(RUN_THROUGHPUT_VIEW)
