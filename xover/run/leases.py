"""Device leases: two `xover` invocations never share a device without knowing it.

A run holds an exclusive lock on a file per device it uses (`<dir>/xover-lease-<host>-<device>.lock`: this
machine's devices named by their core or GPU, DeviceLeases._name) while its jobs run there. The lock is the
kernel's (flock): it dies with the process that holds it, so a killed xover leaves no stale lease. The file says
who holds it, for the message the next one prints.
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

import argparse
import contextlib
import errno
import fcntl
import json
import os
import pwd
import select
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from ..console import print_notice
from ..devices import index_before_physical, physical_device, shared_gpu
from ..errors import TimedOut, XoverError
from ..hosts import LOCAL, Device, command_on, is_local
from ..redact import mask_credentials, mask_word
from ..settings import LEASE_DIR_VARIABLE, settings
from .reach import is_emulated_host

LEASE_DIR = "/tmp"  # root's and sticky: shared by every user of the machine, nobody's to take over
LEASE_PREFIX = "xover-lease-"
RECORD_BYTES = 4096  # a lease record is far shorter; a longer file is not one of ours
WAIT_SAID_EVERY_S = 300.0  # how often a wait for devices says it still waits, and for whom
HOLDER_CHARS = 200  # of the holder's description shown to others
_SHARES_HOLD_IT = "runs holding shares of it (XOVER_DEVICES_PER_GPU)"
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_WHAT_TO_DO = (
    "set XOVER_LEASE_DIR to a folder of your own (then only runs that use the same folder see "
    "your leases) or to one root made with mode 1777, as /tmp"
)


class DeviceBusy(XoverError):
    """A device another run holds, and --wait was not given: who holds it."""

    pass


def _lease_dir_named() -> str:
    """The lease folder's name (XOVER_LEASE_DIR, else /tmp), as given: a URL refused."""
    path = settings().lease_dir or LEASE_DIR
    if "://" in path:  # a URL (a store's, pasted into the wrong variable) would be made as folders, password and all
        raise XoverError(
            f"{LEASE_DIR_VARIABLE}={mask_word(path)}: a URL, not a folder: name the folder runs lease devices in, "
            f"or unset it for {LEASE_DIR}"
        )
    return path


def lease_dir() -> str:
    """The lease folder (XOVER_LEASE_DIR, else /tmp); a missing XOVER_LEASE_DIR is created (the
    user's own; by root: root's and sticky, for every user)."""
    path = _lease_dir_named()
    if not os.path.isdir(path):
        try:
            os.makedirs(path)
            if os.geteuid() == 0:
                _open_to_everyone(path)
        except FileExistsError:
            pass
        except OSError as error:
            raise XoverError(f"cannot create the device lease folder {path}: {error.strerror}; {_WHAT_TO_DO}") from None
        else:
            # said: a mistyped folder is a new one, and runs leasing in /tmp or the folder meant never see these
            print_notice(
                f"warning: {LEASE_DIR_VARIABLE}={path} did not exist and was created: only runs with the same "
                f"{LEASE_DIR_VARIABLE} see the devices this run leases"
            )
    return path


def _open_to_everyone(path: str) -> None:
    """Root's new lease folder made sticky and writable by all (anyone may lease, nobody may take
    another's file): through a descriptor of the folder itself, opened without following a link, so
    that a name swapped for a link under a parent others may write changes nothing but that name."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise XoverError(
                f"the device lease folder {path} that xover just created belongs to someone else now; {_WHAT_TO_DO}"
            )
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
    raise XoverError(
        f"the device lease folder {path} is {shared}, who could replace anyone's leases in it; {_WHAT_TO_DO}"
    )


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
    raise XoverError(
        f"the device lease {shown} keeps appearing and disappearing; is another program removing it? {_WHAT_TO_DO}"
    )


def _not_a_lease(shown: str) -> XoverError:
    return XoverError(
        f"the device lease {shown} is not a plain file (a link, or a special file): xover will not "
        f"use it; remove it (whoever made it may mean harm), or {_WHAT_TO_DO}"
    )


def _refused(shown: str, error: OSError) -> XoverError:
    if error.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.ENODEV, errno.ETXTBSY, errno.EISDIR):
        return _not_a_lease(shown)  # O_NOFOLLOW on a link; a socket, a folder, a device
    return XoverError(f"cannot open the device lease {shown}: {error.strerror}; {_WHAT_TO_DO}")


REMOTE_ANSWER_S = 60.0  # for another host's answer over ssh (its ConnectTimeout is 20 s)


def _held_here(host: str) -> bool:
    """Are `host`'s devices leased in this machine's lease folder? Its own, and an emulated cluster's
    (namespaces of this machine, sharing its /tmp). Any other host's are leased on that host."""
    return is_local(host) or is_emulated_host(host)


