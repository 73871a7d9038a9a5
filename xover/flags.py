"""The command line's numbers, read as files and settings are read (errors.decimal, settings.whole_number): ASCII
digits only. Typer reads a flag's number the way Python does, so `--iterations 1_0` was 10 and `--np 1e1` a float;
a flag's value is read as written or refused in one line, exit 2."""

from __future__ import annotations

import sys

import typer

from .errors import decimal, quoted
from .settings import whole_number


def whole_flag(value: object) -> int:
    """A flag's whole number: digits, and a sign (a negative one is refused by the flag's own range)."""
    if isinstance(value, int) and not isinstance(value, bool):  # a default
        return value
    text = str(value).strip()
    if len(text) > sys.get_int_max_str_digits() > 0:  # int() would fail in Python's words ("Exceeds the limit")
        raise typer.BadParameter(f"{text[:20]}... ({len(text)} characters) is no whole number any flag takes")
    sign = -1 if text.startswith("-") else 1
    number = whole_number(text[1:] if text[:1] in "+-" else text)
    if number is None:
        raise typer.BadParameter(f"{quoted(str(value))} is not a whole number written with the digits 0-9")
    return sign * number


def decimal_flag(value: object) -> float:
    """A flag's number: digits, a sign, a point, an exponent (nan and inf, which each flag's own check refuses
    in its words)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default
        return float(value)
    number = decimal(str(value))
    if number is None:
        raise typer.BadParameter(f"{quoted(str(value))} is not a number written with the digits 0-9")
    return number
