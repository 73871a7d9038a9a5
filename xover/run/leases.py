"""Device leases: two `xover` invocations never share a device without knowing it.

A run holds an exclusive lock on a file per device it uses (`<dir>/<host>-<index>.lock`) while its
jobs run there. The lock is the kernel's (flock): it dies with the process that holds it, so a killed
xover leaves no stale lease. The file says who holds it, for the message the next one prints. Hosts
of an emulated cluster share this machine's filesystem, so their devices are leased here too.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable

from ..errors import XoverError
from ..launch.hosts import Device

LEASE_DIR = "/tmp/xover-leases"  # shared by every user of the machine: a device is a device


class DeviceBusy(XoverError):
    pass


def lease_dir() -> str:
    path = os.environ.get("XOVER_LEASE_DIR", LEASE_DIR)
    os.makedirs(path, exist_ok=True)
    try:
        os.chmod(path, 0o1777)  # anyone may lease, nobody may delete another's file
    except PermissionError:
        pass
    return path


def _open_lease(path: str) -> tuple[int, bool]:
    """The lease file, and whether it can say who holds it. Opened as it is when it exists (an
    O_CREAT open of another user's file in a sticky folder is refused where fs.protected_regular is
    on), created writable by everyone otherwise (the umask would leave it to its creator alone). An
    older file only its creator may write is locked read-only (flock works on any descriptor): it
    leases all the same, but still names the last holder that could write it."""
    try:
        return os.open(path, os.O_RDWR), True
    except FileNotFoundError:
        pass
    except PermissionError:
        return _open_read_only(path), False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:  # another xover created it just now
        return _open_lease(path)
    os.fchmod(fd, 0o666)
    return fd, True


def _open_read_only(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as error:
        raise XoverError(f"cannot open the device lease {path}: {error.strerror}; set XOVER_LEASE_DIR "
                         "to a folder every user of the machine may write") from None


class DeviceLeases:
    """The leases one xover process holds, by device."""

    def __init__(self, holder: str) -> None:
        self.holder = holder  # e.g. "experiment X (xover run ...)"
        self.held: dict[Device, int] = {}

    def _path(self, device: Device) -> str:
        host, index = device
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in host)
        return os.path.join(lease_dir(), f"{safe}-{index}.lock")

    def try_acquire(self, devices: Iterable[Device]) -> dict[Device, str]:
        """Lease every device or none; returns who holds the busy ones (empty when all were leased)."""
        taken: list[Device] = []
        busy: dict[Device, str] = {}
        for device in sorted(devices):
            if device in self.held:
                continue
            fd, writable = _open_lease(self._path(device))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy[device] = _holder_of(fd)
                os.close(fd)
                continue
            if writable:
                os.ftruncate(fd, 0)
                os.write(fd, json.dumps({"pid": os.getpid(), "holder": self.holder}).encode())
            self.held[device] = fd
            taken.append(device)
        if busy:
            self.release(taken)
        return busy

    def acquire(self, devices: Iterable[Device], wait: bool, on_wait: Callable[[dict[Device, str]], None] | None = None,
                poll_s: float = 1.0) -> None:
        devices = list(devices)
        told = False
        while True:
            busy = self.try_acquire(devices)
            if not busy:
                return
            if not wait:
                raise DeviceBusy(describe_busy(busy) + "; wait for it with --wait, or use other devices")
            if on_wait is not None and not told:
                on_wait(busy)
                told = True
            time.sleep(poll_s)

    def release(self, devices: Iterable[Device] | None = None) -> None:
        for device in list(self.held if devices is None else devices):
            fd = self.held.pop(device, None)
            if fd is not None:
                os.close(fd)  # closing drops the lock


def _holder_of(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
        return f"pid {info.get('pid')}: {info.get('holder', '?')}"
    except (OSError, ValueError):
        return "another process"


def describe_busy(busy: dict[Device, str]) -> str:
    return "; ".join(f"device {host}:{index} is in use by {who}" for (host, index), who in sorted(busy.items()))
