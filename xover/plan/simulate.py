"""A simulation of a group on its devices, driven by the very policy objects the turn server uses
(`xover.turns.policies`), so that what the planner predicts is what the runtime does.

Every job alternates compute on the devices and an all-reduce on the link:

* compute: `compute_ms` of device time per iteration (data, update, forward, backward). Under
  `crossover` only the turn's holder computes. Under `concurrent` (no coordination: Linux's
  scheduler on a core, time-slicing on a GPU) and `mps` (CUDA MPS: kernels of several processes
  side by side) every job that wants the device computes at once; a job whose co-run stretch was
  measured in that way of sharing (`corun_stretch`, `mps_stretch`: its compute time while a partner
  computes the whole time, over alone) computes that much slower while any partner computes, and one
  without a measured stretch gets an equal share of the device (processor sharing: a stretch of k
  for k jobs computing, what a saturated core or GPU gives). A holder asked to yield does so at its
  next layer boundary, `checkpoint_ms` later at most (half of it on average).
* communication: the all-reduce starts during backward (when `link_ms - comm_ms` of compute is
  left: the part that overlapped backward alone) and needs `link_ms` of the link to itself. The
  link is shared fairly between the transfers in flight (the emulated link and a NIC both give
  each flow its share), except that under a policy with link bands (work-conserving) the transfers
  of the first band in flight have most of it (all but the calibration's `link_band_leak`, which the
  next band gets: a queue sends whole packets, 32 KiB on the emulated link, and never cuts one short,
  and an all-reduce sends in steps that wait on the partner rank, so between two steps the band
  behind gets a packet in, which the next step then waits for; `calibration.py`).
  The next iteration asks for the device when the all-reduce is done.
* co-location costs device time: a job's device time grows by its measured `interference` whenever
  it shares the devices, whatever the policy (mostly its partners' communication on the same cores:
  the engines' threads, the kernel's network work, the caches they evict); it shrinks where the
  interference is negative (what the thread policy saves, see `model.py`). The CPU time a partner's
  communication takes (`comm_cpu`) is not charged on top: it understates that cost several times
  (docs/measurements.md, *Figures behind the design*), and the measured interference already holds
  all of it. It stays in the fluid bound's device constraint.

All ranks of a job run in step (the same policy decisions on every device), so one device stands
for all the devices of the group. `simulate` returns each job's iteration time and its speed
relative to alone; the fluid bound (`model.fluid_speeds`) is the best any policy could do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..sharing import DEFAULT_WAY, simulated_ways, way_named
from ..turns.policies import (
    DEFAULT_POLICY,
    DeviceTurns,
    SlotTraits,
    TurnPolicy,
    critical_rank,
    make_policy,
)
from .calibration import SHIPPED, Calibration

EPSILON = 1e-9
# The horizon is set by the slowest job, so a job many times faster fills it with events (a 1 s job
# next to a 0.2 ms one: 220,000 iterations, 17 s). Past this many events the simulation stops as
# soon as every job has done MIN_ITERATIONS: a steady pattern by then, and the planner stays quick.
MAX_EVENTS = 50_000
MIN_ITERATIONS = 8
# ... and at this many times MAX_EVENTS it stops whatever the jobs have done: a job that has not finished two
# iterations by then (one many thousand times slower than its partner: 1e9 ms next to 0.001 ms ran for ever)
# is predicted starved, so the planner does not form the group.
HARD_STOP = 4
# what the next event is (the loop's hot path: a kind and a job's index, no closure made per candidate)
NO_EVENT, EVENT_TRANSFER_STARTS, EVENT_COMPUTE_ENDS, EVENT_TRANSFER_ENDS, EVENT_YIELD = range(5)


@dataclass(frozen=True)
class SimJob:
    """One job as the simulation sees it (times per iteration, in ms, measured alone)."""

    name: str
    compute_ms: float  # device time: data + update + forward + backward
    comm_ms: float  # exposed communication alone: end of backward to gradients ready
    link_ms: float | None = None  # the link's busy time for its all-reduce (>= comm_ms); None: comm_ms
    checkpoint_ms: float = 1.0  # compute between two layer boundaries (yield latency)
    max_slowdown: float | None = None
    interference: float = 0.0  # its compute grows by this fraction next to a partner
    corun_stretch: float | None = None  # concurrent: compute time while a partner computes, over alone
    mps_stretch: float | None = None  # the same under CUDA MPS

    @cached_property  # read at every event of a simulation, for every job: worked out once
    def solo_ms(self) -> float:
        """An iteration alone: compute, then the exposed communication."""
        return self.compute_ms + self.comm_ms

    @cached_property
    def transfer_ms(self) -> float:
        """How long its all-reduce keeps the link busy (never less than the exposed communication)."""
        return max(self.link_ms if self.link_ms is not None else self.comm_ms, self.comm_ms)

    @cached_property
    def overlap_ms(self) -> float:
        """Compute left when the all-reduce starts (it overlaps the end of backward), measured alone."""
        return min(self.compute_ms, self.transfer_ms - self.comm_ms)

    @cached_property
    def shared_compute_ms(self) -> float:
        """Device time per iteration next to a partner."""
        return self.compute_ms * (1.0 + self.interference)

    @cached_property
    def shared_overlap_ms(self) -> float:
        """The overlap next to a partner: the end of backward it overlaps shrinks or grows with the
        compute, so a negative interference never starts the all-reduce before backward does."""
        return self.overlap_ms * (1.0 + self.interference)

    def traits(self) -> SlotTraits:
        """What the turn policy would be told of it (as run/jobs.traits_of)."""
        return SlotTraits(
            rank=critical_rank(self.compute_ms, self.solo_ms),
            max_slowdown=self.max_slowdown,
            solo_iteration_s=self.solo_ms / 1000,
            link_fraction=self.transfer_ms / self.solo_ms,
        )


@dataclass
class JobOutcome:
    """One job's figures at the end of a simulation."""

    name: str
    iterations: int
    iteration_ms: float  # mean over the measured window
    speed: float  # solo_ms / iteration_ms: throughput relative to alone (1.0 = as fast as alone)
    wait_ms: float  # mean time per iteration waiting for (or yielding) the turn
    device_ms: float = 0.0  # mean time per iteration computing (holding the turn), slowed as it was


