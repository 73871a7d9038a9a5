"""The run_throughput view gives no samples/s for a run that ended without finishing (failed, timeout,
interrupted, stopped, cancelled, lost): its throughput is no measurement, as `xover report`, `xover run` and
`xover train` have it (analysis.compare); its iterations and mean iteration time stay.

Revision ID: 0020
"""

from alembic import op

from xover.store.views import (
    DROP_RUN_THROUGHPUT_VIEW,
    RUN_THROUGHPUT_VIEW,
    RUN_THROUGHPUT_VIEW_0010,
)

revision = "0020"
down_revision = "0019"


def upgrade() -> None:
    """Rebuild the run_throughput view without the samples/s of runs that did not finish."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute(RUN_THROUGHPUT_VIEW)


def downgrade() -> None:
    """Rebuild the run_throughput view as 0010 made it."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute(RUN_THROUGHPUT_VIEW_0010)
