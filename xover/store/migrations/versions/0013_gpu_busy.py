"""A profile's gpu_busy: the GPU's utilisation (NVML) inside the job's compute windows when it ran alone
(None: not a GPU profile).

It was first added by editing 0012 after 0012 had upgraded stores (commit 95a065d): a store upgraded
by the first 0012 has no such column, and every profile query failed on it. So it is added here, where
it is missing. (Stores upgraded by 0012 before commit 5d185c3 also lack 0012's "(shared lo)" marks on
the profiles of the old shared loopback; which of their profiles are that old cannot be told now:
profile again with --force where a plan's link times look wrong.)

Revision ID: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    """Add the profiles' gpu_busy, unless the edited 0012 added it already."""
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("profiles")}
    if "gpu_busy" not in columns:
        with op.batch_alter_table("profiles") as batch:
            batch.add_column(sa.Column("gpu_busy", sa.Float()))


def downgrade() -> None:
    """Drop the profiles' gpu_busy."""
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("gpu_busy")
