"""A run's job id at its launcher's scheduler: `runs.slurm_job_id` becomes `runs.launcher_job_id`, named
for no launcher in particular (a Slurm job's id, or another scheduler's).

Revision ID: 0015
"""

import sqlalchemy as sa
from alembic import op

from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    """Rename the column in place (SQLite 3.25+ and PostgreSQL alike: no table rebuilt, every row and key kept;
    the view over runs dropped and made again around it)."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("runs")}
    if "slurm_job_id" not in columns:  # a store made from today's models and stamped at an older revision
        return
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute("ALTER TABLE runs RENAME COLUMN slurm_job_id TO launcher_job_id")
    op.execute(RUN_THROUGHPUT_VIEW)


def downgrade() -> None:
    """Name it slurm_job_id again."""
    op.execute(DROP_RUN_THROUGHPUT_VIEW)
    op.execute("ALTER TABLE runs RENAME COLUMN launcher_job_id TO slurm_job_id")
    op.execute(RUN_THROUGHPUT_VIEW)
