"""The replay: a trace's jobs arrive, wait, run (alone or grouped), are preempted and finish, event by
event, with the planning core deciding at every event.

Time is in seconds. A job's *work* is what it has left to run, in seconds alone (iterations x its
iteration alone); running at speed s (relative to alone; `alone_factor` slows every job alone, Muri's
1.015) it works off s / alone_factor seconds of work a second. Events: arrivals, completions, and a
Tiresias job reaching the next queue's limit. At each event the policy decides, in one of two ways
(`ReplayRules.reschedule`):

* `repack` - everything runnable is decided afresh by the decision step (`plan/decide.py`): every
  running job may be stopped, moved or grouped anew. Muri's and Tiresias' simulators work so; it costs
  time in the number of runnable jobs at every event.
* `keep` - running jobs keep their devices. Free devices go to waiting jobs in the policy's order; a
  waiting job that goes first takes a running one's devices (preemptive policies); under xover's
  grouping, waiting jobs join running ones where the model predicts a gain, and a group whose jobs
  change is dissolved when it no longer does. It costs time in the jobs that change at each event.

What a (re)start costs (`ReplayRules.restart`):
* `on-start` - a job that starts, resumes after a preemption, or moves makes no progress for its
  `restart_s` (the processes, the rendezvous, the checkpoint restored);
* `every-event` - Muri's simulator: every running job loses its restart time (or all the time since the
  last event, if less) at every event other than its own completion, as if each decision restarted it.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..plan.decide import Queued, StepRules, decide, dissolve_losing
from ..plan.grouping import GroupingRules
from ..plan.instances import JobInstance
from ..plan.model import JobProfile
from ..plan.state import Devices, FreeDevices, Host
from ..plan.throughput import Speeds, ThroughputModel
from ..sharing import ALONE
from .policies import TIRESIAS_LIMITS, Policy

RESCHEDULES = ("keep", "repack")
RESTARTS = ("on-start", "every-event")
# Events this close (s) are one (times are sums of floats); absolute, not relative to the clock, so that a trace
# shifted in time (Unix timestamps: 1.5e9 s) does not merge events a second apart. A batch acts at its latest
# event's time, so no event acts before its own.
EVENT_TOLERANCE_S = 1e-6
JOIN_CANDIDATES = 32  # keep: the jobs next in line of each device count that may join running ones at a decision
_COMPLETION, _ARRIVAL, _QUEUE_LIMIT = 0, 1, 2


@dataclass(frozen=True)
class ReplayRules:
    """How the replay runs (see the module's docstring), and the grouping's rules for a policy that groups."""

    placement: str = "best-fit"
    reschedule: str = "keep"
    restart: str = "on-start"
    alone_factor: float = 1.0
    max_group: int = 2
    min_gain_margin: float = 0.05
    algo: str = "matching"
    tiresias_limits: tuple[float, ...] = TIRESIAS_LIMITS

    def __post_init__(self) -> None:
        if self.reschedule not in RESCHEDULES:
            raise ValueError(f"reschedule {self.reschedule!r}: choose {', '.join(RESCHEDULES)}")
        if self.restart not in RESTARTS:
            raise ValueError(f"restart {self.restart!r}: choose {', '.join(RESTARTS)}")


@dataclass
class JobOutcome:
    """One job as the replay ran it (times in s from the trace's start)."""

    name: str
    kind: str
    gpus: int
    arrival_s: float
    work_s: float
    start_s: float = math.nan  # first start
    end_s: float = math.nan
    preemptions: int = 0
    grouped_s: float = 0.0  # time it ran in a group

    @property
    def jct_s(self) -> float:
        """Arrival to completion."""
        return self.end_s - self.arrival_s

    @property
    def queued_s(self) -> float:
        """Arrival to first start."""
        return self.start_s - self.arrival_s


@dataclass
class Timeline:
    """The cluster over time, one point per event that changed it (piecewise constant from each time):
    devices busy, devices of groups, jobs waiting, jobs running."""

    time_s: array[float] = field(default_factory=lambda: array("d"))
    busy: array[float] = field(default_factory=lambda: array("d"))
    grouped: array[float] = field(default_factory=lambda: array("d"))
    waiting: array[float] = field(default_factory=lambda: array("d"))
    running: array[float] = field(default_factory=lambda: array("d"))

    def add(self, time_s: float, busy: int, grouped: int, waiting: int, running: int) -> None:
        """A point, unless nothing changed since the last."""
        if self.time_s and (self.busy[-1], self.grouped[-1], self.waiting[-1], self.running[-1]) == (
            busy,
            grouped,
            waiting,
            running,
        ):
            return
        if self.time_s and self.time_s[-1] == time_s:
            self.busy[-1], self.grouped[-1], self.waiting[-1], self.running[-1] = busy, grouped, waiting, running
            return
        self.time_s.append(time_s)
        self.busy.append(busy)
        self.grouped.append(grouped)
        self.waiting.append(waiting)
        self.running.append(running)


@dataclass
class ReplayOutcome:
    """A policy's replay: every job, the timeline, device-seconds by way of sharing, events, decisions."""

    policy: str
    devices: int
    jobs: list[JobOutcome]
    timeline: Timeline
    device_s_by_sharing: dict[str, float]
    events: int
    unfinished: list[str] = field(default_factory=list)


class _Job:
    """A job's state in the replay."""

    __slots__ = (
        "index",
        "instance",
        "gpus",
        "work",
        "rate",
        "since",
        "dead_until",
        "version",
        "unit",
        "attained",
        "level",
        "entry",
        "outcome",
        "waiting",
        "waiting_key",
        "grouped_since",
        "kind",
    )

    def __init__(self, index: int, instance: JobInstance) -> None:
        self.index = index
        self.instance = instance
        self.gpus = instance.gpus
        self.work = instance.work_s
        self.rate = 0.0
        self.since = 0.0  # when its work was last accounted
        self.dead_until = 0.0  # restarting until then (on-start restart)
        self.version = 0  # its completion event's
        self.unit: _Unit | None = None
        self.attained = 0.0  # seconds it has run (Tiresias' service, with its devices)
        self.level = 0
        self.entry = 0
        self.outcome = JobOutcome(instance.name, instance.kind.name, self.gpus, instance.arrival_s, instance.work_s)
        self.waiting = False
        self.waiting_key = 0.0
        self.grouped_since = math.nan
        self.kind = 0  # what the model reads of it, as a number: jobs of one kind group alike (Replay sets it)

    def iterations_left(self) -> int:
        """Its iterations to go (at least 1), as the planner counts them."""
        return max(1, math.ceil(self.work * 1000 / self.instance.alone_ms - 1e-9))

    def profile(self) -> JobProfile:
        """The planner's view of it, with the iterations it has left."""
        return self.instance.profile(self.iterations_left())


class _Unit:
    """Jobs running on the same devices."""

    __slots__ = ("jobs", "devices", "sharing", "slot")

    def __init__(self, jobs: list[_Job], devices: Devices, sharing: str) -> None:
        self.jobs = jobs
        self.devices = devices
        self.sharing = sharing
        self.slot = -1

    @property
    def gpus(self) -> int:
        """Its devices."""
        return self.jobs[0].gpus


class _RunningKeys:
    """The running units' keys as arrays, so that the worst (highest) key now is one vectorised step."""

    def __init__(self) -> None:
        self.key0 = np.full(64, -np.inf)
        self.slope = np.zeros(64)
        self.t0 = np.zeros(64)
        self.host = np.full(64, -1, dtype=np.int64)  # the one host its devices are on (-1: several)
        self.gpus = np.zeros(64, dtype=np.int64)
        self.units: list[_Unit | None] = [None] * 64
        self.free_slots = list(range(63, -1, -1))

    def set(self, unit: _Unit, key0: float, slope: float, t0: float) -> None:
        """Put (or update) a unit's key: key0 at t0, falling by slope a second."""
        if unit.slot < 0:
            if not self.free_slots:
                self._grow()
            unit.slot = self.free_slots.pop()
            self.units[unit.slot] = unit
            self.host[unit.slot] = unit.devices[0][0] if len(unit.devices) == 1 else -1
            self.gpus[unit.slot] = unit.gpus
        self.key0[unit.slot], self.slope[unit.slot], self.t0[unit.slot] = key0, slope, t0

    def remove(self, unit: _Unit) -> None:
        """A unit that stopped."""
        if unit.slot >= 0:
            self.key0[unit.slot] = -np.inf
            self.slope[unit.slot] = 0.0
            self.units[unit.slot] = None
            self.free_slots.append(unit.slot)
            unit.slot = -1

    def _grow(self) -> None:
        size = len(self.key0)
        self.key0 = np.concatenate([self.key0, np.full(size, -np.inf)])
        self.slope = np.concatenate([self.slope, np.zeros(size)])
        self.t0 = np.concatenate([self.t0, np.zeros(size)])
        self.host = np.concatenate([self.host, np.full(size, -1, dtype=np.int64)])
        self.gpus = np.concatenate([self.gpus, np.zeros(size, dtype=np.int64)])
        self.units.extend([None] * size)
        self.free_slots.extend(range(2 * size - 1, size - 1, -1))

    def keys(self, now: float) -> np.ndarray:
        """Every slot's key now (-inf where none runs)."""
        return self.key0 - self.slope * (now - self.t0)

    def worst(self, now: float) -> float:
        """The highest key now (-inf when nothing runs)."""
        return float(self.keys(now).max())

    def above(self, now: float, threshold: float) -> np.ndarray:
        """The slots of the running units whose key now is above `threshold`, highest key first."""
        keys = self.keys(now)
        slots = np.nonzero(keys > threshold)[0]
        return slots[np.argsort(-keys[slots], kind="stable")]


class Replay:
    """One policy over one trace on one cluster (`run`)."""

    def __init__(
        self,
        instances: Sequence[JobInstance],
        hosts: Sequence[Host],
        policy: Policy,
        model: ThroughputModel,
        rules: ReplayRules = ReplayRules(),
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.policy, self.model, self.rules = policy, model, rules
        self.progress = progress
        order = sorted(range(len(instances)), key=lambda index: (instances[index].arrival_s, index))
        self.jobs = [_Job(position, instances[index]) for position, index in enumerate(order)]
        kinds: dict[tuple[Any, ...], int] = {}
        for job in self.jobs:
            instance = job.instance
            job.kind = kinds.setdefault((instance.kind, instance.alone_ms, job.gpus, instance.max_slowdown), len(kinds))
        self.free = FreeDevices(hosts)
        self.devices = self.free.total
        names: dict[str, int] = {}
        for job in self.jobs:
            # the planning core tells jobs apart by name: two of one name would be mixed up (or loop for ever)
            if names.setdefault(job.instance.name, job.index) != job.index:
                raise ValueError(f"two jobs are named {job.instance.name!r}: give every job a name of its own")
            if job.gpus > self.devices:
                raise ValueError(f"job {job.instance.name!r} needs {job.gpus} devices; the cluster has {self.devices}")
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, job index, version)
        self.units: dict[_Unit, None] = {}  # running, in the order they started
        self.waiting: dict[int, _Job] = {}  # job index -> job, in the order they came to wait
        self.heaps: dict[int, list[tuple[float, int]]] = {}  # keep: devices -> heap of (key, job index)
        self.keys = _RunningKeys()
        self.level_due: list[_Job] = []
        self.changed_groups: dict[_Unit, None] = {}
        self.now = 0.0
        self.entries = 0
        self.finished = 0
        self.event_count = 0
        self.running_jobs = 0
        self.timeline = Timeline()
        self.by_sharing: dict[str, float] = {}
        self.busy = self.grouped = 0
        self.busy_by_sharing: dict[str, int] = {}
        self.join_savings: dict[tuple[tuple[int, ...], int], float] = {}
        # a group's speeds and whether it gains, by its jobs' kinds in order: a model reads no name or
        # iterations (`plan/throughput.py`), and a long replay asks both of the same few groups at every join
        self.group_speeds: dict[tuple[int, ...], Speeds] = {}
        self.group_gains: dict[tuple[int, ...], bool] = {}
        grouping = GroupingRules(max_group=rules.max_group, min_gain_margin=rules.min_gain_margin)
        self.step_rules = StepRules(
            model=model,
            grouping=grouping if policy.groups else None,
            algo=rules.algo,
            placement=rules.placement,
            backfill=policy.backfill,
        )

    # ---------------------------------------------------------------- the loop
    def run(self) -> ReplayOutcome:
        """Replay every job to its end."""
        for job in self.jobs:
            heapq.heappush(self.events, (job.instance.arrival_s, _ARRIVAL, job.index, 0))
        while self.events:
            batch = []
            horizon = self.events[0][0] + EVENT_TOLERANCE_S
            while self.events and self.events[0][0] <= horizon:
                batch.append(heapq.heappop(self.events))
            self._advance(batch[-1][0])
            if not self._handle(batch):
                continue
            self.event_count += 1
            if self.rules.reschedule == "repack":
                self._repack()
            else:
                self._keep()
            self.timeline.add(self.now, self.busy, self.grouped, len(self.waiting), self.running_jobs)
            if self.progress is not None and self.event_count % 256 == 0:
                self.progress(self.finished)
        if self.progress is not None:
            self.progress(self.finished)
        unfinished = [job.instance.name for job in self.jobs if math.isnan(job.outcome.end_s)]
        return ReplayOutcome(
            self.policy.name,
            self.devices,
            [job.outcome for job in self.jobs],
            self.timeline,
            dict(self.by_sharing),
            self.event_count,
            unfinished,
        )

    def _advance(self, now: float) -> None:
        """Move the clock, counting the device-seconds of what ran since the last event."""
        span = now - self.now
        if span > 0:
            for sharing, devices in self.busy_by_sharing.items():
                if devices:
                    self.by_sharing[sharing] = self.by_sharing.get(sharing, 0.0) + devices * span
            self.now = now

    def _handle(self, batch: list[tuple[float, int, int, int]]) -> bool:
        """Apply a batch of events; False when every one was stale (nothing happened)."""
        happened = False
        for _, kind, index, version in batch:
            job = self.jobs[index]
            if kind == _COMPLETION:
                if version != job.version or job.unit is None:
                    continue
                self._complete(job)
            elif kind == _ARRIVAL:
                self.entries += 1
                job.entry = self.entries
                self._enqueue(job)
            elif version == job.version and job.unit is not None:
                self.level_due.append(job)  # Tiresias: it reached its queue's limit
            else:
                continue
            happened = True
        return happened

    # ---------------------------------------------------------------- jobs' progress
    def _account(self, job: _Job) -> None:
        """Bring a running job's work and service up to now (no restart charged: see `_charge_every_event`)."""
        span = self.now - job.since
        if span <= 0:
            return
        if self.rules.restart == "on-start":
            working = max(0.0, self.now - max(job.since, job.dead_until))
        else:
            working = span
        job.work = max(0.0, job.work - working * job.rate)
        job.attained += span
        job.since = self.now

    def _charge_every_event(self) -> None:
        """Muri's restart: every job still running loses its restart time (or the time since the last
        event, if less) of progress; its completion moves that much later."""
        for unit in self.units:
            for job in unit.jobs:
                span = self.now - job.since
                working = max(0.0, span - job.instance.restart_s)
                job.work = max(0.0, job.work - working * job.rate)
                job.attained += span
                job.since = self.now
                self._schedule_completion(job)

    def _update_level(self, job: _Job) -> bool:
        """Tiresias: a job whose service reached its queue's limit moves one queue down (to its end)."""
        if self.policy.order != "attained-service":
            return False
        limits = self.rules.tiresias_limits
        if job.level < len(limits) and job.attained * job.gpus >= limits[job.level] - 1e-6:
            job.level += 1
            self.entries += 1
            job.entry = self.entries
            return True
        return False

    def _schedule_completion(self, job: _Job) -> None:
        job.version += 1
        if job.rate <= 0:
            return
        start = max(self.now, job.dead_until) if self.rules.restart == "on-start" else self.now
        heapq.heappush(self.events, (start + job.work / job.rate, _COMPLETION, job.index, job.version))
        if self.policy.order == "attained-service" and job.level < len(self.rules.tiresias_limits):
            limit = self.rules.tiresias_limits[job.level]
            at = self.now + max(0.0, math.ceil(limit / job.gpus) - job.attained)
            heapq.heappush(self.events, (at, _QUEUE_LIMIT, job.index, job.version))

    def _key(self, job: _Job) -> float:
        remaining = job.work * self.rules.alone_factor
        return self.policy.key_of(remaining, job.gpus, job.level, job.entry, job.index)

    # ---------------------------------------------------------------- waiting
    def _enqueue(self, job: _Job) -> None:
        self.waiting[job.index] = job
        job.waiting = True
        if self.rules.reschedule == "keep":
            job.waiting_key = self._key(job)
            heapq.heappush(self.heaps.setdefault(job.gpus, []), (job.waiting_key, job.index))

    def _dequeue(self, job: _Job) -> None:
        del self.waiting[job.index]
        job.waiting = False  # its heap entry is dropped when it comes to the top

    def _head(self, gpus: int) -> tuple[float, int] | None:
        """The first job waiting for `gpus` devices, as (key, job index)."""
        heap = self.heaps.get(gpus)
        while heap:
            key, index = heap[0]
            job = self.jobs[index]
            if job.waiting and job.waiting_key == key:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _first_waiting(self, gpus: int, count: int) -> list[_Job]:
        """The first `count` jobs waiting for `gpus` devices, in order."""
        heap = self.heaps.get(gpus, [])
        found: list[tuple[float, int]] = []
        while heap and len(found) < count:
            entry = heapq.heappop(heap)
            job = self.jobs[entry[1]]
            if job.waiting and job.waiting_key == entry[0] and entry not in found:
                found.append(entry)
        for entry in found:
            heapq.heappush(heap, entry)
        return [self.jobs[index] for _, index in found]

    def _best_waiting(self, fitting: bool, besides: set[int] = frozenset()) -> tuple[float, int] | None:  # type: ignore[assignment]
        """The first waiting job in the policy's order (among those whose devices are free now, if
        `fitting`; not of the device counts `besides`), as (key, job index)."""
        best: tuple[float, int] | None = None
        for gpus in self.heaps:
            if gpus in besides:
                continue
            head = self._head(gpus)
            if head is None or (fitting and not self.free.fits(gpus, self.rules.placement)):
                continue
            if best is None or head < best:
                best = head
        return best

    # ---------------------------------------------------------------- starting and stopping
    def _start(self, jobs: list[_Job], devices: Devices, sharing: str, speeds: Sequence[float]) -> _Unit:
        unit = _Unit(jobs, devices, sharing if len(jobs) > 1 else ALONE.name)
        self.units[unit] = None
        self.running_jobs += len(jobs)
        for job, speed in zip(jobs, speeds):
            if job.waiting:
                self._dequeue(job)
            if math.isnan(job.outcome.start_s):
                job.outcome.start_s = self.now
            job.unit = unit
            job.since = self.now
            job.rate = speed / self.rules.alone_factor
            if self.rules.restart == "on-start":
                job.dead_until = self.now + job.instance.restart_s
            if len(jobs) > 1:
                job.grouped_since = self.now
            self._schedule_completion(job)
        self._occupy(unit, +1)
        self._rekey(unit)
        return unit

    def _stop(self, unit: _Unit, preempted: bool) -> list[_Job]:
        """Stop a unit: its devices freed, its jobs (accounted) back to waiting."""
        self._occupy(unit, -1)
        del self.units[unit]
        self.changed_groups.pop(unit, None)
        self.keys.remove(unit)
        self.free.release(unit.devices)
        self.running_jobs -= len(unit.jobs)
        for job in unit.jobs:
            self._account(job)
            self._leave_group(job)
            job.unit = None
            job.rate = 0.0
            job.version += 1
            if preempted:
                job.outcome.preemptions += 1
            self._enqueue(job)
        return unit.jobs

    def _occupy(self, unit: _Unit, sign: int) -> None:
        devices = unit.gpus * sign
        self.busy += devices
        if len(unit.jobs) > 1:
            self.grouped += devices
        self.busy_by_sharing[unit.sharing] = self.busy_by_sharing.get(unit.sharing, 0) + devices

    def _leave_group(self, job: _Job) -> None:
        if not math.isnan(job.grouped_since):
            job.outcome.grouped_s += self.now - job.grouped_since
            job.grouped_since = math.nan

    def _complete(self, job: _Job) -> None:
        unit = job.unit
        assert unit is not None
        self._account(job)
        job.outcome.end_s = self.now
        job.work = 0.0
        self.finished += 1
        self._drop(unit, job)

    def _drop(self, unit: _Unit, job: _Job) -> None:
        """A job leaves a running unit (done, or its group dissolved); the rest go on at their new speeds."""
        self._occupy(unit, -1)
        self._leave_group(job)
        unit.jobs.remove(job)
        job.unit = None
        job.rate = 0.0
        job.version += 1
        self.running_jobs -= 1
        if not unit.jobs:
            del self.units[unit]
            self.changed_groups.pop(unit, None)
            self.keys.remove(unit)
            self.free.release(unit.devices)
            return
        for member in unit.jobs:
            self._account(member)
        speeds = self._speeds(unit.jobs)
        unit.sharing = ALONE.name if len(unit.jobs) == 1 else speeds.sharing
        self._occupy(unit, +1)
        for member, speed in zip(unit.jobs, speeds.speeds):
            member.rate = speed / self.rules.alone_factor
            if len(unit.jobs) == 1:
                self._leave_group(member)
            self._schedule_completion(member)
        self._rekey(unit)
        if len(unit.jobs) > 1:
            self.changed_groups[unit] = None

    def _speeds(self, jobs: list[_Job]) -> Speeds:
        """The model's speeds for these jobs as a group (in their order)."""
        kinds = tuple(job.kind for job in jobs)
        speeds = self.group_speeds.get(kinds)
        if speeds is None:
            speeds = self.group_speeds[kinds] = self.model.predict([job.profile() for job in jobs])
        return speeds

    def _gains(self, jobs: list[_Job]) -> bool:
        """Whether these jobs as a group are predicted to gain now (`dissolve_losing`, looked at again when they
        change), in their order."""
        kinds = tuple(job.kind for job in jobs)
        gains = self.group_gains.get(kinds)
        if gains is None:
            profiles = [job.profile() for job in jobs]
            kept = dissolve_losing([profiles], self.model, self.rules.min_gain_margin, until_done=False)
            gains = self.group_gains[kinds] = len(kept) == 1
        return gains

    def _rekey(self, unit: _Unit) -> None:
        if self.rules.reschedule != "keep":
            return
        best = min(unit.jobs, key=self._key)
        slope = self.policy.slope(best.gpus) * best.rate * self.rules.alone_factor
        self.keys.set(unit, self._key(best), slope, self.now)

    # ---------------------------------------------------------------- repack: decide everything afresh
    def _repack(self) -> None:
        if self.rules.restart == "every-event":
            self._charge_every_event()
        before: dict[int, tuple[tuple[int, ...], Devices]] = {}
        for unit in list(self.units):
            members = tuple(job.index for job in unit.jobs)
            for job in unit.jobs:
                before[job.index] = (members, unit.devices)
            self._stop(unit, preempted=False)
        for job in self.level_due:
            self._account(job)
        self.level_due.clear()
        for index in before:
            self._update_level(self.jobs[index])
        runnable = list(self.waiting.values())
        queued = [Queued(job.instance, job.iterations_left(), (self._key(job), job.index)) for job in runnable]
        by_name = {job.instance.name: job for job in runnable}
        step = decide(queued, self.free, self.step_rules)
        for start in step.starts:
            jobs = [by_name[member.instance.name] for member in start.unit.members]
            kept = all(before.get(job.index) == (tuple(j.index for j in jobs), start.devices) for job in jobs)
            dead = {job.index: job.dead_until for job in jobs}
            self._start(jobs, start.devices, start.unit.sharing, start.unit.speeds)
            if kept and self.rules.restart == "on-start":
                for job in jobs:  # it goes on as it was: no restart
                    job.dead_until = dead[job.index]
                    self._schedule_completion(job)
        for job in self.waiting.values():
            if job.index in before:
                job.outcome.preemptions += 1
        if self.policy.order == "attained-service":
            self._resequence()

    def _resequence(self) -> None:
        """Muri's Tiresias moves each queue's waiting jobs behind its running ones, each in their order."""
        runnable = [job for unit in self.units for job in unit.jobs] + list(self.waiting.values())
        for job in sorted(runnable, key=lambda j: (j.level, j.unit is None, j.entry)):
            self.entries += 1
            job.entry = self.entries

    # ---------------------------------------------------------------- keep: change only what must
    def _keep(self) -> None:
        if self.rules.restart == "every-event":
            self._charge_every_event()
        for job in self.level_due:
            if job.unit is not None:
                self._account(job)
                if self._update_level(job):
                    self._rekey(job.unit)
                self._schedule_completion(job)
        self.level_due.clear()
        self._dissolve_changed()
        self._fill()
        if self.policy.preemptive:
            self._preempt()
        if self.policy.groups and self.waiting:
            self._join()

    def _dissolve_changed(self) -> None:
        """Groups whose jobs changed are kept only while the model still predicts them to gain; a
        dissolved group's first job (in the policy's order) keeps the devices, the others wait again."""
        for unit in list(self.changed_groups):
            del self.changed_groups[unit]
            if unit not in self.units or len(unit.jobs) < 2:
                continue
            if self._gains(unit.jobs):
                continue
            stay = min(unit.jobs, key=self._key)
            for job in [job for job in unit.jobs if job is not stay]:
                self._drop(unit, job)
                job.outcome.preemptions += 1
                self._enqueue(job)
            self.changed_groups.pop(unit, None)

    def _fill(self) -> None:
        """Free devices to waiting jobs, in the policy's order (strict FIFO: until the first that does not fit)."""
        while self.waiting and self.free.total_free:
            best = self._best_waiting(fitting=self.policy.backfill)
            if best is None:
                return
            job = self.jobs[best[1]]
            devices = self.free.place(job.gpus, self.rules.placement)
            if devices is None:
                return  # strict FIFO: the first job does not fit
            self._start([job], devices, ALONE.name, (1.0,))

    def _preempt(self) -> None:
        """While a waiting job goes before a running one, it takes (some of) the devices of the running
        jobs it goes before, worst first, where that lets it start; a device count whose first job
        cannot start so is not tried again in this decision (its later jobs go after it)."""
        failed: set[int] = set()
        while self.waiting and self.units:
            best = self._best_waiting(fitting=False, besides=failed)
            if best is None:
                return
            key, index = best
            if not self.policy.preempts(key, self.keys.worst(self.now)):
                return
            job = self.jobs[index]
            victims = self._victims(job, key)
            if victims is None:
                failed.add(job.gpus)
                continue
            for unit in victims:
                self._stop(unit, preempted=True)
            devices = self.free.place(job.gpus, self.rules.placement)
            assert devices is not None
            self._start([job], devices, ALONE.name, (1.0,))
            self._fill()

    def _victims(self, job: _Job, key: float) -> list[_Unit] | None:
        """The running units, worst first, whose devices let `job` start (only those whose devices it
        takes); None if even all it goes before do not."""
        slots = self.keys.above(self.now, self.policy.preempts_above(key))
        if not slots.size or not self._could_start(job, slots):
            return None
        trial = self.free.copy()
        walked: list[_Unit] = []
        for slot in slots:
            unit = self.keys.units[slot]
            assert unit is not None
            walked.append(unit)
            trial.release(unit.devices)
            if not trial.fits(job.gpus, self.rules.placement):
                continue
            devices = trial.place(job.gpus, self.rules.placement)
            assert devices is not None
            used = {(host, index) for host, indices in devices for index in indices}
            return [
                other
                for other in walked
                if any((host, index) in used for host, indices in other.devices for index in indices)
            ]
        return None

    def _could_start(self, job: _Job, slots: np.ndarray) -> bool:
        """Whether `job` might start in place of these units: enough devices on one host (or in all, for a
        job bigger than a host, or placed anywhere). A quick test before the walk."""
        if self.rules.placement == "anywhere" or job.gpus > self.free.largest_host:
            return bool(self.free.total_free + int(self.keys.gpus[slots].sum()) >= job.gpus)
        per_host = np.fromiter((len(free) for free in self.free.free), dtype=np.int64, count=len(self.free.free))
        hosts = self.keys.host[slots]
        single = hosts >= 0
        np.add.at(per_host, hosts[single], self.keys.gpus[slots][single])
        for slot in slots[~single]:
            unit = self.keys.units[slot]
            assert unit is not None
            for host, indices in unit.devices:
                per_host[host] += len(indices)
        return bool(per_host.max() >= job.gpus)

    def _join(self) -> None:
        """xover's grouping in place: jobs next in line that got no devices join running units of their
        device count where the model predicts a gain (the grouping's b-matching on kinds, running units
        on one side and waiting jobs on the other)."""
        rooms: dict[int, list[_Unit]] = {}
        for unit in self.units:
            if len(unit.jobs) < self.rules.max_group:
                rooms.setdefault(unit.gpus, []).append(unit)
        for gpus, units in rooms.items():
            candidates = self._first_waiting(gpus, min(len(units), JOIN_CANDIDATES))
            if candidates:
                self._join_bucket(units, candidates)

    def _join_saving(self, unit_kind: tuple[int, ...], unit: _Unit, job: _Job) -> float:
        key = (unit_kind, job.kind)
        saving = self.join_savings.get(key)
        if saving is None:
            profiles = [member.profile() for member in unit.jobs]
            mine = job.profile()
            apart = self.model.grouping_period_ms(profiles) + self.model.grouping_period_ms([mine])
            together = self.model.grouping_period_ms([*profiles, mine])
            saving = apart - together if apart > (1 + self.rules.min_gain_margin) * together else 0.0
            self.join_savings[key] = saving
        return saving

    def _join_bucket(self, units: list[_Unit], candidates: list[_Job]) -> None:
        """The most time saved per period (the grouping's weights) pairing waiting jobs with running units,
        each at most once: running units on one side, waiting jobs on the other, a bipartite matching that
        the assignment solves exactly (units of one kind collapsed to as many as there are candidates)."""
        from scipy.optimize import linear_sum_assignment

        unit_kinds: dict[tuple[int, ...], list[_Unit]] = {}
        for unit in units:
            unit_kinds.setdefault(tuple(sorted(job.kind for job in unit.jobs)), []).append(unit)
        # most decisions of a long queue join nothing: told by each pair of kinds once, before the matrix is built
        first_of_kind: dict[int, _Job] = {}
        for job in candidates:
            first_of_kind.setdefault(job.kind, job)
        if not any(
            self._join_saving(kind, members[0], job)
            for job in first_of_kind.values()
            for kind, members in unit_kinds.items()
        ):
            return
        columns: list[tuple[tuple[int, ...], int]] = []  # (unit kind, its copy)
        for kind, members in unit_kinds.items():
            columns += [(kind, copy) for copy in range(min(len(members), len(candidates)))]
        saving = np.array(
            [[self._join_saving(kind, unit_kinds[kind][0], job) for kind, _ in columns] for job in candidates]
        )
        rows, chosen = linear_sum_assignment(saving, maximize=True)
        pairs = sorted(
            ((saving[row, column], row, column) for row, column in zip(rows, chosen) if saving[row, column] > 0),
            key=lambda pair: (-pair[0], pair[1]),
        )
        for _, row, column in pairs:
            kind = columns[column][0]
            unit, job = unit_kinds[kind].pop(), candidates[row]
            if self._gains([*unit.jobs, job]):
                self._add_to(unit, job)

    def _add_to(self, unit: _Unit, job: _Job) -> None:
        """A waiting job joins a running unit: every member's speed as the model predicts the group."""
        for member in unit.jobs:
            self._account(member)
        self._occupy(unit, -1)
        self._dequeue(job)
        unit.jobs.append(job)
        self.running_jobs += 1
        if math.isnan(job.outcome.start_s):
            job.outcome.start_s = self.now
        job.unit = unit
        job.since = self.now
        if self.rules.restart == "on-start":
            job.dead_until = self.now + job.instance.restart_s
        speeds = self._speeds(unit.jobs)
        unit.sharing = speeds.sharing
        self._occupy(unit, +1)
        for member, speed in zip(unit.jobs, speeds.speeds):
            member.rate = speed / self.rules.alone_factor
            if math.isnan(member.grouped_since):
                member.grouped_since = self.now
            self._schedule_completion(member)
        self._rekey(unit)


def replay(
    instances: Sequence[JobInstance],
    hosts: Sequence[Host],
    policy: Policy,
    model: ThroughputModel,
    rules: ReplayRules = ReplayRules(),
    progress: Callable[[int], None] | None = None,
) -> ReplayOutcome:
    """Replay `instances` on `hosts` under `policy`, predicting groups with `model` (see the module)."""
    return Replay(instances, hosts, policy, model, rules, progress).run()
