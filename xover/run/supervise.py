"""Supervising processes: start a job's launchers, relay their output, notice their ends, stop them.

* A job is one launcher process (horovodrun; torchrun on one node) or one per node (torchrun on
  several hosts, each supervised here; the job's exit code is the first failing node's).
* Output is read as bytes: a worker printing bytes that are not UTF-8 costs a replacement character,
  not the relay thread. A launcher that exited while an orphan keeps its pipe open is noticed within
  `EXIT_GRACE_S`. A carriage return ends a line as a newline does (progress bars redraw one line with
  `\r` and may never print a newline), and a line longer than `MAX_LINE_BYTES` is cut: what the relay
  keeps is bounded, whatever a script prints. The log keeps every byte, but the job's secrets (its
  credential arguments, `pass_env` values, metric token: a script's error may repeat them), written as
  ***, a line at a time for that (a line's unfinished end waits in memory for the rest: MaskedOutput).
  A log that cannot be written (a full disk) is said once in the output's tail and left; the run goes on.
  A rank's line its launcher relayed in parts, another rank's line between them, is put back together
  (records.RelayedLines).
* Launchers read nothing from xover's terminal (their stdin is /dev/null): `ssh -tt` to another
  host must not put the user's terminal in raw mode or carry its Ctrl-C to a remote node.
* Launchers run in their own sessions (horovodrun puts workers in theirs too), get SIGTERM if xover
  dies (PR_SET_PDEATHSIG), and are stopped with their whole process tree. What a SIGKILLed xover
  cannot stop, its reaper (reaper.py) does.
* SIGINT and SIGTERM end a run once: the first raises Interrupted in the main thread; one that comes
  during clean-up takes effect after it, so Ctrl-C cannot cut a clean-up short.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from ..errors import Interrupted, TimedOut  # noqa: F401 - TimedOut: where run/ and tests take it from

# the sweeping of tagged processes is processes.py's; tests and tools find it here too
from ..processes import kill_tagged, stop_processes, sweep, tagged_processes  # noqa: F401
from ..records import RelayedLines, parse_metric_line
from ..redact import MASK, secret_forms
from ..stop_signals import leave_a_closed_terminal, stop_signals

EXIT_GRACE_S = 5.0  # how long a launcher's pipe may stay open after it exited (an orphan holding it)
MAX_LINE_BYTES = 65536  # of one line of a launcher's output held by the relay; a metric record is far shorter
TAIL_LINE_CHARS = 2000  # of a line kept for a failure's summary
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _die_with_parent() -> None:
    try:  # PR_SET_PDEATHSIG: SIGTERM when xover exits, even by SIGKILL
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def kill_tree(pid: int | psutil.Process, grace_s: float = 3.0, pidfd: int | None = None) -> None:
    """Stop a launcher and every process under it: Horovod puts its workers in their own sessions,
    so signalling the launcher's process group alone would leave them running.

    `pid` may be a psutil.Process taken when the launcher started, and `pidfd` a pidfd opened then:
    a pid that was reaped and given to another process since is never signalled (psutil checks the
    start time of every process it signals; the launcher itself is signalled through its pidfd)."""
    try:
        root = pid if isinstance(pid, psutil.Process) else psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return

    def signal_each(procs: list[psutil.Process], sig: int) -> None:
        for proc in procs:
            try:
                if proc is root and pidfd is not None:
                    signal.pidfd_send_signal(pidfd, sig)
                else:
                    proc.send_signal(sig)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass

    signal_each(procs, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    signal_each(alive, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=grace_s)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: psutil's start-time check alone
        return None


class LaunchedProcess:
    """One launcher process; a thread relays its output to its log and metric records to a queue."""

    def __init__(
        self, command: list[str], env: dict[str, str], log_path: Path, on_line, on_exit, secrets: Sequence[str] = ()
    ) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=25)
        self.relayed = RelayedLines(MAX_LINE_BYTES)  # its ranks' lines, where the launcher relays them
        self.on_line, self.on_exit = on_line, on_exit
        self.log_path = log_path
        self.log: BinaryIO | None = open(log_path, "ab")
        self.masked = MaskedOutput(secrets)
        # stdin: never xover's terminal (`ssh -tt` would take it over: raw mode, Ctrl-C sent to a remote node)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            cwd=os.getcwd(),
        )
        # taken before anyone can reap it: the pid is this launcher's now, perhaps another process's later
        self.pidfd = _pidfd(self.process.pid)
        self.reaped = False  # once true, its pid is never signalled again
        self._reaping = threading.Lock()
        try:
            self.root: psutil.Process | None = psutil.Process(self.process.pid)
        except psutil.NoSuchProcess:
            self.root = None
        self.reader = threading.Thread(target=self._relay, daemon=True)
        self.reader.start()

    def _relay(self) -> None:
        stream = self.process.stdout
        assert stream is not None  # piped
        pending = b""
        exited_at: float | None = None
        while True:
            ready, _, _ = select.select([stream], [], [], 0.5)
            if ready:
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                self._to_log(chunk)
                pending += chunk
                *lines, pending = _LINE_END.split(pending)
                for raw in lines:
                    self._line(raw.decode("utf-8", errors="replace"))
                while len(pending) > MAX_LINE_BYTES:  # a line that never ends: cut, not kept whole
                    self._line(pending[:MAX_LINE_BYTES].decode("utf-8", errors="replace"))
                    pending = pending[MAX_LINE_BYTES:]
            # checked whether or not output came: an orphan that keeps writing must not hide the exit
            if self.process.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > EXIT_GRACE_S:
                    break  # the launcher is gone; whoever still holds the pipe is not its output
        if pending:
            self._line(pending.decode("utf-8", errors="replace"))
        for source, text in self.relayed.rest():
            self._rank_line(source, text)
        self._to_log(b"", last=True)
        code = self.process.wait()
        with self._reaping:
            self.reaped = True
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None
        self.on_exit(self, code)

    def _to_log(self, chunk: bytes, last: bool = False) -> None:
        """Write `chunk` to the log: at once without secrets, else up to its last line's end with them as ***.
        A log that cannot be written (a full disk) is said once in the tail and closed; the run goes on."""
        if self.log is None:
            return
        chunk = self.masked.feed(chunk, last)
        try:
            if chunk:
                self.log.write(chunk)
                self.log.flush()
        except OSError as error:
            self.tail.append(f"xover: the log {self.log_path} could not be written ({error.strerror}); it stops here")
            last = True
        if last:
            with contextlib.suppress(OSError):
                self.log.close()
            self.log = None

    def _line(self, line: str) -> None:
        for source, text in self.relayed.feed(line):
            self._rank_line(source, text)

    def _rank_line(self, source: str, text: str) -> None:
        """A line as a rank wrote it (`source` the launcher's prefix for it), or the launcher's own."""
        record = parse_metric_line(text)
        if record is not None:
            self.on_line(record)
        elif text.strip():
            line = source + text
            self.tail.append(line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + " ...")

    def stop(self) -> None:
        """Stop the launcher's tree; a launcher already reaped is not signalled (its pid may be another's)."""
        with self._reaping:
            if self.root is not None and not self.reaped:
                kill_tree(self.root, pidfd=self.pidfd)


class MaskedOutput:
    """A launcher's output as its log keeps it: the job's secrets (redact.secret_forms) as ***. What may hold the
    start of a secret is held back until its line ends, or, for a line longer than MAX_LINE_BYTES, until what
    follows shows whether a secret runs on into it; without secrets, everything passes at once."""

    def __init__(self, secrets: Sequence[str]) -> None:
        self.secrets = [os.fsencode(form) for form in secret_forms(secrets)]  # longest first
        self.held = b""

    def feed(self, chunk: bytes, last: bool = False) -> bytes:
        """What of the output so far (`chunk` the newest; `last`: nothing follows) can be written, masked."""
        if not self.secrets:
            return chunk
        data, self.held = self.held + chunk, b""
        cut = len(data) if last else max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if len(data) - cut > MAX_LINE_BYTES:  # a line that does not end: cut it where no secret can be split
            cut = self._cut_outside_secrets(data, len(data) - (len(self.secrets[0]) - 1))
        self.held = data[cut:]
        written = data[:cut]
        for secret in self.secrets:
            written = written.replace(secret, MASK.encode())
        return written

    def _cut_outside_secrets(self, data: bytes, cut: int) -> int:
        """`cut`, or the start of a secret found across it (the whole secret is then held back)."""
        for secret in self.secrets:
            start = data.find(secret, max(0, cut - len(secret) + 1))
            while start != -1 and start < cut:
                if start + len(secret) > cut:
                    return self._cut_outside_secrets(data, start)
                start = data.find(secret, start + 1)
        return cut


@dataclass(frozen=True)
class JobExit:
    """A run's launchers have all ended: the first failure's exit code, or 0 (from the processes, never
    from their output)."""

    code: int


@dataclass(frozen=True)
class IgnoredLine:
    """A line of a run's output that looked like a metric record but is not one of the run's: why."""

    reason: str


class LaunchedJob:
    """The launcher processes of one run; `_exit` is posted once all have ended (the first failure's code)."""

    def __init__(
        self,
        run_id: int,
        commands: list[list[str]],
        env: dict[str, str],
        log_dir: Path,
        events: queue.Queue,
        secrets: Sequence[str] = (),
    ) -> None:
        self.run_id, self.events = run_id, events
        self.secrets = list(secrets)  # what its output may repeat and nothing it writes may keep
        self.lock = threading.Lock()
        self.codes: list[int] = []
        self.processes: list[LaunchedProcess] = []
        self.expected = len(commands)
        for index, command in enumerate(commands):
            name = "launcher.log" if len(commands) == 1 else f"launcher-node{index}.log"
            self.processes.append(LaunchedProcess(command, env, log_dir / name, self._record, self._ended, secrets))

    @property
    def tail(self) -> list[str]:
        """The last lines of every launcher's output, launcher by launcher (for a failure's message)."""
        return [line for process in self.processes for line in process.tail]

    def _record(self, record: dict[str, Any]) -> None:
        self.events.put((self.run_id, record))

    def _ended(self, process: LaunchedProcess, code: int) -> None:
        with self.lock:
            self.codes.append(code)
            done = len(self.codes) == self.expected
        if code != 0:
            for other in self.processes:  # one node failed: the job cannot go on (synchronous SGD)
                if other is not process and other.process.poll() is None:
                    threading.Thread(target=other.stop, daemon=True).start()
        if done:
            failed = [c for c in self.codes if c != 0]
            self.events.put((self.run_id, JobExit(failed[0] if failed else 0)))

    def running(self) -> bool:
        """Whether any of its launchers still runs."""
        return any(p.process.poll() is None for p in self.processes)

    def stop(self) -> None:
        """Stop every launcher of the run."""
        for process in self.processes:
            process.stop()


# ------------------------------------------------------------------------------------ signals


class _Signals:
    """What SIGINT and SIGTERM do now (main thread only; Python runs signal handlers there). A flag,
    not a signal mask: the relay threads would take a blocked signal, and Python would still run the
    handler in the main thread, in the middle of the clean-up."""

    active = False  # inside interruptible()
    raised = False  # its one Interrupted has been raised
    deferring = 0  # depth of uninterrupted() blocks
    pending: list[int] = []  # signals that arrived while deferring
    outer: dict = {}  # the handlers ours replaced, for the instants it is installed but not yet in force
    hooks: list = []  # on_interrupt(): each started in a thread the moment the run is interrupted
    last = 0  # the signal whose Interrupted was raised last
    swallowed = 0  # the signal whose Interrupted landed in a finalizer, which swallowed it: to be raised again

    @classmethod
    def interrupt(cls) -> Interrupted:
        cls.raised = True
        for hook in cls.hooks:
            threading.Thread(target=hook, daemon=True).start()
        return Interrupted()

    @classmethod
    def due(cls, signum: int) -> Interrupted | None:
        """What a signal raises inside interruptible(): the one Interrupted (later ones wait for the clean-up), or
        it again where a finalizer swallowed it (_swallowed sent the signal again: the run never saw the first)."""
        if not cls.raised:
            cls.last, cls.swallowed = signum, 0
            return cls.interrupt()
        if cls.swallowed == signum:
            cls.swallowed = 0
            return Interrupted()
        return None

    @classmethod
    def handle(cls, signum, frame) -> None:
        leave_a_closed_terminal(signum)
        if cls.deferring:
            cls.pending.append(signum)
        elif cls.active:
            if (stop := cls.due(signum)) is not None:
                raise stop
        else:  # being installed or removed: as the handler before ours would
            previous = cls.outer.get(signum, signal.SIG_DFL)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)


