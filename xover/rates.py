"""Link rates as users write them, stored and shown one way.

`--bandwidth` takes a number and a unit. Bits: `bit`, `kbit`, `mbit`, `gbit`, `tbit`, and the
networking spelling `bps`, `kbps`, `mbps`, `gbps` (bits per second, as in "a 100 Mbps link").
Bytes: `B/s`, `KB/s`, `MB/s`, `GB/s`, with a capital B also `MBps` (or `byte/s`, `kbyte/s`, ...).
Prefixes are decimal (k = 1000).
tc itself reads `mbps` as megabytes per second; xover never hands it a user's spelling, only the
canonical form below, so `100mbps` is 100 Mbit/s everywhere.

Canonical form: the largest of gbit/mbit/kbit/bit that writes the rate as a whole number
(`1gbit`, `1500mbit`), so that 1gbit and 1000mbit are one profile key.
"""

from __future__ import annotations

import re

from .errors import XoverError

_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
# ASCII digits only: without re.ASCII, \d matched an Arabic-Indic '١', read as 1
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|bit/s|b/s|byte/s|bytes/s)\s*$", re.ASCII)
_CANONICAL_UNITS = (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3), ("bit", 1))


class RateError(XoverError):
    """A link rate that cannot be used: one line naming the option and what is wrong."""

    pass


def parse_rate(text: str, where: str = "--bandwidth") -> int:
    """Bits per second of a rate such as '1gbit', '100mbps', '125MB/s'."""
    raw = str(text).strip()
    bytes_unit = re.search(r"B/s$|Bps$|bytes?/s$", raw) is not None  # capital B, or spelt out: bytes
    match = _PATTERN.match(raw.lower())
    if not match:
        raise RateError(f"{where} {text!r}: expected a rate with a unit, such as 1gbit, 200mbit, 100mbps or 125MB/s")
    number, prefix, unit = match.groups()
    if unit == "b/s" and not bytes_unit:
        raise RateError(f"{where} {text!r}: write bits as 'mbit' or 'mbps', bytes as 'MB/s'")
    bits = float(number) * _PREFIX[prefix] * (8 if bytes_unit else 1)
    if bits < 8_000:
        raise RateError(f"{where} {text!r}: too slow to carry training traffic; give at least 8kbit")
    if bits > 10**13:
        raise RateError(f"{where} {text!r}: above 10 Tbit/s; use the host network (drop {where})")
    return int(round(bits))


def canonical_rate(text: str, where: str = "--bandwidth") -> str:
    """'1000mbit' -> '1gbit', '100mbps' -> '100mbit', '125MB/s' -> '1gbit'."""
    return format_canonical(parse_rate(text, where))


def format_canonical(bits: int) -> str:
    """A rate in bits per second in the largest unit that divides it exactly: 1000000000 -> '1gbit'."""
    for unit, size in _CANONICAL_UNITS:
        if bits % size == 0:
            return f"{bits // size}{unit}"
    return f"{bits}bit"


def canonical_rate_or_none(text: str | None) -> str | None:
    """The canonical form, or None for anything that is not a rate (e.g. 'host')."""
    try:
        return canonical_rate(text) if text else None
    except RateError:
        return None


def describe_rate(text: str | None) -> str:
    """For people: '1 Gbit/s', '200 Mbit/s'; 'host network' when unshaped (None)."""
    if not text:
        return "host network"
    bits = parse_rate(text)
    for unit, size in (("Tbit/s", 10**12), ("Gbit/s", 10**9), ("Mbit/s", 10**6), ("kbit/s", 10**3)):
        if bits >= size:
            value = bits / size
            return f"{value:g} {unit}"
    return f"{bits} bit/s"
