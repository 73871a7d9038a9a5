"""Errors a user can fix. The CLI prints them as one message and exits 2, without a traceback."""


class XoverError(Exception):
    """An expected failure caused by input (a file, a field, a flag) that the user can correct."""

    exit_code = 2
