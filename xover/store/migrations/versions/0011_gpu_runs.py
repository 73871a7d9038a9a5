"""How a run used its GPU: the torch.distributed backend, deterministic kernels, how many devices one
GPU counted as, and how the GPU was shared between processes (time-slicing or CUDA MPS).

Revision ID: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    """Add the runs' GPU columns: backend, deterministic, devices_per_gpu, gpu_sharing."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("backend", sa.String(20)))
        batch.add_column(sa.Column("deterministic", sa.Boolean()))
        batch.add_column(sa.Column("devices_per_gpu", sa.Integer()))
        batch.add_column(sa.Column("gpu_sharing", sa.String(20)))


def downgrade() -> None:
    """Drop the runs' GPU columns."""
    with op.batch_alter_table("runs") as batch:
        for column in ("gpu_sharing", "devices_per_gpu", "deterministic", "backend"):
            batch.drop_column(column)
