"""A profile's co-run stretch: its compute time next to a partner that computes the whole time, over
alone, without turns: time-sliced (corun_stretch) and under CUDA MPS (mps_stretch). None: not measured
(a CPU profile, unless --stretch). And gpu_busy: the GPU's utilisation (NVML) inside the job's compute
windows when it ran alone (None: not a GPU profile).

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("corun_stretch", sa.Float()))
        batch.add_column(sa.Column("mps_stretch", sa.Float()))
        batch.add_column(sa.Column("gpu_busy", sa.Float()))


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("gpu_busy")
        batch.drop_column("mps_stretch")
        batch.drop_column("corun_stretch")
