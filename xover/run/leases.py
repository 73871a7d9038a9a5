"""Device leases: two `xover` invocations never share a device without knowing it.

A run holds an exclusive lock on a file per device it uses (`<dir>/xover-lease-<host>-<index>.lock`)
while its jobs run there. The lock is the kernel's (flock): it dies with the process that holds it, so
a killed xover leaves no stale lease. The file says who holds it, for the message the next one prints.
Hosts of an emulated cluster share this machine's filesystem, so their devices are leased here too.

Leases are shared by every user of the machine (a device is a device), so the folder is one every
user may write and nobody may take over: /tmp itself (root's, sticky) unless XOVER_LEASE_DIR names
another. A folder is used only when it is this user's own, or root's and sticky (or writable by
root alone): the owner of a folder may delete or replace anyone's files in it. In it, whoever
leases a device first creates its file (O_EXCL, writable by everyone); later runs open it without
following a link and use only a regular file with one name, and write who holds it only into a file
that is writable by everyone and holds a lease record or nothing: another user cannot point a lease
name at a victim's file and have xover rewrite it. Whatever is wrong with the folder or a file is
one XoverError saying what to do (docs/security.md).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import stat
import time
from collections.abc import Callable, Iterable

from ..errors import TimedOut, XoverError
from ..launch.hosts import Device
from ..redact import mask_credentials
from ..settings import settings

LEASE_DIR = "/tmp"  # root's and sticky: shared by every user of the machine, nobody's to take over
LEASE_PREFIX = "xover-lease-"
RECORD_BYTES = 4096  # a lease record is far shorter; a longer file is not one of ours
HOLDER_CHARS = 200  # of the holder's description shown to others
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_WHAT_TO_DO = ("set XOVER_LEASE_DIR to a folder of your own (then only runs that use the same folder see "
               "your leases) or to one root made with mode 1777, as /tmp")


class DeviceBusy(XoverError):
    pass


def lease_dir() -> str:
    """The lease folder (XOVER_LEASE_DIR, else /tmp); a missing XOVER_LEASE_DIR is created (the
    user's own; by root: root's and sticky, for every user)."""
    path = settings().lease_dir or LEASE_DIR
    if not os.path.isdir(path):
        try:
            os.makedirs(path)
            if os.geteuid() == 0:
                _open_to_everyone(path)
        except FileExistsError:
            pass
        except OSError as error:
            raise XoverError(f"cannot create the device lease folder {path}: {error.strerror}; {_WHAT_TO_DO}") from None
    return path


def _open_to_everyone(path: str) -> None:
    """Root's new lease folder made sticky and writable by all (anyone may lease, nobody may take
    another's file): through a descriptor of the folder itself, opened without following a link, so
    that a name swapped for a link under a parent others may write changes nothing but that name."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise XoverError(f"the device lease folder {path} that xover just created belongs to someone else now; "
                             f"{_WHAT_TO_DO}")
        os.fchmod(fd, 0o1777)
    finally:
        os.close(fd)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _open_folder(path: str) -> int:
    """The folder, opened once (files are opened relative to it), if it is one this user may trust."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise XoverError(f"cannot open the device lease folder {path}: {error.strerror}; {_WHAT_TO_DO}") from None
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == os.geteuid() or (info.st_uid == 0 and (mode & stat.S_ISVTX or not mode & 0o022)):
        return fd
    os.close(fd)
    shared = "writable by others without the sticky bit" if info.st_uid == 0 else f"owned by {_owner(info.st_uid)}"
    raise XoverError(f"the device lease folder {path} is {shared}, who could replace anyone's leases in it; "
                     f"{_WHAT_TO_DO}")


def _is_lease_record(fd: int) -> bool:
    """Empty, or a lease record as xover writes it: a file xover may rewrite."""
    data = os.pread(fd, RECORD_BYTES + 1, 0)
    if not data:
        return True
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError):  # "[" * 4096: too deep for the parser
        return False
    return len(data) <= RECORD_BYTES and isinstance(record, dict) and set(record) <= {"pid", "holder"}


def _open_lease(folder: int, name: str, shown: str) -> tuple[int, bool]:
    """The lease file `name` in the folder, and whether xover may write who holds it. Created when
    missing (O_EXCL, writable by everyone: the umask would leave it to its creator alone); opened as it
    is otherwise (an O_CREAT open of another user's file in a sticky folder is refused where
    fs.protected_regular is on), read-only where only its creator may write it (flock works on any
    descriptor). Never through a link, never anything but a regular file with this one name."""
    for _ in range(10):  # another xover may create or remove it between two of these steps
        created = False
        try:
            fd, writable = os.open(name, os.O_RDWR | _FLAGS, dir_fd=folder), True
        except FileNotFoundError:
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=folder)
            except FileExistsError:
                continue
            except OSError as error:
                raise XoverError(f"cannot create the device lease {shown}: {error.strerror}; {_WHAT_TO_DO}") from None
            created = writable = True
        except PermissionError:
            try:
                fd, writable = os.open(name, os.O_RDONLY | _FLAGS, dir_fd=folder), False
            except FileNotFoundError:
                continue
            except OSError as error:
                raise _refused(shown, error) from None
        except OSError as error:
            raise _refused(shown, error) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise _not_a_lease(shown)
        if created:
            os.fchmod(fd, 0o666)
        elif writable:  # only what is writable by everyone anyway and holds a lease of ours (or nothing)
            writable = stat.S_IMODE(info.st_mode) & 0o666 == 0o666 and _is_lease_record(fd)
        return fd, writable
    raise XoverError(f"the device lease {shown} keeps appearing and disappearing; is another program "
                     f"removing it? {_WHAT_TO_DO}")


def _not_a_lease(shown: str) -> XoverError:
    return XoverError(f"the device lease {shown} is not a plain file (a link, or a special file): xover will not "
                      f"use it; remove it (whoever made it may mean harm), or {_WHAT_TO_DO}")


def _refused(shown: str, error: OSError) -> XoverError:
    if error.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.ENODEV, errno.ETXTBSY, errno.EISDIR):
        return _not_a_lease(shown)  # O_NOFOLLOW on a link; a socket, a folder, a device
    return XoverError(f"cannot open the device lease {shown}: {error.strerror}; {_WHAT_TO_DO}")


class DeviceLeases:
    """The leases one xover process holds, by device."""

    def __init__(self, holder: str) -> None:
        # e.g. "experiment X (xover run ...)", in a file every user can read: never a password (--db URL)
        self.holder = mask_credentials(holder)
        self.held: dict[Device, int] = {}

    @staticmethod
    def _name(device: Device) -> str:
        host, index = device
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in host)
        return f"{LEASE_PREFIX}{safe}-{index}.lock"

    def _path(self, device: Device) -> str:
        return os.path.join(lease_dir(), self._name(device))

    def try_acquire(self, devices: Iterable[Device]) -> dict[Device, str]:
        """Lease every device or none; returns who holds the busy ones (empty when all were leased)."""
        taken: list[Device] = []
        busy: dict[Device, str] = {}
        path = lease_dir()
        folder = _open_folder(path)
        try:
            for device in sorted(devices):
                if device in self.held:
                    continue
                try:
                    fd, writable = _open_lease(folder, self._name(device), os.path.join(path, self._name(device)))
                except XoverError:
                    self.release(taken)
                    raise
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    busy[device] = _holder_of(fd)
                    os.close(fd)
                    continue
                if writable:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, json.dumps({"pid": os.getpid(), "holder": self.holder}).encode()[:RECORD_BYTES], 0)
                self.held[device] = fd
                taken.append(device)
        finally:
            os.close(folder)
        if busy:
            self.release(taken)
        return busy

    def acquire(self, devices: Iterable[Device], wait: bool, on_wait: Callable[[dict[Device, str]], None] | None = None,
                poll_s: float = 1.0, deadline: float | None = None) -> None:
        """Lease every device; with `wait`, until they are free, or until `deadline` (time.monotonic(),
        the run's --timeout), which raises TimedOut."""
        devices = list(devices)
        told = False
        while True:
            busy = self.try_acquire(devices)
            if not busy:
                return
            if not wait:
                raise DeviceBusy(describe_busy(busy) + "; wait for it with --wait, or use other devices")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut()
            if on_wait is not None and not told:
                on_wait(busy)
                told = True
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))

    def release(self, devices: Iterable[Device] | None = None) -> None:
        for device in list(self.held if devices is None else devices):
            fd = self.held.pop(device, None)
            if fd is not None:
                os.close(fd)  # closing drops the lock


def _printable(text: object) -> str:
    """Another user's words, as text on one line: no escape sequences for the terminal."""
    shown = "".join(c if c.isprintable() else " " for c in str(text))
    return shown[:HOLDER_CHARS] + ("..." if len(shown) > HOLDER_CHARS else "")


def _holder_of(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, RECORD_BYTES, 0).decode() or "{}")
        if not isinstance(info, dict):
            return "another process"
        pid = info.get("pid")
        return f"pid {pid if isinstance(pid, int) else '?'}: {_printable(info.get('holder', '?'))}"
    except (OSError, ValueError, RecursionError):
        return "another process"


def describe_busy(busy: dict[Device, str]) -> str:
    return "; ".join(f"device {host}:{index} is in use by {who}" for (host, index), who in sorted(busy.items()))
