"""A profile's interference is its device time next to the reference partner over its device time
alone, less one: the simulation no longer charges the partner's communication CPU on top, so what
was stored as the part that CPU did not explain is derived again from the stored co-run.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"

MIN_INTERFERENCE = -0.5  # planner.model.MIN_INTERFERENCE when this was written


def upgrade() -> None:
    """Derive each profile's interference again from its stored co-run: device time next to the partner
    over alone, less one."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT id, corun_device_ms, data_ms + compute_ms AS device_ms FROM profiles "
            "WHERE corun_device_ms IS NOT NULL"
        )
    ).all()
    for row in rows:
        if row.device_ms and row.device_ms > 0:
            connection.execute(
                sa.text("UPDATE profiles SET interference = :value WHERE id = :id"),
                {"value": max(MIN_INTERFERENCE, row.corun_device_ms / row.device_ms - 1.0), "id": row.id},
            )


def downgrade() -> None:
    """The values before cannot be derived again without the simulation of then; they stay."""
