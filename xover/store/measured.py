"""Every query of the `sharing_measurements` table: a group's measured aggregate per way of sharing, written
after a comparison (run/learn.py) and read by `xover plan` (plan/step.py), which uses the mean of the newest
few of each way for the same jobs, link, hardware and tuning instead of its simulation (plan/measured.py says
what a key holds)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..devices import hardware_fingerprint
from ..results import faster_than_alone
from ..settings import settings
from .models import SharingMeasurement
from .session import Store


def add_measurement(session: Session, **fields: Any) -> None:
    """One way of sharing measured on one group (the columns of SharingMeasurement)."""
    session.add(SharingMeasurement(**fields))


RECENT_MEASUREMENTS = 3  # a way's figure is the mean of its newest few: one comparison's moves by a few percent


def taken_here() -> tuple[str, str]:
    """What a measurement written or read by this process holds for besides its jobs and link: this hardware's
    fingerprint and the settings that change sharing (Settings.tuning: '' for the defaults). One place for the
    comparison that keeps them (run/learn.py) and the plans that read them."""
    return hardware_fingerprint(), settings().tuning()


def recent_measurements(store: Store, link: str, count: int = RECENT_MEASUREMENTS) -> list[dict[str, Any]]:
    """Each (group key, way, policy) at this link, taken here (`taken_here`; rows from before the tuning was
    kept are taken as measured under the defaults): the mean of its newest `count`
    measurements, weighted by how long the jobs ran together in each (equally where one does not say), as
    plain rows; `experiment` is the newest's, `measurements` how many the mean is of. A row with a job faster
    than alone (kept before 2026-12-07, when such comparisons were still learnt) is passed over: its run alone
    was slowed, and its figures read high."""
    hardware, tuning = taken_here()
    with store.session() as session:
        rows = session.scalars(
            select(SharingMeasurement)
            .where(
                SharingMeasurement.link == link,
                SharingMeasurement.hardware == hardware,
                func.coalesce(SharingMeasurement.tuning, "") == tuning,
            )
            .order_by(SharingMeasurement.id.desc())
        ).all()
        recent: dict[tuple[str, str, str | None], list[SharingMeasurement]] = {}
        for row in rows:
            if any(faster_than_alone(speed) for speed in row.speeds or []):
                continue
            found = recent.setdefault((row.jobs_key, row.way, row.policy), [])
            if len(found) < count and (not found or len(row.speeds) == len(found[0].speeds)):
                found.append(row)
        return [_mean_of(found) for found in recent.values()]


def _mean_of(rows: list[SharingMeasurement]) -> dict[str, Any]:
    newest = rows[0]
    weights: list[float] = [row.window_s or 1.0 for row in rows]
    if not all(row.window_s for row in rows):  # one that does not say: all count alike
        weights = [1.0] * len(rows)
    total = sum(weights)

    def mean(values: list[float]) -> float:
        return sum(weight * value for weight, value in zip(weights, values)) / total

    return {
        "jobs_key": newest.jobs_key,
        "jobs": newest.jobs,
        "way": newest.way,
        "policy": newest.policy,
        "gain": mean([row.gain for row in rows]),
        "speeds": [mean([row.speeds[slot] for row in rows]) for slot in range(len(newest.speeds))],
        "experiment": newest.experiment_id,
        "window_s": sum(row.window_s or 0.0 for row in rows) or None,
        "measurements": len(rows),
    }
