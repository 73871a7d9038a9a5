"""The closed vocabulary of how jobs run: the modes a run is made in, the status it ends in, and the ways
of sharing a group's devices, each way one registered object (as a turn policy is, `turns/policies.py`).

    Mode          what a run row records: solo (`xover train`), profile, sequential (each job alone in a
                  comparison), and the mode of each way of sharing that runs as its own (concurrent, crossover,
                  adaptive)
    RunStatus     where a run is, and how it ended (experiment_status: an experiment's, from its runs')
    WayOfSharing  one way a group's jobs share their devices: its name, the mode its runs are made in,
                  whether it needs turn servers or an MPS daemon, how the planner simulates it, and how its
                  runs are compared and labelled

A new way of sharing is a `WayOfSharing` and `register_way(...)` here; the planner predicts it, `xover run
--mode` offers it, a comparison measures it and the report shows it by what the object says.
This module loads nothing of xover but its errors: every room, the workers' included, may read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from .errors import XoverError, printable


class Mode(str, Enum):
    """The mode a run is made in (the store's `runs.mode`). A str: it compares equal to its value."""

    SOLO = "solo"  # `xover train`: one job alone
    PROFILE = "profile"  # a job measured alone, or beside its reference partner, by `xover profile`
    SEQUENTIAL = "sequential"  # each job of a group alone, one after another: the baseline of a comparison
    CONCURRENT = "concurrent"  # the group's jobs on their devices together, without turns
    CROSSOVER = "crossover"  # the group's jobs taking turns on their devices, under a turn policy
    ADAPTIVE = "adaptive"  # the group measures turns and no turns while it runs, and settles on the better

    def __str__(self) -> str:
        return self.value


ALONE_MODES = (Mode.SOLO, Mode.SEQUENTIAL, Mode.PROFILE)  # a run of one job by itself
SHARED_MODES = (Mode.CONCURRENT, Mode.CROSSOVER, Mode.ADAPTIVE)  # runs of jobs together
# jobs in one group (--max-group): a group takes turns under one turn server, which serves as many as its protocol
# numbers (turns/protocol.py's MAX_SLOTS)
MAX_GROUP = 254
MODE_ORDER = (
    Mode.SOLO,
    Mode.PROFILE,
    Mode.SEQUENTIAL,
    Mode.CONCURRENT,
    Mode.CROSSOVER,
    Mode.ADAPTIVE,
)  # as tables list them
PLANNED = "planned"  # `xover run --mode planned`: each group of a plan in the way of sharing its plan picked
ALL = "all"  # `xover run --mode all`: sequential and the mode of every way of sharing, as one comparison


class RunStatus(str, Enum):
    """Where a run is, and how it ended (the store's `runs.status`). A str: it compares equal to its value."""

    PENDING = "pending"  # recorded, not started
    RUNNING = "running"
    FINISHED = "finished"  # every rank exited 0
    FAILED = "failed"
    TIMEOUT = "timeout"  # --timeout, or a Slurm time limit
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
    CANCELLED = "cancelled"  # scancel, or its launcher's own cancel
    STOPPED = "stopped"  # it only shared the devices of a job whose end ended its unit
    LOST = "lost"  # its xover died; found later by the next one

    def __str__(self) -> str:
        return self.value

    @property
    def ended(self) -> bool:
        """Whether the run is over (any status but pending and running)."""
        return self not in (RunStatus.PENDING, RunStatus.RUNNING)


OPEN_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)

# how a run that did not finish ends an experiment xover ran to its end: the first of these its runs ended as
# (a run `stopped` only shared the devices of a job whose end ended its unit: its experiment finished)
ENDED_SHORT = (RunStatus.FAILED, RunStatus.LOST, RunStatus.TIMEOUT, RunStatus.CANCELLED, RunStatus.INTERRUPTED)


def experiment_status(stored: str, run_statuses: Iterable[str | None]) -> str:
    """The status every view shows for an experiment (the report's listing, page and JSON, MLflow, and the run's
    metric sinks as it closes):
    the one stored, but where it is `finished`, how its runs ended: the first of ENDED_SHORT that a run of it
    ended as (`failed` where a job failed; `cancelled` where its scheduler cancelled a job, scancel; `timeout`
    where a job hit its scheduler's time limit). The experiment's row says `finished` once xover ran it to its
    end, whatever its jobs did; a status it stored otherwise (interrupted, timeout, failed, lost) stays."""
    if stored != RunStatus.FINISHED:
        return stored
    ended = {str(status) for status in run_statuses}  # values: a RunStatus hashes by its name
    return next((status.value for status in ENDED_SHORT if status.value in ended), stored)


@dataclass(frozen=True)
class WayOfSharing:
    """One way a group's jobs share their devices.

    `mode` is the mode its runs are made in and recorded as (MPS runs are concurrent runs under an MPS
    daemon). The planner simulates a way that `takes_turns` with the turn policy, and one that does not
    with each job's measured stretch next to a computing partner (`stretch`, a profile's field; None:
    processor sharing). `compared_as` is the key of its gain over sequential in a comparison's JSON.
    A way that `adapts` is not simulated (`simulated` False): it runs its group with turns and without in
    turn, measures both and settles on the better (run/adaptive.py); the planner predicts it from the
    ways it chooses between."""

    name: str
    summary: str  # one line, for --help and the docs
    mode: Mode
    takes_turns: bool = False  # its units need turn servers, and it runs under a turn policy
    needs_mps: bool = False  # its units run under the run's CUDA MPS daemon
    stretch: str | None = None  # the JobProfile field of a job's stretch under it (without turns)
    shares: bool = True  # False for a job alone: the plan's pick for a group of one
    needs_measured_stretch: bool = False  # predicted only where every job of the group measured `stretch`
    simulated: bool = True  # the planner's simulation predicts it (plan/simulate.py)
    adapts: bool = False  # it measures turns against none while it runs, and settles on the better

    @property
    def compared_as(self) -> str:
        """The key of its measured gain over sequential in a comparison (`crossover_vs_sequential`)."""
        return f"{self.name}_vs_sequential"

    def __str__(self) -> str:
        return self.name


