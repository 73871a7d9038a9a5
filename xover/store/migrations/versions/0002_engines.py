"""Profiles per engine (horovod | torch), and a loss may be unknown (unmodified scripts print their own).

Databases from before migrations may already have some of this: only what is missing is added.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine.interfaces import ReflectedColumn

from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW_0001

revision = "0002"
down_revision = "0001"


def _columns(table: str) -> dict[str, ReflectedColumn]:
    return {c["name"]: c for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    """Add the profiles' engine to their key and let a loss be null, where the database lacks either."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)  # SQLite rebuilds tables in batch mode; the view would break
    if "engine" not in _columns("profiles"):
        with op.batch_alter_table("profiles") as batch:
            batch.add_column(sa.Column("engine", sa.String(20), nullable=False, server_default="horovod"))
            batch.drop_index("ix_profiles_key")
            batch.create_index("ix_profiles_key", ["recipe_hash", "np", "bandwidth", "hardware", "engine"])
    if not _columns("iteration_metrics")["loss"]["nullable"]:
        with op.batch_alter_table("iteration_metrics") as batch:
            batch.alter_column("loss", existing_type=sa.Float, nullable=True)
    op.execute(RUN_THROUGHPUT_VIEW_0001)


def downgrade() -> None:
    """Drop the profiles' engine from their key and table."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    with op.batch_alter_table("profiles") as batch:
        batch.drop_index("ix_profiles_key")
        batch.drop_column("engine")
        batch.create_index("ix_profiles_key", ["recipe_hash", "np", "bandwidth", "hardware"])
    op.execute(RUN_THROUGHPUT_VIEW_0001)
