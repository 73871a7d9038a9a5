"""Every query of the `sharing_measurements` table: a group's measured aggregate per way of sharing, written
after a comparison (run/learn.py) and read by `xover plan` (plan/step.py), which uses the newest one of each
way for the same jobs, link and hardware instead of its simulation (plan/measured.py says what a key holds)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import SharingMeasurement
from .session import Store


def add_measurement(session: Session, **fields: Any) -> None:
    """One way of sharing measured on one group (the columns of SharingMeasurement)."""
    session.add(SharingMeasurement(**fields))


def newest_measurements(store: Store, link: str, hardware: str) -> list[dict[str, Any]]:
    """The newest measurement of each (group key, way, policy) at this link on this hardware, as plain rows."""
    with store.session() as session:
        rows = session.scalars(
            select(SharingMeasurement)
            .where(SharingMeasurement.link == link, SharingMeasurement.hardware == hardware)
            .order_by(SharingMeasurement.id.desc())
        ).all()
        newest: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        for row in rows:
            newest.setdefault(
                (row.jobs_key, row.way, row.policy),
                {
                    "jobs_key": row.jobs_key,
                    "jobs": row.jobs,
                    "way": row.way,
                    "policy": row.policy,
                    "gain": row.gain,
                    "speeds": row.speeds,
                    "experiment": row.experiment_id,
                    "window_s": row.window_s,
                },
            )
        return list(newest.values())