RAISE_AGAIN_S = 0.01  # after a finalizer swallowed the Interrupted: the main thread is past it by then


def _swallowed(unraisable: Any) -> bool:
    """Whether `unraisable` (sys.unraisablehook's) is our Interrupted, raised from the handler while the main
    thread ran a finalizer (a weakref callback of SQLAlchemy's, a __del__), where Python prints it and drops
    it: the command ran on to its end and exited 0 (docs/measurements.md, *Fresh clones at `841012f` and
    `58367ca`*). The same signal is then sent again from a thread, for the handler to raise where the run sees it
    (or, inside an uninterrupted() block, where that block ends)."""
    if not isinstance(unraisable.exc_value, Interrupted) or not _Signals.active:
        return False
    _Signals.swallowed = _Signals.last
    threading.Timer(RAISE_AGAIN_S, os.kill, (os.getpid(), _Signals.last)).start()
    return True


def _install() -> dict:
    previous = {sig: signal.signal(sig, _Signals.handle) for sig in stop_signals()}
    if any(handler is not _Signals.handle for handler in previous.values()):
        _Signals.outer = previous
    return previous


@contextlib.contextmanager
def interruptible():
    """SIGINT/SIGTERM raise Interrupted once in the main thread; later ones wait for the clean-up."""
    saved = (_Signals.active, _Signals.raised, _Signals.pending, _Signals.outer)
    previous = _install()
    _Signals.active, _Signals.raised, _Signals.pending = True, False, []
    unraisable_hook = sys.unraisablehook

    def unraisable(unraisable: Any) -> None:
        if not _swallowed(unraisable):
            unraisable_hook(unraisable)

    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = unraisable_hook
        _Signals.active, _Signals.raised, _Signals.pending = saved[:3]
        for sig, old in previous.items():
            signal.signal(sig, old)
        _Signals.outer = saved[3]


