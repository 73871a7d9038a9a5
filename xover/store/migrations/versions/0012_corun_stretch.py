"""A profile's co-run stretch: its compute time next to a partner that computes the whole time, over
alone, without turns: time-sliced (corun_stretch) and under CUDA MPS (mps_stretch). None: not measured
(a CPU profile, unless --stretch). (gpu_busy was added here too, after this migration had upgraded
stores: it is 0013's now.)

And a shaped link's meaning: `--bandwidth R` on one machine now shapes the loopback to R per device (one
node's NIC each way); before, the loopback was R for all of them. A profile taken so on one machine is
kept under the link it really had, "R (shared lo)", so that it is never reused as if taken at R
per node (profile again with --force).

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    """Add the profiles' stretches; mark the profiles taken on one machine's shaped loopback
    "R (shared lo)"."""
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("corun_stretch", sa.Float()))
        batch.add_column(sa.Column("mps_stretch", sa.Float()))
    op.execute(
        "UPDATE profiles SET bandwidth = bandwidth || ' (shared lo)' "
        "WHERE bandwidth <> 'host' AND COALESCE(hosts, 1) <= 1 AND bandwidth NOT LIKE '% (shared lo)'"
    )


def downgrade() -> None:
    """Take the "(shared lo)" mark off every profile's link, and drop the stretches."""
    op.execute("UPDATE profiles SET bandwidth = REPLACE(bandwidth, ' (shared lo)', '')")
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("mps_stretch")
        batch.drop_column("corun_stretch")