WAYS: dict[str, WayOfSharing] = {}


def register_way(way: WayOfSharing) -> WayOfSharing:
    """Offer a way of sharing to the planner, `xover run --mode`, the comparisons and the report."""
    WAYS[way.name] = way
    return way


CROSSOVER = register_way(
    WayOfSharing(
        Mode.CROSSOVER.value,
        "the jobs take turns on their devices under a turn policy",
        Mode.CROSSOVER,
        takes_turns=True,
    )
)
CONCURRENT = register_way(
    WayOfSharing(
        Mode.CONCURRENT.value,
        "the jobs share their devices without coordination (what the devices do without xover)",
        Mode.CONCURRENT,
        stretch="corun_stretch",
    )
)
MPS = register_way(
    WayOfSharing(
        "mps",
        "concurrent under a CUDA MPS daemon: kernels of the jobs' processes side by side",
        Mode.CONCURRENT,
        needs_mps=True,
        stretch="mps_stretch",
        needs_measured_stretch=True,
    )
)
ADAPTIVE = register_way(
    WayOfSharing(
        Mode.ADAPTIVE.value,
        "the group measures turns (under its policy) and no turns while it runs, and settles on the better",
        Mode.ADAPTIVE,
        takes_turns=True,
        simulated=False,
        adapts=True,
    )
)
ALONE = register_way(WayOfSharing("alone", "one job by itself: it shares nothing", Mode.SEQUENTIAL, shares=False))

DEFAULT_WAY = CROSSOVER  # what a group's jobs do unless a plan or --mode says otherwise


def way_named(name: str) -> WayOfSharing:
    """The registered way of that name; another name is a ValueError listing them."""
    if name not in WAYS:
        raise ValueError(f"unknown way of sharing {name!r}; choose {', '.join(WAYS)}")
    return WAYS[name]


def sharing_ways() -> tuple[WayOfSharing, ...]:
    """The ways a group of several jobs can share its devices, in the order they are registered."""
    return tuple(way for way in WAYS.values() if way.shares)


def simulated_ways() -> tuple[WayOfSharing, ...]:
    """The ways of sharing the planner's simulation predicts (crossover, concurrent, mps): every way but
    one that adapts, which is predicted from them."""
    return tuple(way for way in sharing_ways() if way.simulated)


def adapts(name: str | None) -> bool:
    """Whether the mode or way of that name measures while it runs (adaptive)."""
    way = WAYS.get(name or "")
    return way is not None and way.adapts


def run_modes() -> tuple[Mode, ...]:
    """What `xover run --mode` offers, in the order a comparison runs them: sequential (the baseline),
    then the mode of each way of sharing, in the order of `Mode`."""
    return tuple(mode for mode in Mode if mode == Mode.SEQUENTIAL or any(way.mode == mode for way in WAYS.values()))


def default_modes(plan: bool) -> str:
    """`--mode` when not given, the one default: a plan's groups as planned, an ad-hoc group compared in all."""
    return PLANNED if plan else ALL


def modes_of(mode: str | None, plan: bool = True) -> list[str]:
    """`--mode`: one mode, `all` (in the order of `run_modes()`), a comma list such as
    `sequential,crossover` (the baseline a user wants beside crossover, without the third), run with
    sequential first (the baseline that says whether each job runs at all) and the others in the order
    given, or, for a plan, `planned` (each group in the way of sharing its plan picked, as scheduled);
    None: the default (`default_modes`). A list's order lets a comparison run its ways in another order
    (a bench that reverses them every other repeat, so a machine slowing within a row costs each way alike)."""
    mode = default_modes(plan) if mode is None else mode
    choices = [str(m) for m in run_modes()]
    asked = [part.strip() for part in mode.split(",")]
    if PLANNED in asked:
        if not plan:
            raise XoverError(
                f"--mode {printable(mode)}: planned runs a plan file's groups as planned; an ad-hoc group "
                f"has no plan (choose {', '.join(reversed(choices))} or {ALL})"
            )
        if asked != [PLANNED]:
            raise XoverError(
                f"--mode {printable(mode)}: planned is a mode of its own (the plan's schedule); compare with --mode all"
            )
        return [PLANNED]
    unknown = [part for part in asked if part not in (*choices, ALL)]
    if unknown or not all(asked):
        raise XoverError(
            f"--mode {printable(mode)}: choose {', '.join(reversed(choices))}, a comma list of them, or {ALL} "
            f"(or {PLANNED}: a plan's groups as it picked)"
        )
    if ALL in asked:
        if asked != [ALL]:  # `all,crossover` would run crossover once, not the twice or the order it seems to ask
            raise XoverError(f"--mode {printable(mode)}: {ALL} is every mode already; give it alone, or list the modes")
        return choices
    twice = sorted({part for part in asked if asked.count(part) > 1})
    if twice:  # as `xover simulate --policy`: each would seem to be run twice and is run once
        raise XoverError(f"--mode {printable(mode)}: {', '.join(twice)} named twice; name each mode once")
    return [m for m in asked if m == Mode.SEQUENTIAL] + [m for m in asked if m != Mode.SEQUENTIAL]


def turn_taking(name: str | None) -> bool:
    """Whether the mode or way of that name takes turns, or may (crossover, adaptive): its units need turn
    servers."""
    way = WAYS.get(name or "")
    return way is not None and way.takes_turns
