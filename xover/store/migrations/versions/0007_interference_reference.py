"""The link share (l / T) of the reference partner a profile's interference was measured next to: the
model scales part of the interference by the partners' link shares over it.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("corun_partner_link_share", sa.Float))
    # Profiles measured before: the partner's profile of the same session (same key, nearest row) holds
    # its link share, l / T with l = max(comm_ms, link_ms).
    connection = op.get_bind()
    rows = connection.execute(sa.text(
        "SELECT id, name, np, hosts, engine, bandwidth, hardware, corun_partner, interference, "
        "data_ms + compute_ms + comm_ms, CASE WHEN link_ms > comm_ms THEN link_ms ELSE comm_ms END "
        "FROM profiles")).all()
    for row in rows:
        if row.interference is None or row.corun_partner is None:
            continue
        key = (row.corun_partner, row.np, row.hosts, row.engine, row.bandwidth, row.hardware)
        partners = [p for p in rows if (p.name, p.np, p.hosts, p.engine, p.bandwidth, p.hardware) == key and p[9] > 0]
        if partners:
            partner = min(partners, key=lambda p: abs(p.id - row.id))
            connection.execute(sa.text("UPDATE profiles SET corun_partner_link_share = :share WHERE id = :id"),
                               {"share": partner[10] / partner[9], "id": row.id})


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("corun_partner_link_share")
