"""Turn policies: who computes next on a device when several jobs of a group want it, and when the
job computing should yield. Pure logic over plain state, shared by the turn server
(`turns/server.py`) and the planner's simulator (`plan/simulate.py`).

Every policy sees the same events in the same order on every device of a job (the all-reduces keep a
job's ranks in step), and decides from them alone, so all ranks of a job get their turns together.

round-robin       CrossoverScheduler's strict alternation (the paper's method): slots take turns in a
                  fixed order, one compute phase each; the device waits for a slot whose turn it is.
                  Every job of a group runs at the pace of the slowest.

work-conserving   The default. A device never idles while a slot of its group waits. Waiting slots
                  are ordered by `rank` (`critical_rank`: jobs whose compute is short next to their
                  communication first, their compute is on their critical path), then by arrival. A
                  holder ranked after a waiting slot is asked to yield at its next layer boundary and
                  queues again, so a critical job waits about one layer.
                  No starvation: a slot passed over `max_bypass` times (grants to others while it
                  waited) goes before every slot not in that state (starved slots first come, first
                  served), and is not preempted; a granted slot needs max_bypass grants to others
                  to starve again, so with max_bypass >= slots - 1 a waiting slot is granted after at
                  most max_bypass + slots - 1 grants to others.
                  Protection: a job with `max_slowdown` whose recent iterations are slower than
                  max_slowdown x its solo iteration ranks before every unprotected job until it is
                  back within its bound.
                  The link (`link_bands`): the jobs' all-reduces share it too, and a small one
                  queued behind a partner's bulk transfer is a job's iteration waiting. The job that
                  needs the link least per iteration (link fraction l / T) is served first: a unit
                  of its speed costs the least link time, which is also how the fluid bound spends
                  the link. Its sockets carry a higher SO_PRIORITY, which the shaped link's queue
                  serves first (emulation/network.py); the others keep the link whenever it has
                  nothing to send, at least 1 - MAX_FIRST_LINK_FRACTION of it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# A waiter preempts the holder only if its rank is below this fraction of the holder's: two jobs of
# about the same shape (two copies of one job) alternate instead of interrupting each other.
PREEMPT_RATIO = 0.8
RECENT_ITERATIONS = 8  # window for the protection check
# The link's bands, first served to last, as socket priorities (SO_PRIORITY) that the queue of a
# shaped link (pfifo_fast's default priority map) puts in bands 0, 1 and 2. 0 is every socket's default.
LINK_BAND_PRIORITIES = (6, 0, 2)
# A job goes first on the link only if its partners keep at least this much of it (no starvation).
MAX_FIRST_LINK_FRACTION = 0.8
# ... and only if it needs clearly less of the link than the next: two copies of one job share it evenly.
LINK_PRIORITY_RATIO = 0.9


@dataclass(frozen=True)
class SlotTraits:
    """What the launcher tells the server about a job (a slot) before it starts."""

    rank: float | None = None  # smaller goes first (critical_rank); None: learnt from what the server sees
    max_slowdown: float | None = None
    solo_iteration_s: float | None = None
    link_fraction: float | None = None  # the link's busy time for its all-reduce / its solo iteration


@dataclass
class Waiter:
    """A slot waiting for the turn: since when, and how many grants to others it has sat through."""

    since: float
    bypassed: int = 0


@dataclass
class SlotHistory:
    """What one slot did on one device: iteration starts, time held, and the gaps between the end of
    a compute phase and the next request (its own communication), for the rank learnt online."""

    starts: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_ITERATIONS + 1))
    held_s: float = 0.0
    waited_s: float = 0.0
    iteration_held_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_ITERATIONS))
    gaps_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_ITERATIONS))
    released_at: float | None = None
    iterations: int = 0

    def recent_iteration_s(self) -> float | None:
        """The mean time between its recent iteration starts, or None before two."""
        if len(self.starts) < 2:
            return None
        return float(self.starts[-1] - self.starts[0]) / (len(self.starts) - 1)

    def learnt_rank(self) -> float | None:
        """`critical_rank` from what the server sees: time holding the turn per iteration (c), and
        that plus the gap from its release to its next request (c + m). Waiting for the turn is
        left out, so the estimate does not drift with the policy's own decisions."""
        if not self.iteration_held_s or not self.gaps_s:
            return None
        held = sum(self.iteration_held_s) / len(self.iteration_held_s)
        gap = sum(self.gaps_s) / len(self.gaps_s)
        return critical_rank(held, held + gap)


