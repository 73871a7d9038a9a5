"""stdout and stderr as the command line needs them: one the shell closed (`>&-`), on a full device
(`> /dev/full`) or read by a reader that left (`| head`) ends every command the same way, never with a traceback;
a summary of work already kept that a closed or full stdout cannot take is a warning (summary_of_kept).
Its own module, of the standard library only: `python -m xover` sets the streams up before the commands load."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from typing import Any

BROKEN_PIPE = 141  # 128 + SIGPIPE: the exit a shell shows for a program its pipe's reader left (`yes | head -1`)
NOT_WRITTEN = 2  # as any failure the user can fix (errors.XoverError)


class OutputFailed(BaseException):
    """A write to stdout or stderr failed. A BaseException, as KeyboardInterrupt is: no `except OSError` around a
    file's write, nor `except Exception` around a metric sink, takes it for its own; the command ends with it."""

    def __init__(self, stream: str, error: OSError) -> None:
        super().__init__(stream, error)
        self.stream = stream
        self.error = error


class _Closed(io.TextIOBase):
    """stdout where the shell closed it: each write fails as a write to a closed descriptor does."""

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1  # /dev/null (guard_streams): a process started with this stdout writes nowhere, as with none

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")


class _Guarded:
    """`stream`, its failed writes raised as OutputFailed naming it: stdout's, the command's output. stderr's
    are dropped, the descriptor made /dev/null: the notes of a command (a warning, a library's log line, a
    progress bar) going nowhere never stop what it does."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            return self._failed(error) or len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            self._failed(error)

    def _failed(self, error: OSError) -> int:
        if self._name == "stdout":
            raise OutputFailed(self._name, error) from None
        to_null(2)
        with contextlib.suppress(OSError, ValueError):  # what was buffered for it goes nowhere too
            self._stream.flush()
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def to_null(descriptor: int) -> None:
    """`descriptor` made /dev/null: a process started later inherits no closed descriptor (the first file
    opened would take its number, and a script's prints would land in it), and what is still buffered for it
    goes nowhere."""
    null = os.open(os.devnull, os.O_WRONLY)  # the lowest free number: `descriptor` itself where it was closed
    if null != descriptor:
        os.dup2(null, descriptor)
        os.close(null)


def guard_streams() -> None:
    """stdout and stderr as the command line writes them: a closed stdout fails each write (the command's output
    is lost: it says so); a closed stderr, or one whose writes fail, takes and drops what it is given (a command
    works without its notes)."""
    if sys.stdout is None:
        to_null(1)
        sys.stdout = _Closed()
    if sys.stderr is None:
        to_null(2)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (for the process's life)
    sys.stdout = _Guarded(sys.stdout, "stdout")
    sys.stderr = _Guarded(sys.stderr, "stderr")


@contextlib.contextmanager
def output_written() -> Iterator[None]:
    """Runs a command whose output cannot be written to an end: a reader that left (EPIPE) quietly, exit
    BROKEN_PIPE; any other failure (a full device, a closed stdout) with one line on stderr, exit NOT_WRITTEN.
    What is still buffered is written before the end: a failure at the interpreter's exit was a traceback."""
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    except OutputFailed as failed:
        to_null(1 if failed.stream == "stdout" else 2)
        if failed.error.errno == errno.EPIPE:
            sys.exit(BROKEN_PIPE)
        with contextlib.suppress(OutputFailed):  # stderr may be what failed: then there is no one to tell
            sys.stderr.write(f"error: cannot write to {failed.stream}: {failed.error.strerror or failed.error}\n")
            sys.stderr.flush()
        sys.exit(NOT_WRITTEN)


@contextlib.contextmanager
def summary_of_kept(kept: str, *, is_result: bool = False) -> Iterator[None]:
    """Around the printing of a summary of what a command has already kept (a plan file written, a run stored, a
    report's files written): stdout that cannot take it (closed, `>&-`; a full device) is said once on stderr,
    `warning: the summary was not shown (cannot write to stdout: it is closed); KEPT`, what else the command
    prints goes nowhere, and the command ends as it would have (exit 0; a run's 1 for a job that did not finish):
    its work is done, and exit 2 said it was not. `is_result`: the output is the result itself (--json, a report
    on stdout), and its failure ends the command with exit 2 (output_written), as does a reader that left, 141."""
    if is_result:
        yield
        return
    try:
        yield
        sys.stdout.flush()  # a full device fails at the flush of what was buffered, not at the print
    except OutputFailed as failed:
        if failed.stream != "stdout" or failed.error.errno == errno.EPIPE:
            raise
        _drop_stdout()
        with contextlib.suppress(OutputFailed):  # stderr may fail too: then there is no one to tell
            why = failed.error.strerror or failed.error
            sys.stderr.write(f"warning: the summary was not shown (cannot write to stdout: {why}); {kept}\n")
            sys.stderr.flush()


def _drop_stdout() -> None:
    """stdout made /dev/null, for the descriptor and for what Python still holds buffered for it: the rest of
    the command's output goes nowhere, and the interpreter's last flush fails no more."""
    to_null(1)
    guarded = sys.stdout
    if isinstance(guarded, _Guarded):
        held = guarded._stream
        guarded._stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process's life)
        with contextlib.suppress(OSError, ValueError):  # what was buffered goes to /dev/null: descriptor 1 now
            held.flush()