class RemoteLeases:
    """Leases of another host's devices, held on that host, where its own runs and every other login
    node's lease them too: `python -m xover.run.leases` there (over ssh, the way xover reaches the
    host for everything else) leases them as that host's own (`localhost`), says so, and holds them
    until its stdin ends (this xover, or its ssh, is gone). So `-H n1` and `-H n1.cluster`, or two login
    nodes, lease the same files."""

    def __init__(self, host: str, indices: list[int], holder: str, deadline: float | None = None) -> None:
        self.host = host
        self.process = subprocess.Popen(
            command_on(host, [sys.executable, "-m", "xover.run.leases", *map(str, indices)], here=True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        answer: dict = {}
        assert self.process.stdin is not None and self.process.stdout is not None  # piped
        try:
            self.process.stdin.write(json.dumps({"holder": holder}) + "\n")  # not on a command line
            self.process.stdin.flush()
            wait_s = (
                REMOTE_ANSWER_S if deadline is None else max(0.0, min(REMOTE_ANSWER_S, deadline - time.monotonic()))
            )
            ready, _, _ = select.select([self.process.stdout], [], [], wait_s)
            line = self.process.stdout.readline() if ready else ""
            answer = json.loads(line) if line.strip() else {}
        except (OSError, ValueError):
            answer = {}
        if not isinstance(answer, dict) or not ("held" in answer or "busy" in answer):
            self.release()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut()
            why = (
                answer.get("error")
                if isinstance(answer, dict) and isinstance(answer.get("error"), str)
                else (self._stderr_tail() or "no answer")
            )
            raise XoverError(
                f"cannot lease the devices of {host} on {host}: {_printable(why)}; "
                f"check that `ssh {host} true` answers without a prompt"
            )
        self.busy = {
            (host, int(index)): _printable(who)
            for index, who in (answer.get("busy") or {}).items()
            if str(index).isdigit()
        }

    def _stderr_tail(self) -> str:
        try:
            _, error = self.process.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            return ""
        return (error or "").strip().splitlines()[-1] if (error or "").strip() else ""

    def release(self) -> None:
        """Its stdin ends: the holder there lets the leases go and exits."""
        if self.process.poll() is None:
            assert self.process.stdin is not None  # piped
            try:
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class DeviceLeases:
    """The leases one xover process holds, by device."""

    def __init__(self, holder: str) -> None:
        # e.g. "experiment X (xover run ...)", in a file every user can read: never a password (--db URL)
        self.holder = mask_credentials(holder)
        self.held: dict[Device, tuple[str, ...]] = {}  # device -> its leases' names (two devices on one core share)
        self.files: dict[str, int] = {}  # a held lease's name -> its file, locked
        self.written: set[str] = set()  # held leases whose file names this holder
        self.remote: dict[str, RemoteLeases] = {}  # another host -> what holds its leases there

    @staticmethod
    def _name(device: Device) -> str:
        """A device's lease file. This machine's, under any of its names, is named by what the device is on the
        machine (its GPU, or its core: devices.physical_device), not by its index among what this process was
        shown: a run under `taskset -c 1` or CUDA_VISIBLE_DEVICES=1 leases the core or GPU that another run
        calls its device 1. Another host's is named by index: its own leases there say what it is (main)."""
        host, index = device
        return _lease_name(f"{LOCAL}-{physical_device(index)}" if is_local(host) else f"{host}-{index}")

    @classmethod
    def _names(cls, device: Device) -> tuple[tuple[str, bool], ...]:
        """Every lease file a device takes, and whether it holds it alone (else shared): its own (_name), alone;
        on this machine, a share of a GPU (XOVER_DEVICES_PER_GPU) the whole GPU's too, shared, and the name an xover
        from before 2026-12-08 gave it (by index: an older run on all of the machine calls core or GPU N its device
        N), alone, so that runs of either kind see each other's."""
        host, index = device
        names = [(cls._name(device), True)]
        if is_local(host):
            if (gpu := shared_gpu(index)) is not None:
                names.append((_lease_name(f"{LOCAL}-{gpu}"), False))
            if (before := index_before_physical(index)) is not None:
                names.append((_lease_name(f"{LOCAL}-{before}"), True))
        return tuple(names)

    def _path(self, device: Device) -> str:
        return os.path.join(lease_dir(), self._name(device))

    def try_acquire(self, devices: Iterable[Device]) -> dict[Device, str]:
        """Lease every device or none; returns who holds the busy ones (empty when all were leased)."""
        taken: list[Device] = []
        busy: dict[Device, str] = {}
        devices = set(devices)
        elsewhere: dict[str, list[int]] = {}
        for host, index in sorted(devices):
            if not _held_here(host):
                elsewhere.setdefault(host, []).append(index)
        devices -= {(host, index) for host, indices in elsewhere.items() for index in indices}
        for host, indices in elsewhere.items():
            if host in self.remote:
                continue
            try:
                remote = RemoteLeases(host, indices, self.holder)
            except XoverError:
                self.release(taken)
                raise
            if remote.busy:
                remote.release()
                busy.update(remote.busy)
                continue
            self.remote[host] = remote
            taken += [(host, index) for index in indices]
        if busy:
            self.release(taken)
            return busy
        path = lease_dir()
        folder = _open_folder(path)
        try:
            for device in sorted(devices):
                if device in self.held:
                    continue
                names = self._names(device)
                self.held[device] = ()  # its leases so far: released with it where one is busy
                taken.append(device)
                for name, alone in names:
                    if name not in self.files:  # else another device of this run on the same core holds it
                        try:
                            fd, writable = _open_lease(folder, name, os.path.join(path, name))
                        except XoverError:
                            self.release(taken)
                            raise
                        try:
                            fcntl.flock(fd, (fcntl.LOCK_EX if alone else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                        except BlockingIOError:
                            busy[device] = _busy_with(fd, name)
                            os.close(fd)
                            break
                        if writable and alone:
                            os.ftruncate(fd, 0)
                            record = json.dumps({"pid": os.getpid(), "holder": self.holder}).encode()[:RECORD_BYTES]
                            os.pwrite(fd, record, 0)
                            self.written.add(name)
                        self.files[name] = fd
                    self.held[device] += (name,)
        finally:
            os.close(folder)
        if busy:
            self.release(taken)
        return busy

    def acquire(
        self,
        devices: Iterable[Device],
        wait: bool,
        on_wait: Callable[[dict[Device, str], float], None] | None = None,
        poll_s: float = 1.0,
        deadline: float | None = None,
        instead: Sequence[Iterable[Device]] = (),
    ) -> int:
        """Lease every device; with `wait`, until they are free, or until `deadline` (time.monotonic(),
        the run's --timeout), which raises TimedOut. `on_wait(busy, waited_s)`: as the wait begins, then every
        WAIT_SAID_EVERY_S. `instead`: other sets of devices the run may take where
        `devices` are busy, tried in their order. Returns which set it leased: 0 for `devices`, i for instead[i - 1]."""
        choices = [list(devices), *(list(other) for other in instead)]
        started, told = time.monotonic(), None
        while True:
            busy = self.try_acquire(choices[0])
            if not busy:
                return 0
            for index, other in enumerate(choices[1:], start=1):
                busy_there = self.try_acquire(other)
                if not busy_there:
                    return index
                busy.update(busy_there)  # named too: the run would have taken them
            if not wait:
                raise DeviceBusy(describe_busy(busy) + "; wait for it with --wait")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut()
            if on_wait is not None and (told is None or time.monotonic() - told >= WAIT_SAID_EVERY_S):
                # once as it begins, then now and then: a wait of hours is not one line of its first second
                on_wait(busy, 0.0 if told is None else time.monotonic() - started)
                told = time.monotonic()
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))

    def release(self, devices: Iterable[Device] | None = None) -> None:
        """Give leases up: `devices` (a remote host's all at once, as they were taken), or every one held."""
        devices = list(self.held if devices is None else devices) + (
            [(host, -1) for host in self.remote] if devices is None else []
        )
        for device in devices:
            names = self.held.pop(device, ())
            still = {name for others in self.held.values() for name in others}  # another device of the run's
            for name in names:
                if name in still or name not in self.files:
                    continue
                fd = self.files.pop(name)
                if name in self.written:  # the holder's command is not left for every user to read
                    self.written.discard(name)
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, 0)
                os.close(fd)  # closing drops the lock
            remote = self.remote.pop(device[0], None)
            if remote is not None:
                remote.release()  # every device of that host: they were leased together


def _lease_name(device: str) -> str:
    return LEASE_PREFIX + "".join(c if c.isalnum() or c in "-._" else "_" for c in device) + ".lock"


def _printable(text: object) -> str:
    """Another user's words, as text on one line: no escape sequences for the terminal."""
    shown = "".join(c if c.isprintable() else " " for c in str(text))
    return shown[:HOLDER_CHARS] + ("..." if len(shown) > HOLDER_CHARS else "")


def _busy_with(fd: int, name: str) -> str:
    """Who holds a lease this process could not take: its record, or, for a GPU's whole name held by none alone, the
    runs holding shares of it (they hold it shared and write no record: which one's would it be)."""
    try:
        recorded = bool(os.pread(fd, 1, 0))
    except OSError:
        recorded = True
    whole_gpu = name.startswith(_lease_name(f"{LOCAL}-gpu-").removesuffix(".lock"))
    return _SHARES_HOLD_IT if whole_gpu and not recorded else _holder_of(fd)


def _holder_of(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, RECORD_BYTES, 0).decode() or "{}")
        if not isinstance(info, dict):
            return "another process"
        pid = info.get("pid")
        return f"pid {pid if isinstance(pid, int) else '?'}: {_printable(info.get('holder', '?'))}"
    except (OSError, ValueError, RecursionError):
        return "another process"


