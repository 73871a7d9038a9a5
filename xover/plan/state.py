"""A cluster's devices as the decision step sees them: which are free on each host.

The rest of a cluster's state (the running groups, the queue, the clock) is the replay's
(`xover/replay/engine.py`); for a plan, nothing runs yet and every job waits at t = 0. `FreeDevices`
answers placement's questions (which host fits a group, which devices it takes) in time independent of
how many jobs run, so that a replay of a long trace can ask them at every event: hosts are indexed by how
many devices each has free.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

Host = tuple[str, int]  # a host's name and how many devices it has


def device_name(host: str, index: int) -> str:
    """A device's name in a plan: "host:index"."""
    return f"{host}:{index}"


def total_slots(hosts: Sequence[Host]) -> int:
    """The device slots of every host together."""
    return sum(slots for _, slots in hosts)


# Where a group goes (`FreeDevices.place`):
# best-fit   - `xover plan`'s placement (placement.py): on one host when some host is big enough, the one
#              with the fewest free devices that still fit; a group bigger than every host spans hosts,
#              taking free devices host by host in order;
# first-fit  - the first host (in order) with enough free devices; a group bigger than a host takes whole
#              free hosts in order and the rest on the first other host with room (Muri's and Tiresias'
#              simulators, "yarn");
# anywhere   - any free devices, host by host in order: only their number matters (Muri's simulator
#              places Tiresias' jobs so).
PLACEMENTS = ("best-fit", "first-fit", "anywhere")

Devices = tuple[tuple[int, tuple[int, ...]], ...]  # (host index, device indices on it), host by host


class FreeDevices:
    """The free devices of every host, indexed by each host's free count."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self.hosts = [name for name, _ in hosts]
        self.size = [slots for _, slots in hosts]
        self.largest_host = max(self.size, default=0)
        self.free: list[list[int]] = [list(range(slots)) for slots in self.size]
        self.total_free = sum(self.size)
        self.total = self.total_free
        # by_free[k]: indices of the hosts with exactly k free devices, in order
        self.by_free: list[list[int]] = [[] for _ in range(self.largest_host + 1)]
        for index, slots in enumerate(self.size):
            self.by_free[slots].append(index)

    def copy(self) -> FreeDevices:
        """An independent copy (a tentative placement)."""
        other = FreeDevices.__new__(FreeDevices)
        other.hosts, other.size, other.largest_host = self.hosts, self.size, self.largest_host
        other.free = [list(devices) for devices in self.free]
        other.total_free, other.total = self.total_free, self.total
        other.by_free = [list(hosts) for hosts in self.by_free]
        return other

    @property
    def largest_free(self) -> int:
        """The most free devices on any one host."""
        for count in range(self.largest_host, 0, -1):
            if self.by_free[count]:
                return count
        return 0

    def _move(self, host: int, before: int, after: int) -> None:
        hosts = self.by_free[before]
        del hosts[bisect.bisect_left(hosts, host)]
        bisect.insort(self.by_free[after], host)

    def take(self, host: int, count: int) -> tuple[int, ...]:
        """The `count` lowest free devices of `host`, now taken."""
        free = self.free[host]
        before = len(free)
        taken, self.free[host] = tuple(free[:count]), free[count:]
        self.total_free -= count
        self._move(host, before, before - count)
        return taken

    def take_devices(self, devices: Devices) -> Devices:
        """These very devices (all free), now taken."""
        for host, indices in devices:
            free = self.free[host]
            before = len(free)
            for index in indices:
                del free[bisect.bisect_left(free, index)]
            self.total_free -= len(indices)
            self._move(host, before, len(free))
        return devices

    def release(self, devices: Devices) -> None:
        """Devices given back."""
        for host, indices in devices:
            free = self.free[host]
            before = len(free)
            for index in indices:
                bisect.insort(free, index)
            self.total_free += len(indices)
            self._move(host, before, len(free))

    def place(self, needed: int, rule: str = "best-fit") -> Devices | None:
        """Take devices for a group needing `needed` of them by `rule` (`PLACEMENTS`), or None (nothing
        is taken) when they are not free now."""
        if needed > self.total_free or needed < 1:
            return None
        if rule == "anywhere":
            return self._host_by_host(needed)
        if rule == "first-fit":
            return self._first_fit(needed)
        if needed <= self.largest_host:
            host = self._best_fit_host(needed)
            return None if host is None else ((host, self.take(host, needed)),)
        return self._host_by_host(needed)

    def fits(self, needed: int, rule: str = "best-fit") -> bool:
        """Whether `place` would find devices now (nothing is taken)."""
        if needed > self.total_free or needed < 1:
            return False
        if rule == "anywhere":
            return True
        if needed <= self.largest_host:
            return self.largest_free >= needed
        if rule == "first-fit":
            return self._whole_hosts(needed) is not None
        return True

    def _best_fit_host(self, needed: int) -> int | None:
        for count in range(needed, self.largest_host + 1):
            if self.by_free[count]:
                return self.by_free[count][0]
        return None

    def _first_fit_host(self, needed: int, besides: Sequence[int] = ()) -> int | None:
        found: int | None = None
        for count in range(needed, self.largest_host + 1):
            for host in self.by_free[count]:
                if host not in besides:
                    if found is None or host < found:
                        found = host
                    break
        return found

    def _host_by_host(self, needed: int) -> Devices:
        taken: list[tuple[int, tuple[int, ...]]] = []
        left = needed
        for host in range(len(self.hosts)):
            if left == 0:
                break
            count = min(left, len(self.free[host]))
            if count:
                taken.append((host, self.take(host, count)))
                left -= count
        return tuple(taken)

    def _whole_hosts(self, needed: int) -> tuple[list[int], int | None] | None:
        """First-fit across hosts: whole free hosts in order while the rest needs a whole host, then one
        other host for the rest (None when there is no rest); None when they are not free."""
        if needed <= self.largest_host:
            host = self._first_fit_host(needed)
            return None if host is None else ([], host)
        whole: list[int] = []
        left = needed
        for host in range(len(self.hosts)):
            if left >= self.size[host] and len(self.free[host]) == self.size[host]:
                whole.append(host)
                left -= self.size[host]
                if left < self.largest_host:
                    break
        if left >= self.largest_host:
            return None
        if left == 0:
            return whole, None
        rest = self._first_fit_host(left, besides=whole)
        return None if rest is None else (whole, rest)

    def _first_fit(self, needed: int) -> Devices | None:
        found = self._whole_hosts(needed)
        if found is None:
            return None
        whole, rest = found
        taken = [(host, self.take(host, self.size[host])) for host in whole]
        if rest is not None:
            taken.append((rest, self.take(rest, needed - sum(self.size[host] for host in whole))))
        return tuple(taken)

    def names(self, devices: Devices) -> list[str]:
        """Devices as a plan names them: "host:index"."""
        return [device_name(self.hosts[host], index) for host, indices in devices for index in indices]
