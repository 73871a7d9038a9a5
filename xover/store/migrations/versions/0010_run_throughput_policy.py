"""The run_throughput view says how each run ran: its turn policy, engine and group (a comparison's
crossover runs differed only by policy, and could not be told apart in plain SQL).

Revision ID: 0010
"""

from alembic import op

from xover.store.views import (
    DROP_RUN_THROUGHPUT_VIEW,
    RUN_THROUGHPUT_VIEW_0001,
    RUN_THROUGHPUT_VIEW_0010,
)

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    """Rebuild the run_throughput view with each run's policy, engine and group."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute(RUN_THROUGHPUT_VIEW_0010)


def downgrade() -> None:
    """Rebuild the run_throughput view as it was."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute(RUN_THROUGHPUT_VIEW_0001)
