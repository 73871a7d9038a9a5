"""Errors a user can fix (the CLI prints them as one message and exits 2, without a traceback), and
how a run was cut short (Ctrl-C: exit 130; --timeout: exit 124)."""

from __future__ import annotations

from pathlib import Path


class XoverError(Exception):
    """An expected failure caused by input (a file, a field, a flag) that the user can correct."""

    exit_code = 2


def refuse_unless_regular(path: Path, what: str, error: type[XoverError] = XoverError) -> Path:
    """`path`, refused where it names a device, a pipe or a folder: a read of /dev/zero never ends. A path that
    does not exist is left to its reader, which says so in its own words."""
    if path.exists() and not path.is_file():
        raise error(f"{path}: not a regular file ({what})")
    return path


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM reached the run: every process was stopped and the runs marked.

    A BaseException, as KeyboardInterrupt is: raised from a signal handler, it lands inside whatever the
    main thread runs, and code that handles its own failures with `except Exception` (SQLAlchemy wraps
    them into StatementError, a metric sink's failure is said and the sink left out) must let it pass."""


class TimedOut(Exception):
    """--timeout passed: every process was stopped and the runs marked `timeout`."""