@contextlib.contextmanager
def on_interrupt(hook):
    """While inside: `hook()` starts in a thread of its own the moment SIGINT/SIGTERM interrupts the
    run (before the clean-up that Interrupted sets off), for what cannot wait for it."""
    _Signals.hooks.append(hook)
    try:
        yield
    finally:
        _Signals.hooks.remove(hook)


@contextlib.contextmanager
def uninterrupted():
    """Clean-up that Ctrl-C or SIGTERM must not cut short: a signal that comes during it takes
    effect after it (Interrupted inside interruptible() unless one was raised already; outside,
    the signal's previous handler), or not at all if the clean-up itself fails."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved_outer = _Signals.outer
    installed = _install() if not _Signals.active and not _Signals.deferring else None
    _Signals.deferring += 1
    signum = None
    try:
        yield
    finally:
        _Signals.deferring -= 1
        if not _Signals.deferring:
            signum = _Signals.pending[0] if _Signals.pending else None
            _Signals.pending = []
        if installed is not None:
            for sig, old in installed.items():
                signal.signal(sig, old)
            _Signals.outer = saved_outer
    if signum is None:
        return
    if installed is not None:
        signal.raise_signal(signum)  # as if it came now, to whoever handled it before
    elif _Signals.active and (stop := _Signals.due(signum)) is not None:
        raise stop
