"""Plans that learn from what ran: a group's measured aggregate in each way of sharing, used in place of its
simulation the next time the same jobs are planned (Gavel keeps measured throughputs of co-located pairs so).

A measurement holds for a group of jobs as they were measured, and for nothing else. Its key is what
decides how they share the devices:

    each job's workload  its recipe's content without its length (a changed script, model, batch, dataset,
                         optimizer or max_slowdown is another job: `Recipe.job_hash` over every field but
                         iterations, epochs, name and description; a script counts by its
                         content and that of the modules of its own it imports, scripts.content_hash)
    each job's ranks, engine and the hosts it spans
    the link             the rate its all-reduces crossed (another link: not used)
    the hardware         the machine's fingerprint (other hardware: not used)
    the tuning           the settings that change how jobs share devices, those unlike their defaults
                         (`Settings.tuning`: XOVER_COMM_THREADS=normal, XOVER_LINK_BANDS=off, ...; a
                         comparison with a switch turned off is not a figure for a plan under the defaults)

The jobs of a group are sorted by their identity, so the same jobs in another order, or under other names in a
plan or a run (a copy's `name#2`), have the same key; two copies of one job share it. Nor is a recipe's or job
file's own `name` part of its workload (nor of its profile's key): a renamed job file is the same job. Rows
stored before 2026-12-02 keyed each workload with the job's name (`Recipe.legacy_workload`): they are still
read for the jobs under the names they had, and a row of today's keys of the same group and way is preferred.
A way's measurement is the mean of the newest few stored
(store/measured.py: one 15 s comparison's figure moves by a few percent from the next); crossover's is under
the turn policy the plan assumes. Everything here is pure: the plan step reads the store's rows
(store/measured.py) and hands them in as a `Measurements`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import JobProfile


@dataclass(frozen=True, order=True)
class JobIdentity:
    """What makes one job's measurements hold: its workload (recipe content without length), ranks, engine,
    and the hosts its ranks span."""

    workload: str
    np: int
    engine: str
    hosts: int = 1

    def to_json(self) -> dict[str, object]:
        """As stored beside a measurement."""
        return {"workload": self.workload, "np": self.np, "engine": self.engine, "hosts": self.hosts}


def jobs_key(identities: Sequence[JobIdentity]) -> str:
    """A group's key: its jobs' identities, sorted (any order, any names: one key)."""
    text = json.dumps([identity.to_json() for identity in sorted(identities)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def in_key_order(names: Sequence[str], identities: Mapping[str, JobIdentity]) -> list[str]:
    """The job names in the order of their sorted identities (how a measurement's speeds are listed)."""
    return sorted(names, key=lambda name: (identities[name], name))


@dataclass(frozen=True)
class MeasuredWay:
    """One way of sharing measured on a group: its aggregate over sequential, each job's speed relative to
    alone (in key order; the mean of the newest few measurements), and the newest experiment that measured it."""

    gain: float
    speeds: tuple[float, ...]
    experiment: str
    policy: str | None = None  # crossover's turn policy
    runs: int = 1  # how many comparisons the mean is of (store/measured.py: the newest few)


@dataclass(frozen=True)
class Measurements:
    """The stored measurements that may hold for a plan: by group key and way (crossover per policy, as
    `crossover:<policy>`), and each job's identity by its name in the plan."""

    ways: dict[str, dict[str, MeasuredWay]] = field(default_factory=dict)
    identities: dict[str, JobIdentity] = field(default_factory=dict)

    @classmethod
    def of_rows(
        cls,
        rows: Sequence[Mapping[str, Any]],
        identities: Mapping[str, JobIdentity],
        legacy: Mapping[str, JobIdentity] | None = None,
    ) -> Measurements:
        """The stored rows (store/measured.py's recent mean of each way) that hold for groups of these jobs
        (`identities`: each job's identity by its name here): a row whose every member is one of them. With
        `legacy` (each job's identity as rows were keyed before 2026-12-02, its name in its workload), a row of
        those too, taken as today's keys of the same jobs where no row of today's keys measured that way."""
        known = set(identities.values())
        renamed = {old: identities[name] for name, old in (legacy or {}).items() if name in identities}
        ways: dict[str, dict[str, MeasuredWay]] = {}
        older: dict[str, dict[str, MeasuredWay]] = {}
        for row in rows:
            members = [JobIdentity(job["workload"], job["np"], job["engine"], job["hosts"]) for job in row["jobs"]]
            way = f"{row['way']}:{row['policy']}" if row["policy"] else row["way"]
            speeds = tuple(row["speeds"])
            if all(member in known for member in members):
                key, found = row["jobs_key"], ways
            elif renamed and len(speeds) == len(members) and all(member in renamed for member in members):
                # its speeds are in the order of the old identities: put them in that of today's
                names = [job.get("name", "") for job in row["jobs"]]
                order = sorted(range(len(members)), key=lambda slot: (renamed[members[slot]], names[slot]))
                key, found = jobs_key([renamed[members[slot]] for slot in order]), older
                speeds = tuple(speeds[slot] for slot in order)
            else:
                continue
            found.setdefault(key, {})[way] = MeasuredWay(
                row["gain"], speeds, row["experiment"], row["policy"], row.get("measurements", 1)
            )
        for key, measured in older.items():
            ways[key] = {**measured, **ways.get(key, {})}
        return cls(ways, dict(identities))

    def for_group(self, jobs: Sequence[JobProfile], policy: str) -> dict[str, tuple[MeasuredWay, dict[str, float]]]:
        """The ways measured on exactly these jobs (under `policy` for crossover): way -> (its measurement,
        each job's speed by its name here). Empty where a job has no identity (a plan from a trace)."""
        if not self.ways or len(jobs) < 2 or any(job.name not in self.identities for job in jobs):
            return {}
        names = in_key_order([job.name for job in jobs], self.identities)
        found = self.ways.get(jobs_key([self.identities[name] for name in names]), {})
        chosen = {}
        for way, measured in found.items():
            name, _, under = way.partition(":")
            if under and under != policy:
                continue
            if len(measured.speeds) == len(names):
                chosen[name] = (measured, dict(zip(names, measured.speeds)))
        return chosen


NONE = Measurements()
