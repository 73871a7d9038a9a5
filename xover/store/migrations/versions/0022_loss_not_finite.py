"""An iteration's loss that was not a number or infinite (iteration_metrics.loss_not_finite: 'nan', 'inf' or
'-inf', its loss NULL): SQLite stores a NaN as NULL, the mark of a loss not known (a script whose loss xover
cannot see), so a diverged job read as one whose last finite loss was its last.

Revision ID: 0022
"""

import sqlalchemy as sa
from alembic import op

from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW

revision = "0022"
down_revision = "0021"


def upgrade() -> None:
    """Add iteration_metrics.loss_not_finite (rows before it: NULL; SQLite lost their NaN losses, PostgreSQL kept
    them in loss), unless it is there: a store taken back to an older revision by hand (as the store's tests do)
    keeps the columns of later ones."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("iteration_metrics")}
    if "loss_not_finite" not in columns:  # in place: a batch rebuilt the table, which the view over runs reads
        op.add_column("iteration_metrics", sa.Column("loss_not_finite", sa.String(4)))


def downgrade() -> None:
    """Drop iteration_metrics.loss_not_finite in place (SQLite 3.35+ and PostgreSQL alike; the view over its rows
    made again around it): its losses read as not known again."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute("ALTER TABLE iteration_metrics DROP COLUMN loss_not_finite")
    op.execute(RUN_THROUGHPUT_VIEW)
