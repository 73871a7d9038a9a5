"""How fast each job of a group goes: the throughput models the decision step can predict with.

A model answers, for jobs that would share their devices, each job's speed relative to alone (0.8: 80%
of its iterations per second alone), the way they share (`sharing`), and the group's *period* for the
grouping's merge weights (time for one iteration of each job). Two models:

* `XoverModel` - xover's own: the fluid bound groups the jobs (as `xover plan` does), and the simulation
  of the runtime (`simulate.py`) predicts the group under the way of sharing `predict.pick_sharing` picks
  (crossover under a turn policy, concurrent, MPS, or adaptive where the model cannot tell turns from no
  turns); a group measured before is predicted by its measurements (`measured.py`).
* `InterleaveModel` - Muri's (SIGCOMM'22): jobs of a group take turns on each resource (data loading
  on the CPU, the GPU, the network) in a fixed rotation; the group's ideal period comes from the
  rotation of the best order, and is charged an *interleaving-efficiency factor* for the group's size
  (Muri's simulator: 1.33 for two jobs, 1.5 for three, 1.37 for four). Every job of the group does one
  iteration per period. The ideal period is the stage recurrence of Muri's public simulator (four
  stages per rotation, resources data -> GPU -> network, two rotations to settle), re-derived here.

Both are pure and memoised by what they read of a job (never its name or iterations; but in a plan that learns,
xover's groups jobs measured together by what they measured, found by each job's identity under its name: a
replay's jobs have none, so a replay may take a group's figures for any jobs of the same kinds).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..sharing import ALONE
from ..turns.policies import DEFAULT_POLICY
from .grouping import group_period_ms
from .measured import NONE, Measurements
from .model import JobProfile
from .predict import GroupPrediction, SharingPick, pick_sharing, predict_considered

# Muri's simulator charges a group of k jobs this many times its ideal interleaved period (index k - 1);
# a job alone runs 1.5% slower than its trace's iteration time (`simulator/jobs.py` of Rivendile/Muri).
MURI_FACTORS = (1.33, 1.5, 1.37)
MURI_ALONE_FACTOR = 1.015


@dataclass(frozen=True)
class Speeds:
    """What a model predicts for one group: each job's speed relative to alone (in the order given), the
    way the group shares its devices, and the period (ms) in which every job does one iteration."""

    speeds: tuple[float, ...]
    sharing: str
    period_ms: float

    @property
    def gain(self) -> float:
        """The sum of the speeds: 1.0 is no better than one job after another."""
        return sum(self.speeds)


class ThroughputModel(Protocol):
    """What the decision step asks of a model (`XoverModel`, `InterleaveModel`)."""

    @property
    def name(self) -> str:
        """Its name: xover or interleave."""
        ...

    def predict(self, jobs: Sequence[JobProfile]) -> Speeds:
        """Each job's speed in the group, the way it shares, its period."""
        ...

    def grouping_period_ms(self, jobs: Sequence[JobProfile]) -> float:
        """The period the grouping's merge weights use (inf: the jobs cannot share)."""
        ...

    def describe(self) -> str:
        """The model in a few words, for a report."""
        ...


