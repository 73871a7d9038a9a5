"""Assign groups to devices, in waves.

A group whose jobs need D devices takes D device slots. All groups of wave 0 run
at the same time on disjoint devices; groups that do not fit wait for wave 1, and
so on (waves run one after another). Devices are named ``"host:index"``.

Within a wave a group goes to one host when some host has D slots at all (best
fit: the host with the fewest free slots that still fit it, so big holes stay
open for big groups); if that host's slots are taken in this wave, the group
moves to a later wave rather than being split. Only a group that no single host
can ever hold (D above every host's size) spans hosts, taking free slots host by
host in the order given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import JobProfile

Host = tuple[str, int]


@dataclass(frozen=True)
class PlacedGroup:
    """A group and the devices it was given, in its wave."""

    jobs: list[JobProfile]
    devices: list[str]
    wave: int


def device_name(host: str, index: int) -> str:
    """A device's name in a plan: "host:index"."""
    return f"{host}:{index}"


def total_slots(hosts: Sequence[Host]) -> int:
    """The device slots of every host together."""
    return sum(slots for _, slots in hosts)


def unplaceable_reason(job: JobProfile, hosts: Sequence[Host], device_memory_gb: float | None) -> str | None:
    """Why ``job`` can never run on these hosts, or None if it can."""
    available = total_slots(hosts)
    if job.devices > available:
        return f"needs {job.devices} devices, {available} exist"
    if device_memory_gb is not None and job.memory_gb > device_memory_gb:
        return f"needs {job.memory_gb:g} GB per device, devices have {device_memory_gb:g} GB"
    return None


class _Wave:
    """Free slots of every host during one wave."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self.free: list[list[int]] = [list(range(slots)) for _, slots in hosts]
        self.total_free = total_slots(hosts)
        self.largest_free = max((slots for _, slots in hosts), default=0)

    def take(self, host_index: int, count: int) -> list[int]:
        taken, self.free[host_index] = self.free[host_index][:count], self.free[host_index][count:]
        self.total_free -= count
        self.largest_free = max((len(free) for free in self.free), default=0)
        return taken


class _Placer:
    def __init__(self, hosts: Sequence[Host]) -> None:
        self.hosts = list(hosts)
        self.largest_host = max((slots for _, slots in hosts), default=0)
        self.waves: list[_Wave] = []
        self.first_open_wave = 0  # every earlier wave is full; skip them

    def place(self, needed: int) -> tuple[list[str], int]:
        """Devices and wave for a group needing ``needed`` devices (needed <= total slots)."""
        wave_index = self.first_open_wave
        while True:
            if wave_index == len(self.waves):
                self.waves.append(_Wave(self.hosts))
            devices = self._try_wave(self.waves[wave_index], needed)
            if devices is not None:
                self._skip_full_waves()
                return devices, wave_index
            wave_index += 1

    def _skip_full_waves(self) -> None:
        while self.first_open_wave < len(self.waves) and self.waves[self.first_open_wave].total_free == 0:
            self.first_open_wave += 1

    def _try_wave(self, wave: _Wave, needed: int) -> list[str] | None:
        if needed > wave.total_free:
            return None
        if needed <= self.largest_host:
            return self._on_one_host(wave, needed)
        return self._across_hosts(wave, needed)

    def _on_one_host(self, wave: _Wave, needed: int) -> list[str] | None:
        if needed > wave.largest_free:
            return None
        fitting = [index for index, free in enumerate(wave.free) if len(free) >= needed]
        host_index = min(fitting, key=lambda index: len(wave.free[index]))
        host = self.hosts[host_index][0]
        return [device_name(host, slot) for slot in wave.take(host_index, needed)]

    def _across_hosts(self, wave: _Wave, needed: int) -> list[str]:
        devices: list[str] = []
        for host_index, (host, _) in enumerate(self.hosts):
            if len(devices) == needed:
                break
            count = min(needed - len(devices), len(wave.free[host_index]))
            devices.extend(device_name(host, slot) for slot in wave.take(host_index, count))
        return devices


def place_groups(groups: Sequence[Sequence[JobProfile]], hosts: Sequence[Host]) -> list[PlacedGroup]:
    """Place every group, earliest wave first, in the order given.

    Every group must need at most ``total_slots(hosts)`` devices (filter with
    ``unplaceable_reason`` first). The caller chooses the order; putting long
    groups first makes them share early waves.
    """
    placer = _Placer(hosts)
    placed: list[PlacedGroup] = []
    for group in groups:
        needed = group[0].devices
        if needed > total_slots(hosts):
            raise ValueError(f"group of {needed}-device jobs cannot fit on {total_slots(hosts)} devices")
        devices, wave = placer.place(needed)
        placed.append(PlacedGroup(list(group), devices, wave))
    return placed