@dataclass
class DeviceTurns:
    """The turn state of one device: who holds it, who waits, who has left."""

    order: list[int]  # slots placed on this device, in round-robin order
    ready: set[int] = field(default_factory=set)  # slots that asked for a turn at least once
    gone: set[int] = field(default_factory=set)
    waiting: dict[int, Waiter] = field(default_factory=dict)
    holder: int | None = None
    holder_since: float = 0.0
    holder_unpreemptible: bool = False
    position: int = 0  # round robin: index in `order` of the slot whose turn it is
    open: bool = False  # start barrier: no turn before every slot is ready to train (or gone)
    history: dict[int, SlotHistory] = field(default_factory=dict)
    # slots computing without turns (an adaptive group's free state, turns/server.py): granted whenever they
    # ask, never waited for, never asked to yield; to the policy they are as good as gone
    free: set[int] = field(default_factory=set)

    def open_if_all_ready(self) -> None:
        """Lift the start barrier once every slot is ready to train, gone or free."""
        if self.ready | self.gone | self.free >= set(self.order):
            self.open = True

    def out_of_turns(self, slot: int) -> bool:
        """Whether the policy passes `slot` over: it has left, or computes without turns."""
        return slot in self.gone or slot in self.free

    def slot_history(self, slot: int) -> SlotHistory:
        """The slot's history on this device, begun empty on first use."""
        return self.history.setdefault(slot, SlotHistory())

    # -- events -------------------------------------------------------------------------------
    def request(self, slot: int, now: float, new_iteration: bool) -> None:
        """`slot` wants the turn: a new compute phase (acquire) or back after yielding."""
        self.ready.add(slot)
        self.gone.discard(slot)  # a slow starter given up on at the barrier is back
        if new_iteration:
            history = self.slot_history(slot)
            if history.iterations:
                history.iteration_held_s.append(history.held_s)
            if history.released_at is not None:
                history.gaps_s.append(now - history.released_at)
                history.released_at = None
            history.held_s = 0.0
            history.iterations += 1
            history.starts.append(now)
        self.waiting.setdefault(slot, Waiter(since=now))
        self.open_if_all_ready()

    def grant(self, slot: int, now: float, unpreemptible: bool = False) -> None:
        """Hand the turn to a waiting `slot`; every slot still waiting counts one more bypass."""
        waiter = self.waiting.pop(slot)
        self.slot_history(slot).waited_s += now - waiter.since
        for other in self.waiting.values():
            other.bypassed += 1
        self.holder, self.holder_since, self.holder_unpreemptible = slot, now, unpreemptible

    def release(self, slot: int, now: float, end_of_phase: bool = False) -> float | None:
        """The holder gives the turn up (end of phase, yield, or departure): how long it held it,
        or None if `slot` was not the holder."""
        if self.holder != slot:
            return None
        held = now - self.holder_since
        history = self.slot_history(slot)
        history.held_s += held
        if end_of_phase:
            history.released_at = now
        self.holder = None
        self.holder_unpreemptible = False
        return held

    def leave(self, slot: int, now: float) -> None:
        """`slot` has left: it waits no more, gives up the turn if it held it, and no longer holds back the start."""
        self.gone.add(slot)
        self.waiting.pop(slot, None)
        self.release(slot, now)
        self.open_if_all_ready()

    def live_waiters(self) -> list[int]:
        """Waiting slots that have not left (nor compute without turns), in arrival order."""
        return [slot for slot in self.waiting if not self.out_of_turns(slot)]


def critical_rank(compute_s: float, solo_iteration_s: float) -> float:
    """Who goes first when jobs want a device at once (smaller first): the compute fraction c / T.

    A job whose compute is short next to its communication has its compute on its critical path:
    every ms it waits is a ms of its iteration, while it takes the device from others only briefly.
    A unit of a job's speed relative to alone costs c / T of the device, so serving the cheapest
    first is also what the fluid bound (plan/model.py) does with the device. Measured against
    ranking by c x T (windowed, 1 Gbit/s): better or equal on every pair tried (resnet+vgg 1.60 vs 1.43).
    """
    return compute_s / solo_iteration_s if solo_iteration_s > 0 else 1.0


def link_bands(traits: dict[int, SlotTraits]) -> dict[int, int]:
    """The link's order: by link fraction, smallest first (band 0), the next in band 1, the rest in
    band 2. Nothing is ordered (every job in the default band) unless at least two jobs' fractions are
    known, the first leaves its partners at least 1 - MAX_FIRST_LINK_FRACTION of the link, and it is
    clearly lighter than the next (LINK_PRIORITY_RATIO)."""
    known = sorted((trait.link_fraction, slot) for slot, trait in traits.items() if trait.link_fraction is not None)
    if len(known) < 2:
        return {}
    (first, _), (second, _) = known[0], known[1]
    if first > MAX_FIRST_LINK_FRACTION or first >= second * LINK_PRIORITY_RATIO:
        return {}
    return {slot: min(position, len(LINK_BAND_PRIORITIES) - 1) for position, (_, slot) in enumerate(known)}


class TurnPolicy:
    """Decides grants and yields for one device; the same decisions for the same events everywhere."""

    name = "policy"
    preemptive = False

    def __init__(self, traits: dict[int, SlotTraits] | None = None) -> None:
        self.traits = traits or {}

    def choose(self, turns: DeviceTurns, now: float) -> tuple[int, bool] | None:
        """The slot to grant now (and whether that grant may not be preempted), or None."""
        raise NotImplementedError

    def link_bands(self) -> dict[int, int]:
        """Slot -> its band on the link (0 served first); a slot left out keeps the default band 1."""
        return {}

    def wants_yield(self, turns: DeviceTurns, now: float) -> bool:
        """Should the holder give the turn up at its next layer boundary?"""
        return False

    def on_pass(self, turns: DeviceTurns) -> None:
        """The holder finished its phase (round robin moves on)."""