@dataclass(frozen=True)
class XoverModel:
    """xover's own model: grouped by the fluid bound (or by what the jobs measured together), predicted by the
    simulation of the turn policy (or of sharing without turns, whichever `predict.pick_sharing` picks), or by
    what was measured on the same jobs before (`measured`)."""

    policy: str = DEFAULT_POLICY
    measured: Measurements = field(default=NONE, compare=False, hash=False)
    name: str = "xover"

    def pick(self, jobs: Sequence[JobProfile]) -> SharingPick:
        """The way of sharing `xover plan` picks for these jobs, why, and every way it considered."""
        predictions, sources = predict_considered(jobs, self.policy, measured=self.measured)
        return pick_sharing(predictions, jobs, sources)

    def group_prediction(self, jobs: Sequence[JobProfile]) -> GroupPrediction:
        """What `xover plan` predicts for these jobs under the way of sharing it picks for them."""
        return self.pick(jobs).prediction

    def predict(self, jobs: Sequence[JobProfile]) -> Speeds:
        """The way of sharing `xover plan` would pick for these jobs, and their speeds under it."""
        if len(jobs) == 1:
            return Speeds((1.0,), ALONE.name, jobs[0].solo_ms)
        picked = self.group_prediction(jobs)
        speeds = tuple(picked.speeds[job.name] for job in jobs)
        gain = sum(speeds)
        period = sum(job.solo_ms for job in jobs) / gain if gain > 0 else math.inf
        return Speeds(speeds, picked.sharing, period)

    def grouping_period_ms(self, jobs: Sequence[JobProfile]) -> float:
        """The period `xover plan` groups by: the fluid bound's, or, where these jobs were measured together
        before, that of the best way measured (`measured_period_ms`)."""
        measured = self.measured_period_ms(jobs)
        return measured if measured is not None else group_period_ms(jobs)

    def predicted_period_ms(self, jobs: Sequence[JobProfile]) -> float:
        """The period a plan that learns groups by: where these jobs were measured together, that of the best way
        measured; else that of the model's prediction, the figure the plan shows for the group. Set beside
        measured figures, a fluid bound always won: a group measured well lost its jobs to pairs predicted to gain
        less. One simulation per group looked at (`decide.form_groups` bounds how many)."""
        measured = self.measured_period_ms(jobs)
        if measured is not None or len(jobs) < 2:
            return measured if measured is not None else group_period_ms(jobs)
        gain = self.group_prediction(jobs).gain
        return sum(job.solo_ms for job in jobs) / gain if gain > 0 else math.inf

    def identity_of(self, job: JobProfile) -> object:
        """What the job's measurements are keyed by (None for a job without one)."""
        return self.measured.identities.get(job.name)

    def measured_period_ms(self, jobs: Sequence[JobProfile]) -> float | None:
        """The period of the best way these jobs were measured in together (None: never measured). A plan
        that learns groups by it: a pair the fluid bound says cannot pay off may have measured well (on a CPU
        the engines' thread policy is not in the bound), and one it says will may have measured losing."""
        if len(jobs) < 2:
            return None
        found = self.measured.for_group(jobs, self.policy)
        if not found:
            return None
        gain = max(way.gain for way, _ in found.values())
        return sum(job.solo_ms for job in jobs) / gain if gain > 0 else math.inf

    def describe(self) -> str:
        """The model in a few words, for a report."""
        return (
            f"xover's model (simulation of the {self.policy} turn policy, concurrent and MPS; fluid-bound grouping, "
            "or measured)"
        )


