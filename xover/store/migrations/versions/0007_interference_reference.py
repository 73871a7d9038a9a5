"""The link share (l / T) of the reference partner a profile's interference was measured next to: the
model scales part of the interference by the partners' link shares over it.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    """Add the partner's link share, filled in for profiles taken before from their partner's profile."""
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("corun_partner_link_share", sa.Float))
    # Profiles measured before: the partner's profile of the same session (same key, nearest row) holds
    # its link share, l / T with l = max(comm_ms, link_ms).
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT id, name, np, hosts, engine, bandwidth, hardware, corun_partner, interference, "
            "data_ms + compute_ms + comm_ms AS solo_ms, "
            "CASE WHEN link_ms > comm_ms THEN link_ms ELSE comm_ms END AS link_busy_ms "
            "FROM profiles"
        )
    ).all()
    by_key: dict[tuple, list] = {}
    for row in rows:
        if row.solo_ms > 0:
            by_key.setdefault((row.name, row.np, row.hosts, row.engine, row.bandwidth, row.hardware), []).append(row)
    for row in rows:
        if row.interference is None or row.corun_partner is None:
            continue
        partners = by_key.get((row.corun_partner, row.np, row.hosts, row.engine, row.bandwidth, row.hardware))
        if partners:
            partner = min(partners, key=lambda p: abs(p.id - row.id))
            connection.execute(
                sa.text("UPDATE profiles SET corun_partner_link_share = :share WHERE id = :id"),
                {"share": partner.link_busy_ms / partner.solo_ms, "id": row.id},
            )


def downgrade() -> None:
    """Drop the partner's link share."""
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("corun_partner_link_share")
