"""An iteration's evaluation_s: the seconds of it its model spent evaluating (a recipe's evaluation, or an
unmodified script's forwards without gradients), by which an adaptive group leaves it out of its windows.

Revision ID: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    """Add iteration_metrics.evaluation_s, unless it is there: a store taken back to an older revision by hand
    (as the store's tests do) keeps the columns of later ones."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("iteration_metrics")}
    if "evaluation_s" not in columns:
        with op.batch_alter_table("iteration_metrics") as batch:
            batch.add_column(sa.Column("evaluation_s", sa.Float()))


def downgrade() -> None:
    """Drop iteration_metrics.evaluation_s."""
    with op.batch_alter_table("iteration_metrics") as batch:
        batch.drop_column("evaluation_s")
