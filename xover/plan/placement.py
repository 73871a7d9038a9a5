"""Assign a plan's groups to devices, and when each starts.

The plan's groups are placed as `xover run` will start them: in the plan's order (longest first), at
t = 0 every group that fits on the free devices, then, each time a group is predicted to end, the
groups still waiting, in order, on the devices free then. This is the decision step's placement
(`state.FreeDevices`, best-fit) asked again at every predicted end, so a group starts on the devices
that free first rather than on devices picked before anything ended. Devices are named ``"host:index"``.

A group goes to one host when some host has D slots at all (best fit: the host with the fewest free
slots that still fit it, so big holes stay open for big groups), never split while some host could
hold it. Only a group that no single host can ever hold (D above every host's size) spans hosts,
taking free slots host by host in the order given.

The first group that waits holds a reservation (when it could start at the earliest, and on which
devices): a later group starts before it only if predicted to end by then, or on devices the
reservation leaves alone (EASY backfill, as Slurm's backfill scheduler reserves), so a big group is
not starved by a stream of small ones.

`xover run` starts the groups in this order, each once its devices are free of every group before it,
which is never later than the start placed here (`make.schedule` times it so): earlier only where a
reservation held a group back from devices the reserved group did not take in the end.

A group's ``wave`` is its depth on its devices: 0 for a group that starts at once, otherwise one more
than the deepest group that ran before it on any of its devices. Two groups of one wave never share a
device.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from .model import JobProfile
from .state import Devices, FreeDevices, Host, total_slots

__all__ = ["Host", "PlacedGroup", "place_groups", "total_slots", "unplaceable_reason"]


@dataclass(frozen=True)
class PlacedGroup:
    """A group, the devices it was given, its wave, when the placement started it, and its place in the
    order the groups were given (`given`)."""

    jobs: list[JobProfile]
    devices: list[str]
    wave: int
    start_ms: float = 0.0
    given: int = 0


def unplaceable_reason(job: JobProfile, hosts: Sequence[Host], device_memory_gb: float | None) -> str | None:
    """Why ``job`` can never run on these hosts, or None if it can."""
    available = total_slots(hosts)
    if job.devices > available:
        return f"needs {job.devices} devices, {available} exist"
    if device_memory_gb is not None and job.memory_gb > device_memory_gb:
        return f"needs {job.memory_gb:g} GB per device, devices have {device_memory_gb:g} GB"
    return None


@dataclass
class _Running:
    end_ms: float
    devices: Devices


def place_groups(
    groups: Sequence[Sequence[JobProfile]], hosts: Sequence[Host], durations_ms: Sequence[float] | None = None
) -> list[PlacedGroup]:
    """Place every group in the order given, each as soon as devices are free for it, and return them in
    the order they start (ties in the order given).

    Every group must need at most ``total_slots(hosts)`` devices (filter with ``unplaceable_reason``
    first). ``durations_ms``: each group's predicted duration (None: all equal). The caller chooses the
    order; putting long groups first makes them start early.
    """
    sizes = [group[0].devices for group in groups]
    durations = [1.0] * len(groups) if durations_ms is None else [max(0.0, float(d)) for d in durations_ms]
    if len(durations) != len(groups):
        raise ValueError(f"{len(durations)} durations for {len(groups)} groups")
    available = total_slots(hosts)
    for needed in sizes:
        if needed > available:
            raise ValueError(f"group of {needed}-device jobs cannot fit on {available} devices")
    free = FreeDevices(hosts)
    running: list[tuple[float, int]] = []  # (end, group index), a heap
    taken: dict[int, Devices] = {}
    starts: dict[int, float] = {}
    waiting = list(range(len(groups)))
    now = 0.0
    while waiting:
        waiting = _start_what_fits(waiting, sizes, durations, free, running, taken, starts, now)
        if not waiting:
            break
        now, index = heapq.heappop(running)
        free.release(taken[index])
        while running and running[0][0] <= now:  # everything ending at the same moment frees at once
            free.release(taken[heapq.heappop(running)[1]])
    order = sorted(range(len(groups)), key=lambda index: (starts[index], index))
    deepest: dict[str, int] = {}  # device -> wave of the last group on it
    placed = []
    for index in order:
        devices = free.names(taken[index])
        wave = 1 + max((deepest[device] for device in devices if device in deepest), default=-1)
        for device in devices:
            deepest[device] = wave
        placed.append(PlacedGroup(list(groups[index]), devices, wave, starts[index], index))
    return placed


def _start_what_fits(
    waiting: list[int],
    sizes: Sequence[int],
    durations: Sequence[float],
    free: FreeDevices,
    running: list[tuple[float, int]],
    taken: dict[int, Devices],
    starts: dict[int, float],
    now: float,
) -> list[int]:
    """Start the waiting groups that fit now, in order; the first that does not fit gets a reservation
    (when it could start at the earliest, on the devices it would take then), and a later group that
    would still run then starts only on devices that reservation leaves alone. Returns the groups still
    waiting, in order."""
    still: list[int] = []
    reserved_at: float | None = None
    beside: FreeDevices | None = None  # free now and not the reservation's
    cannot: set[int] = set()  # sizes that found no free devices now (none will, later in this pass)
    cannot_beside: set[int] = set()  # sizes that found none beside the reservation
    sizes_left = set(sizes[index] for index in waiting)
    for position, index in enumerate(waiting):
        needed = sizes[index]
        long = reserved_at is not None and now + durations[index] > reserved_at
        devices = None
        if needed in cannot or needed > free.total_free:
            cannot.add(needed)
        elif not long:
            devices = free.place(needed)
            if devices is None:
                cannot.add(needed)
            elif beside is not None:
                _take_those_free(beside, devices)
        elif needed not in cannot_beside:
            assert beside is not None
            devices = beside.place(needed)
            if devices is None:
                cannot_beside.add(needed)
            else:
                free.take_devices(devices)
        if devices is None:
            if reserved_at is None:
                reserved_at, beside = _reservation(free, running, taken, needed)
            still.append(index)
            if free.total_free == 0 or sizes_left <= cannot:
                still.extend(waiting[position + 1 :])
                break
            continue
        taken[index] = devices
        starts[index] = now
        heapq.heappush(running, (now + durations[index], index))
    return still


def _reservation(
    free: FreeDevices, running: list[tuple[float, int]], taken: dict[int, Devices], needed: int
) -> tuple[float, FreeDevices]:
    """When a group needing ``needed`` devices could start at the earliest, were nothing else started,
    and the devices free now that it would not take then."""
    later = free.copy()
    for end, index in sorted(running):
        later.release(taken[index])
        devices = later.place(needed)
        if devices is not None:
            beside = free.copy()
            _take_those_free(beside, devices)
            return end, beside
    raise AssertionError("a group that fits the hosts found no devices once everything ended")


def _take_those_free(free: FreeDevices, devices: Devices) -> None:
    """Take from ``free`` those of ``devices`` that are free in it."""
    present = []
    for host, indices in devices:
        free_here = set(free.free[host])
        if kept := tuple(index for index in indices if index in free_here):
            present.append((host, kept))
    free.take_devices(tuple(present))
