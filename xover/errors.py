"""Errors a user can fix (the CLI prints them as one message and exits 2, without a traceback), and
how a run was cut short (Ctrl-C: exit 130; --timeout: exit 124)."""


class XoverError(Exception):
    """An expected failure caused by input (a file, a field, a flag) that the user can correct."""

    exit_code = 2


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM reached the run: every process was stopped and the runs marked.

    A BaseException, as KeyboardInterrupt is: raised from a signal handler, it lands inside whatever the
    main thread runs, and code that handles its own failures with `except Exception` (SQLAlchemy wraps
    them into StatementError, a metric sink's failure is said and the sink left out) must let it pass."""


class TimedOut(Exception):
    """--timeout passed: every process was stopped and the runs marked `timeout`."""