@dataclass(frozen=True)
class InterleaveModel:
    """Muri's model: the ideal interleaved period of the group's best rotation times its factor.

    `factors[k - 2]` is charged to a group of k jobs (k = 2..len(factors) + 1; larger groups cannot form).
    `alone_factor`: a job alone runs this much slower than its own iteration time (Muri's 1.015); a
    group's factor is over it, as in Muri's simulator. A job's resources per iteration are its data
    loading (`data_ms`), its compute (`compute_ms`) and its communication (`comm_ms`); its iteration
    alone is `alone_ms[name]` where a trace gives it apart from those (Muri's traces do), else c + m.
    """

    factors: tuple[float, ...] = MURI_FACTORS
    alone_factor: float = 1.0
    alone_ms: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)
    name: str = "interleave"

    def __post_init__(self) -> None:
        # charged over the ideal interleaved period, the shortest the jobs' resources allow: below 1 is faster
        if not self.factors or any(not (math.isfinite(f) and f >= 1) for f in self.factors):
            raise ValueError(f"interleaving factors must be numbers >= 1, got {self.factors!r}")

    @property
    def max_group(self) -> int:
        """The largest group a factor is given for."""
        return len(self.factors) + 1

    def iteration_ms(self, job: JobProfile) -> float:
        """The job's iteration alone, as its trace gives it."""
        return self.alone_ms.get(job.name, job.solo_ms)

    def group_iteration_ms(self, jobs: Sequence[JobProfile]) -> float:
        """Every job's iteration in the group: the ideal period times the factor for its size, over
        the factor of a job alone (inf for a group larger than the factors cover)."""
        if len(jobs) == 1:
            return self.iteration_ms(jobs[0]) * self.alone_factor
        if len(jobs) > self.max_group:
            return math.inf
        ideal = ideal_interleaved_ms(tuple(sorted(_resources(job) for job in jobs)))
        return ideal * self.factors[len(jobs) - 2] / self.alone_factor

    def predict(self, jobs: Sequence[JobProfile]) -> Speeds:
        """Each job does one iteration per group iteration; its speed is its own alone over that."""
        if len(jobs) == 1:
            return Speeds((1.0,), ALONE.name, self.iteration_ms(jobs[0]))
        period = self.group_iteration_ms(jobs)
        speeds = tuple(self.iteration_ms(job) * self.alone_factor / period for job in jobs)
        return Speeds(speeds, "interleaved", period)

    def grouping_period_ms(self, jobs: Sequence[JobProfile]) -> float:
        """The group's iteration with its factor (a single job's: its iteration alone)."""
        if len(jobs) == 1:
            return self.iteration_ms(jobs[0])
        return self.group_iteration_ms(jobs) / self.alone_factor

    def describe(self) -> str:
        """The model in a few words, for a report."""
        shown = ", ".join(f"{f:g} for {k}" for k, f in enumerate(self.factors, start=2))
        return f"Muri's interleaving with efficiency factors {shown}" + (
            f", a job alone at 1/{self.alone_factor:g}" if self.alone_factor != 1.0 else ""
        )


def _resources(job: JobProfile) -> tuple[float, float, float]:
    return (job.data_ms, job.compute_ms, job.comm_ms)


STAGES = 4  # one rotation: data, GPU and network of consecutive jobs side by side
ROTATIONS = 2


@functools.lru_cache(maxsize=65536)
def ideal_interleaved_ms(resources: tuple[tuple[float, float, float], ...]) -> float:
    """The ideal period of 2-4 jobs interleaved on data loading, GPU and network, best order.

    Jobs sit in the slots of a rotation of four stages. Stage i ends once the job in slot (i+1) mod 4
    has communicated and the job in slot (i+2) mod 4 has computed, both from the stage's start, and the
    job in slot (i+3) mod 4 has loaded its data, from the previous stage's start (data loading may
    span two stages). The period is the time of four consecutive stages once two rotations agree
    (within 0.1%), else that of the second rotation. For two jobs, the plain alternation (one's data
    next to the other's compute and communication) is taken when it is shorter. These are the
    arithmetic of Muri's public simulator (`simulator/matching.py`), re-derived."""
    best = math.inf
    for order in itertools.permutations(resources):
        best = min(best, _rotation_ms(order))
    if len(resources) == 2:
        (a_data, a_gpu, a_net), (b_data, b_gpu, b_net) = resources
        best = min(best, max(a_data, b_gpu + b_net) + max(b_data, a_gpu + a_net))
    return best


def _rotation_ms(order: Sequence[tuple[float, float, float]]) -> float:
    jobs = len(order)
    ends = [0.0] * (STAGES * ROTATIONS + 1)
    for stage in range(STAGES * ROTATIONS):
        end = ends[stage + 1]
        if (stage + 1) % STAGES < jobs:
            end = max(end, ends[stage] + order[(stage + 1) % STAGES][2])
        if (stage + 2) % STAGES < jobs:
            end = max(end, ends[stage] + order[(stage + 2) % STAGES][1])
        if stage > 0 and (stage + 3) % STAGES < jobs:
            end = max(end, ends[stage - 1] + order[(stage + 3) % STAGES][0])
        ends[stage + 1] = end
        if stage >= STAGES and math.isclose(end - ends[stage - 3], ends[stage] - ends[stage - 4], rel_tol=1e-3):
            period = end - ends[stage - 3]
            if period > 0:
                return period
    return ends[STAGES * ROTATIONS] - ends[STAGES * (ROTATIONS - 1)]