@dataclass
class SimResult:
    """A simulation of one group in one mode (and turn policy): each job's outcome."""

    mode: str
    policy: str | None
    jobs: list[JobOutcome]

    @property
    def aggregate(self) -> float:
        """Sum of the jobs' speeds relative to alone (1.0 = no better than one after another)."""
        return sum(job.speed for job in self.jobs)


@dataclass
class _State:
    job: SimJob
    compute_left: float = 0.0  # of this iteration's compute phase
    transfer_left: float = 0.0
    transfer_started: bool = False
    computing: bool = False  # holds the turn (crossover) or is runnable (concurrent)
    in_compute_phase: bool = True
    waiting_since: float | None = None
    wait_this_iteration: float = 0.0
    computed_this_iteration: float = 0.0
    ends: list[float] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)
    computed: list[float] = field(default_factory=list)

    @property
    def transferring(self) -> bool:
        return self.transfer_started and self.transfer_left > EPSILON


class _Simulation:
    def __init__(
        self, jobs: Sequence[SimJob], mode: str, policy: str | None, calibration: Calibration = SHIPPED
    ) -> None:
        self.mode = mode
        self.takes_turns = way_named(mode).takes_turns
        self.calibration = calibration
        self.states = [_State(job) for job in jobs]
        self.now = 0.0
        self.policy = (
            make_policy(policy or DEFAULT_POLICY, {i: job.traits() for i, job in enumerate(jobs)})
            if self.takes_turns
            else None
        )
        self.stretch = [_stretch(job, mode) for job in jobs]
        self.turns = DeviceTurns(order=list(range(len(jobs))))
        self.pending_yield: tuple[float, int] | None = None  # (time, slot) of a yield asked for
        bands = self.policy.link_bands() if self.policy is not None else {}
        self.link_bands = [bands.get(index, 1) for index in range(len(jobs))]
        self.full_rates = [1.0] * len(jobs)  # under turns its holder has all of the device
        self._handlers: dict[int, Callable[[int], None]] = {
            EVENT_TRANSFER_STARTS: self._start_transfer,
            EVENT_COMPUTE_ENDS: self._finish_compute,
            EVENT_TRANSFER_ENDS: self._transfer_done,
            EVENT_YIELD: self._yield,
        }

    # -- rates --------------------------------------------------------------------------------
    def _computing(self) -> int:
        """How many jobs compute now (counted once an event: a count per job made each event O(jobs^2))."""
        return sum(1 for s in self.states if s.computing)

    def _compute_rates(self) -> list[float]:
        """Each job's `_compute_rate` now (read by the jobs that compute), worked out once an event."""
        if self.takes_turns:
            return self.full_rates
        computing = self._computing()
        return [self._compute_rate(index, computing) for index in range(len(self.states))]

    def _compute_rate(self, index: int, computing: int) -> float:
        """Of the device: all of it for the turn's holder; without turns, 1 / the job's stretch while
        any partner computes (`computing` jobs in all; an equal share where no stretch was measured)."""
        if self.takes_turns:
            return 1.0
        if computing <= 1:
            return 1.0
        stretch = self.stretch[index]
        if stretch is None:
            return 1.0 / computing
        return 1.0 / (1.0 + (stretch - 1.0) * (computing - 1))

    def _link_rates(self) -> dict[int, float]:
        """The transfers in flight in the first band served get the link, shared evenly, but for
        the calibration's link_band_leak of it, which goes to the next band in flight."""
        active = [i for i, s in enumerate(self.states) if s.transfer_started and s.transfer_left > EPSILON]
        if not active:
            return {}
        served = min(self.link_bands[i] for i in active)
        first = [i for i in active if self.link_bands[i] == served]
        behind = [self.link_bands[i] for i in active if self.link_bands[i] != served]
        if not behind:
            return {i: 1.0 / len(first) for i in first}
        next_band = [i for i in active if self.link_bands[i] == min(behind)]
        leak = self.calibration.link_band_leak
        return {**{i: (1.0 - leak) / len(first) for i in first}, **{i: leak / len(next_band) for i in next_band}}

    # -- a job's iteration --------------------------------------------------------------------
    def _start_iteration(self, index: int) -> None:
        state = self.states[index]
        state.compute_left = state.job.shared_compute_ms
        state.in_compute_phase = True
        state.transfer_started = False
        if not self.takes_turns:
            state.computing = True
            return
        state.waiting_since = self.now
        self.turns.request(index, self.now / 1000, new_iteration=True)
        self._decide()

    def _start_transfer(self, index: int) -> None:
        state = self.states[index]
        state.transfer_started = True
        state.transfer_left = state.job.transfer_ms

    def _finish_compute(self, index: int) -> None:
        state = self.states[index]
        state.computing = state.in_compute_phase = False
        if not state.transfer_started:
            self._start_transfer(index)
        if self.takes_turns:
            self.turns.release(index, self.now / 1000, end_of_phase=True)
            self.turn_policy.on_pass(self.turns)
            if self.pending_yield and self.pending_yield[1] == index:
                self.pending_yield = None
            self._decide()
        self._maybe_end(index)

    def _transfer_done(self, index: int) -> None:
        self.states[index].transfer_left = 0.0
        self._maybe_end(index)

    def _maybe_end(self, index: int) -> None:
        """The iteration ends when its compute is over and its all-reduce is done."""
        state = self.states[index]
        if state.in_compute_phase or state.transferring or not state.transfer_started:
            return
        state.ends.append(self.now)
        state.waited.append(state.wait_this_iteration)
        state.computed.append(state.computed_this_iteration)
        state.wait_this_iteration = state.computed_this_iteration = 0.0
        self._start_iteration(index)

    # -- the turn -----------------------------------------------------------------------------
    @property
    def turn_policy(self) -> TurnPolicy:
        """The turn policy (of a way of sharing that takes turns)."""
        assert self.policy is not None, "turns are taken only by a way of sharing that takes them"
        return self.policy

    def _decide(self) -> None:
        seconds = self.now / 1000
        choice = self.turn_policy.choose(self.turns, seconds)
        if choice is not None:
            slot, unpreemptible = choice
            self.turns.grant(slot, seconds, unpreemptible)
            state = self.states[slot]
            state.computing = True
            if state.waiting_since is not None:
                state.wait_this_iteration += self.now - state.waiting_since
                state.waiting_since = None
        holder = self.turns.holder
        if (
            holder is not None
            and self.pending_yield is None
            and self.turn_policy.preemptive
            and self.turn_policy.wants_yield(self.turns, seconds)
        ):
            # the holder sees the request at its next layer boundary: half a layer later on average
            self.pending_yield = (self.now + self.states[holder].job.checkpoint_ms / 2, holder)

    def _yield(self, index: int) -> None:
        self.pending_yield = None
        if self.turns.holder != index:
            return
        state = self.states[index]
        state.computing = False
        state.waiting_since = self.now
        self.turns.release(index, self.now / 1000)
        self.turns.request(index, self.now / 1000, new_iteration=False)
        self._decide()

    # -- the loop -----------------------------------------------------------------------------
    def run(self, horizon_ms: float, max_events: int = MAX_EVENTS) -> None:
        for index in range(len(self.states)):
            self._start_iteration(index)
        events = 0
        while self.now < horizon_ms:
            # the rates hold until the next event: worked out once for finding it and advancing to it
            link_rates, compute_rates = self._link_rates(), self._compute_rates()
            step, kind, whose = self._next_event(link_rates, compute_rates)
            if kind == NO_EVENT:
                break
            self._advance(step, link_rates, compute_rates)
            self._handlers[kind](whose)
            self._settle()
            events += 1
            if events >= max_events and all(len(state.ends) >= MIN_ITERATIONS for state in self.states):
                break
            if events >= HARD_STOP * max_events:
                break

    def _settle(self) -> None:
        """Handle whatever else became due at this instant (events that tie)."""
        changed = True
        while changed:
            changed = False
            for index, state in enumerate(self.states):
                if state.transfer_started and state.transfer_left <= EPSILON and not state.in_compute_phase:
                    before = len(state.ends)
                    self._maybe_end(index)
                    changed = changed or len(state.ends) != before
                elif (
                    state.computing
                    and not state.transfer_started
                    and state.compute_left - state.job.shared_overlap_ms <= EPSILON
                ):
                    self._start_transfer(index)
                    changed = True
                elif state.computing and state.compute_left <= EPSILON:
                    self._finish_compute(index)
                    changed = True

    def _next_event(self, link_rates: dict[int, float], compute_rates: list[float]) -> tuple[float, int, int]:
        """The time to the next event, what it is (one of the EVENT_* kinds, NO_EVENT for none) and whose
        (the first to reach the least time, in the jobs' order)."""
        best, kind, whose = math.inf, NO_EVENT, -1
        for index, state in enumerate(self.states):
            if state.computing:
                rate = compute_rates[index]
                left = state.compute_left
                if not state.transfer_started and left - state.job.shared_overlap_ms > EPSILON:
                    candidate = (left - state.job.shared_overlap_ms) / rate
                    if candidate < best:
                        best, kind, whose = candidate, EVENT_TRANSFER_STARTS, index
                candidate = left / rate
                if candidate < best:
                    best, kind, whose = candidate, EVENT_COMPUTE_ENDS, index
            if state.transfer_started and state.transfer_left > EPSILON:
                link_rate = link_rates.get(index, 0.0)
                if link_rate > 0:
                    candidate = state.transfer_left / link_rate
                    if candidate < best:
                        best, kind, whose = candidate, EVENT_TRANSFER_ENDS, index
        if self.pending_yield is not None:
            candidate = max(0.0, self.pending_yield[0] - self.now)
            if candidate < best:
                best, kind, whose = candidate, EVENT_YIELD, self.pending_yield[1]
        return best, kind, whose

    def _advance(self, step: float, link_rates: dict[int, float], compute_rates: list[float]) -> None:
        for index, state in enumerate(self.states):
            if state.computing:
                state.compute_left = max(0.0, state.compute_left - step * compute_rates[index])
                state.computed_this_iteration += step
            if state.transfer_started and state.transfer_left > EPSILON:
                state.transfer_left = max(0.0, state.transfer_left - step * link_rates.get(index, 0.0))
        self.now += step

    def outcomes(self, warmup_fraction: float = 0.2) -> list[JobOutcome]:
        results = []
        for state in self.states:
            ends = state.ends
            skip = max(1, int(len(ends) * warmup_fraction))
            window = ends[skip - 1 :]
            if len(window) < 2:
                results.append(JobOutcome(state.job.name, len(ends), math.inf, 0.0, math.inf))
                continue
            iteration = (window[-1] - window[0]) / (len(window) - 1)
            waits = state.waited[skip:] or [0.0]
            computed = state.computed[skip:] or [0.0]
            results.append(
                JobOutcome(
                    state.job.name,
                    len(ends),
                    iteration,
                    state.job.solo_ms / iteration,
                    sum(waits) / len(waits),
                    sum(computed) / len(computed),
                )
            )
        return results


