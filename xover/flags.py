"""The command line's numbers, read as files are read (errors.decimal): ASCII digits only. Typer reads a flag's
number the way Python does, so `--iterations 1_0` was 10 and `--np 1e1` a float; a flag's value is read as
written or refused in one line, exit 2."""

from __future__ import annotations

import re

import typer

from .errors import decimal

_WHOLE = re.compile(r"\s*[-+]?[0-9]+\s*", re.ASCII)


def WHOLE(value: object) -> int:  # noqa: N802 - named as the type it reads, beside DECIMAL
    """A flag's whole number: digits and a sign."""
    if isinstance(value, int) and not isinstance(value, bool):  # a default
        return value
    text = str(value)
    if not _WHOLE.fullmatch(text):
        raise typer.BadParameter(f"{text!r} is not a whole number written with the digits 0-9")
    return int(text)


def DECIMAL(value: object) -> float:  # noqa: N802
    """A flag's number: digits, a sign, a point, an exponent (nan and inf, which each flag's own check refuses
    in its words)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default
        return float(value)
    text = str(value)
    number = decimal(text)
    if number is None:
        raise typer.BadParameter(f"{text!r} is not a number written with the digits 0-9")
    return number
