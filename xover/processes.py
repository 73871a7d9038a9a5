"""Processes xover started, found by their tag and stopped: here, and on other hosts through ssh.

A tag is a variable in a process's environment (XOVER_EXPERIMENT=<id>, XOVER_RUN, XOVER_TURN_SERVER):
every launcher, worker and turn server of a run carries its experiment's, so that a reaper, a
timeout or a hung turn server's stop finds them all, in any namespace, without their pids.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

from .config import xover_pythonpath
from .hosts import command_on
from .settings import EXPERIMENT_VARIABLE, KEPT_PREFIX


def tagged_processes(value: str, variable: str = EXPERIMENT_VARIABLE) -> list[int]:
    """Pids whose environment carries <variable>=<value> (this user's processes, in any namespace)."""
    return list(_tagged(value, variable))


def _tagged(value: str, variable: str) -> dict[int, str]:
    """pid -> start time (clock ticks after boot) of each process tagged <variable>=<value>: a pid
    with its start time names one process, even after the pid is used again."""
    needle = f"{variable}={value}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        started = start_time(pid)
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                tagged = needle in handle.read().split(b"\0")
        except OSError:
            continue  # gone, or another user's
        if tagged and started is not None and start_time(pid) == started:  # the same process throughout
            found[pid] = started
    return found


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class _Target:
    """One process to stop, named so that a signal never reaches another process that was given its
    pid after it ended: by a pidfd where the kernel has them (Linux >= 5.3), else by its start time,
    checked before every signal."""

    started: str | None  # None once its pid is known to be reused

    def __init__(self, pid: int, started: str) -> None:
        self.pid, self.started, self.fd = pid, started, None
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return
        if start_time(pid) == started:  # the pidfd is of the process that was scanned
            self.fd = fd
        else:
            os.close(fd)
            self.started = None  # already gone and its pid reused: never to be signalled

    def same(self) -> bool:
        return self.started is not None and start_time(self.pid) == self.started

    def signal(self, sig: int) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self.same():
                os.kill(self.pid, sig)
        except (ProcessLookupError, OSError):
            pass  # ended (a zombie's pidfd answers ESRCH)

    def alive(self) -> bool:
        return self.same() and _alive(self.pid)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def stop_processes(found: dict[int, str], grace_s: float = 3.0) -> list[int]:
    """TERM, then KILL after `grace_s` what is still running, of the processes `found` names (pid ->
    start time, as `_tagged` gives): a process that ended after TERM is not KILLed, and neither is
    another that has been given its pid since. Returns the pids signalled."""
    targets = [_Target(pid, started) for pid, started in found.items()]
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for target in targets:
                if target.alive():
                    target.signal(sig)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(target.alive() for target in targets):
                time.sleep(0.1)
    finally:
        for target in targets:
            target.close()
    return sorted(found)


def kill_tagged(*values: str, grace_s: float = 3.0, variable: str = EXPERIMENT_VARIABLE) -> int:
    """Stop every process tagged <variable>=<value>, for each of `values`: TERM, then KILL after `grace_s`
    those still running (the same processes: a pid given to another process meanwhile is left alone). One
    grace for them all. Returns how many were found."""
    found = {pid: started for value in values for pid, started in _tagged(value, variable).items()}
    return len(stop_processes(found, grace_s))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def remove_sent(names: Sequence[str]) -> None:
    """On the host the files were sent to: remove those of `names` (kept_name's, in this host's temporary
    folder) still there: no node read them. Anything else is left alone: a name that is not one, a link, a file
    of another user's."""
    folder = tempfile.gettempdir()
    for name in names:
        if not name.startswith(KEPT_PREFIX) or "/" in name or name in (".", ".."):
            continue
        path = os.path.join(folder, name)
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.unlink(path)
        except OSError:
            pass  # read (and removed) by its node, or never made


def kill_command_on(
    host: str, variable: str, values: Sequence[str], remote_prefix: list[str], remove: Sequence[str] = ()
) -> list[str]:
    """The command that stops the processes tagged <variable>=<value>, for each of `values`, on another host,
    from here: the reaper's --kill there, over ssh (behind `remote_prefix`, how this machine reaches the host);
    then it removes the files of settings named in `remove` that are still there (remove_sent)."""
    kills = [part for value in values for part in ("--kill", value)]
    kills += [part for name in remove for part in ("--remove-sent", name)]
    reaper = [sys.executable, "-m", "xover.run.reaper", *kills, "--variable", variable]
    return command_on(host, reaper, remote_prefix=remote_prefix, env={"PYTHONPATH": xover_pythonpath()})


def sweep_hosts_now(
    variable: str, value: str, hosts: list[str], remote_prefix: list[str], timeout_s: float = 15.0
) -> None:
    """Stop the processes tagged <variable>=<value> on every one of `hosts` at once (one ssh each, in
    parallel, each at most `timeout_s`): for an end that has little time, as inside a Slurm job whose
    KillWait ends in SIGKILL, after which nothing would stop what runs on the other nodes."""
    _kill_on_hosts(variable, [value], hosts, remote_prefix, timeout_s)


def sweep(
    variable: str,
    values: Sequence[str],
    hosts: list[str],
    remote_prefix: list[str],
    remove: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Stop the processes tagged <variable>=<value>, for each of `values`, here and on `hosts` (through ssh,
    as launchers do): one ssh per host, the hosts at once - a unit's teardown waits on it before the next
    unit starts on its devices. `remove`: host -> names of files of settings sent there that the same ssh
    call removes, once the processes are stopped, where no node read them (torchrun.take_sent)."""
    kill_tagged(*values, variable=variable)
    _kill_on_hosts(variable, values, hosts, remote_prefix, timeout_s=60.0, remove=remove)


def _kill_on_hosts(
    variable: str,
    values: Sequence[str],
    hosts: list[str],
    remote_prefix: list[str],
    timeout_s: float,
    remove: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """The reaper's --kill of `values` on each host (and its --remove-sent of `remove`'s names for that host),
    over ssh, all hosts in parallel, each at most `timeout_s`."""
    import threading

    def one(host: str) -> None:
        try:
            subprocess.run(
                kill_command_on(host, variable, values, remote_prefix, (remove or {}).get(host, ())),
                timeout=timeout_s,
                capture_output=True,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            pass

    threads = [threading.Thread(target=one, args=(host,), daemon=True) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 1)