class RoundRobin(TurnPolicy):
    """Strict alternation in a fixed order, one compute phase each (the paper's method)."""

    name = "round-robin"

    def choose(self, turns: DeviceTurns, now: float) -> tuple[int, bool] | None:
        """Grant the slot whose turn it is, once it waits; never a later one first. A slot that has gone is
        passed over only for a slot that waits: the turn stays its own until then, so a rank that was passed
        over and asks again before its partner does takes the next turn, whoever asked first."""
        if not turns.open or turns.holder is not None or not turns.order:
            return None
        for step in range(len(turns.order)):
            index = (turns.position + step) % len(turns.order)
            slot = turns.order[index]
            if not turns.out_of_turns(slot):
                if slot not in turns.waiting:
                    return None  # never a later slot first
                turns.position = index
                return slot, True
        return None

    def on_pass(self, turns: DeviceTurns) -> None:
        """Move the turn on to the next slot in order."""
        if turns.order:
            turns.position = (turns.position + 1) % len(turns.order)


class WorkConserving(TurnPolicy):
    """The default: the device never idles while a slot waits; critical jobs first, protected and starved
    slots before them, a holder ranked after a waiter asked to yield."""

    name = "work-conserving"
    preemptive = True

    def __init__(self, traits: dict[int, SlotTraits] | None = None, max_bypass: int = 8) -> None:
        super().__init__(traits)
        self.max_bypass = max_bypass

    def rank(self, turns: DeviceTurns, slot: int) -> float:
        """A slot's rank (smaller first): the one its traits give, else the one learnt from its history."""
        trait = self.traits.get(slot)
        if trait is not None and trait.rank is not None:
            return trait.rank
        learnt = turns.slot_history(slot).learnt_rank()
        return learnt if learnt is not None else 0.0  # nothing known yet: first come, first served

    def behind(self, turns: DeviceTurns, slot: int) -> bool:
        """A protected job whose recent iterations are slower than its bound allows."""
        trait = self.traits.get(slot)
        if trait is None or not trait.max_slowdown or not trait.solo_iteration_s:
            return False
        recent = turns.slot_history(slot).recent_iteration_s()
        return recent is not None and recent > trait.max_slowdown * trait.solo_iteration_s

    def _key(self, turns: DeviceTurns, slot: int, waiter: Waiter) -> tuple[int, float, float, int]:
        if waiter.bypassed >= self.max_bypass:
            return (0, 0.0, waiter.since, slot)  # starved slots first, first come first served
        return (1 if self.behind(turns, slot) else 2, self.rank(turns, slot), waiter.since, slot)

    def choose(self, turns: DeviceTurns, now: float) -> tuple[int, bool] | None:
        """Grant the first live waiter: starved, then behind its bound, then by rank and arrival."""
        if not turns.open or turns.holder is not None:
            return None
        waiters = turns.live_waiters()
        if not waiters:
            return None
        slot = min(waiters, key=lambda s: self._key(turns, s, turns.waiting[s]))
        return slot, turns.waiting[slot].bypassed >= self.max_bypass

    def link_bands(self) -> dict[int, int]:
        """Bands on the link from the jobs' link fractions (module-level `link_bands`)."""
        return link_bands(self.traits)

    def wants_yield(self, turns: DeviceTurns, now: float) -> bool:
        """Ask the holder to yield when a starved slot waits, or a waiter is more urgent by protection or
        clearly by rank (PREEMPT_RATIO); never an unpreemptible holder."""
        holder = turns.holder
        if holder is None or turns.holder_unpreemptible:
            return False
        waiters = turns.live_waiters()
        if not waiters:
            return False
        if any(turns.waiting[s].bypassed >= self.max_bypass for s in waiters):
            return True  # a starved slot goes next: cut the holder's phase short
        holder_behind = self.behind(turns, holder)
        holder_rank = self.rank(turns, holder)
        for slot in waiters:
            behind = self.behind(turns, slot)
            if behind and not holder_behind:
                return True
            if behind == holder_behind and self.rank(turns, slot) < holder_rank * PREEMPT_RATIO:
                return True
        return False


POLICIES: dict[str, type[TurnPolicy]] = {RoundRobin.name: RoundRobin, WorkConserving.name: WorkConserving}
DEFAULT_POLICY = WorkConserving.name


def make_policy(name: str, traits: dict[int, SlotTraits] | None = None) -> TurnPolicy:
    """The policy registered under `name`, with the jobs' traits; an unknown name is a ValueError listing them."""
    if name not in POLICIES:
        raise ValueError(f"unknown turn policy {name!r}; choose {', '.join(POLICIES)}")
    return POLICIES[name](traits)
