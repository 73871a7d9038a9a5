"""Errors a user can fix (the CLI prints them as one message and exits 2, without a traceback), and
how a run was cut short (Ctrl-C: exit 130; --timeout: exit 124)."""


class XoverError(Exception):
    """An expected failure caused by input (a file, a field, a flag) that the user can correct."""

    exit_code = 2


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the run: every process was stopped and the runs marked."""


class TimedOut(Exception):
    """--timeout passed: every process was stopped and the runs marked `timeout`."""