def main(argv: list[str] | None = None) -> int:
    """On a host whose devices another machine's xover uses: lease them here as this host's own, say
    so on stdout (one JSON line: held, busy or error), hold them until stdin ends. The holder's text
    comes as the first line of stdin, not on the command line."""
    parser = argparse.ArgumentParser(description="hold this host's device leases for a run on another machine")
    parser.add_argument("index", type=int, nargs="+")
    args = parser.parse_args(argv)
    try:
        first = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        first = {}
    given = first.get("holder") if isinstance(first, dict) else None
    holder = given if isinstance(given, str) else "?"
    leases = DeviceLeases(holder)
    try:
        busy = leases.try_acquire([(LOCAL, index) for index in args.index])
    except XoverError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        return 2
    if busy:
        print(json.dumps({"busy": {str(index): who for (_, index), who in busy.items()}}), flush=True)
        return 0
    print(json.dumps({"held": args.index}), flush=True)
    try:
        sys.stdin.read()  # until the run on the other machine (or its ssh) is gone
    finally:
        leases.release()
    return 0


def held_here(count: int) -> dict[str, str]:
    """Which of this machine's devices a run holds now, and who: this process's devices 0..count-1 as a refusal
    names them (`localhost:0 (core 0)`), then the machine's others it is not shown (another run's `taskset`), then
    those an xover from before 2026-12-08 leased by index alone. Each lease file's lock is found in the kernel's
    table (/proc/locks), taking none (a check must not have a run that starts meanwhile find its device busy), nor
    making the lease folder. Empty where the table or the folder cannot be read."""
    path = _lease_dir_named()
    try:
        with open("/proc/locks") as table:
            # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF": the file as device major:minor (hex) and inode
            locked = {fields[5] for fields in map(str.split, table) if "FLOCK" in fields[:2] and len(fields) > 5}
        names = sorted(os.listdir(path))
    except OSError:
        return {}
    ours = {DeviceLeases._name((LOCAL, index)): index for index in reversed(range(count))}  # a shared core: the first
    prefix, suffix = _lease_name(f"{LOCAL}-").removesuffix(".lock"), ".lock"
    found: list[tuple[tuple[int, int, str], str, str]] = []  # (order, shown, who)
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        who = _holder_if_locked(path, name, locked)
        device = name[len(prefix) : -len(suffix)]
        if who is None:
            continue
        if device.isdigit():
            found.append(((2, int(device), ""), f"device {device} of an xover from before 2026-12-08", who))
        elif name in ours:
            found.append(((0, ours[name], ""), f"localhost:{ours[name]} ({_shown(device)})", who))
        else:
            found.append(((1, 0, device), f"{_shown(device)}, not among this process's devices", who))
    physical = {who for (kind, *_), _, who in found if kind < 2}
    # a run of today's holds an older xover's name beside its own (DeviceLeases._names): shown once, as its own
    return {shown: who for order, shown, who in sorted(found) if order[0] < 2 or who not in physical}


def _holder_if_locked(path: str, name: str, locked: set[str]) -> str | None:
    try:
        fd = os.open(os.path.join(path, name), os.O_RDONLY | _FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        held = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}" in locked
        return _holder_of(fd) if held and stat.S_ISREG(info.st_mode) else None
    finally:
        os.close(fd)


def describe_busy(busy: dict[Device, str]) -> str:
    """The busy devices and who holds each, one line; this machine's with what each is on it (the core, the GPU),
    since another run may call it by another index."""
    return "; ".join(f"device {device_shown(device)} is in use by {who}" for device, who in sorted(busy.items()))


def device_shown(device: Device) -> str:
    """`localhost:1 (core 1)`: this machine's device with what it is on it (another run may give it another index),
    another host's by its index."""
    host, index = device
    return f"{host}:{index}" + (f" ({_shown(physical_device(index))})" if is_local(host) else "")


def _shown(device: str) -> str:
    """A device as a lease names it (devices.physical_name), in words: `core 3`, `GPU GPU-...`."""
    if device.startswith("core"):
        return "core " + device.removeprefix("core")
    return "GPU " + device.removeprefix("gpu-") if device.startswith("gpu-") else device


if __name__ == "__main__":
    sys.exit(main())
