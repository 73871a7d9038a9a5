"""A job instance: one run of a job, apart from what the job is like.

A `JobProfile` says what a job is like per iteration (its compute, communication, memory, devices).
An instance is one submission of it: when it arrives, how many iterations it runs, how fast it goes
alone where a trace says so, its limits (`max_slowdown`) and what restarting it costs. `xover plan`
makes one instance per profile, arriving at 0 and running the profile's own iterations; a trace makes
one per line, many of one profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .model import JobProfile


@dataclass(frozen=True)
class JobInstance:
    """One run of a job: its profile (`kind`, named after the model or recipe), its own name, arrival
    (s), length (iterations), devices, iteration alone (ms; None: the profile's c + m), limits, and
    the seconds a (re)start costs it (processes, rendezvous, a checkpoint restored)."""

    name: str
    kind: JobProfile
    iterations: int
    arrival_s: float = 0.0
    devices: int | None = None  # None: the profile's
    iteration_ms: float | None = None
    max_slowdown: float | None = None  # None: the profile's
    restart_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise ValueError(f"job {self.name!r}: iterations must be a whole number >= 1, got {self.iterations!r}")
        for label, value in (("arrival_s", self.arrival_s), ("restart_s", self.restart_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"job {self.name!r}: {label} must be a number >= 0, got {value!r}")
        if self.iteration_ms is not None and not (math.isfinite(self.iteration_ms) and self.iteration_ms > 0):
            raise ValueError(f"job {self.name!r}: iteration_ms must be a number > 0, got {self.iteration_ms!r}")

    @classmethod
    def of_profile(cls, job: JobProfile, arrival_s: float = 0.0) -> JobInstance:
        """The instance `xover plan` makes of a profile: the profile's own name, iterations and limits."""
        return cls(name=job.name, kind=job, iterations=job.iterations, arrival_s=arrival_s)

    @property
    def gpus(self) -> int:
        """The devices it runs on."""
        return self.devices if self.devices is not None else self.kind.devices

    @property
    def alone_ms(self) -> float:
        """Its iteration alone on its devices."""
        return self.iteration_ms if self.iteration_ms is not None else self.kind.solo_ms

    @property
    def work_s(self) -> float:
        """Its whole length alone: iterations x its iteration alone (s)."""
        return self.iterations * self.alone_ms / 1000

    def profile(self, iterations: int | None = None) -> JobProfile:
        """The planner's view of it, with `iterations` left to run (default: all of them)."""
        count = self.iterations if iterations is None else max(1, iterations)
        if (
            self.kind.name == self.name
            and self.kind.iterations == count
            and self.devices in (None, self.kind.devices)
            and self.max_slowdown in (None, self.kind.max_slowdown)
        ):
            return self.kind
        return replace(
            self.kind,
            name=self.name,
            iterations=count,
            devices=self.gpus,
            max_slowdown=self.max_slowdown if self.max_slowdown is not None else self.kind.max_slowdown,
        )