SHARING_MODES = tuple(way.name for way in simulated_ways())  # crossover, concurrent, mps


def _stretch(job: SimJob, mode: str) -> float | None:
    """The job's measured co-run stretch in `mode` (None: processor sharing, or turns)."""
    field = way_named(mode).stretch
    return getattr(job, field) if field else None


def simulate(
    jobs: Sequence[SimJob],
    mode: str = DEFAULT_WAY.name,
    policy: str | None = "work-conserving",
    iterations: int = 60,
    max_events: int = MAX_EVENTS,
    calibration: Calibration = SHIPPED,
) -> SimResult:
    """Run the group until its slowest job (alone) would have done `iterations` iterations, or past
    `max_events` once every job has done MIN_ITERATIONS; the link's leak from `calibration`."""
    if mode not in SHARING_MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if len(jobs) == 1:
        job = jobs[0]
        return SimResult(mode, policy, [JobOutcome(job.name, iterations, job.solo_ms, 1.0, 0.0)])
    for job in jobs:
        # an iteration of no compute (within EPSILON) ends in the instant it starts, and so does the next:
        # the loop would never advance (the inputs refuse it: model.MIN_COMPUTE_MS)
        if not job.shared_compute_ms > EPSILON:
            raise ValueError(f"job {job.name!r}: compute_ms {job.compute_ms!r} is too short to simulate")
    policy = policy if way_named(mode).takes_turns else None
    simulation = _Simulation(jobs, mode, policy, calibration)
    horizon = iterations * max(job.solo_ms for job in jobs) * 2.5
    simulation.run(horizon, max_events)
    return SimResult(mode, policy, simulation.outcomes())
