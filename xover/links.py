"""The link a run's figures are measured on, as one value, parsed once where it comes in.

Three kinds: the host's network as it is (no --bandwidth, or `--bandwidth host`), this machine's loopback
shaped to a rate (`--bandwidth 1gbit`: a private namespace, emulation/network.py), and the emulated
cluster's NICs at the rate `xover cluster up --bandwidth` gave them. A profile, a plan and a run are
keyed by `Link.key` ('host', or the canonical rate: the store's `bandwidth` column) and shown by
`Link.label`; only a shaped loopback is shaped by the run itself (`Link.shaped_rate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .rates import canonical_rate, describe_rate, parse_rate

HOST_KEY = "host"  # the key of the unshaped network, as the store, a plan and --bandwidth write it


class LinkKind(str, Enum):
    """Where a link's rate comes from."""

    HOST = "host"  # the network as it is: nothing shapes it
    SHAPED = "shaped"  # this machine's loopback, shaped by the run (--bandwidth)
    CLUSTER = "cluster"  # the emulated cluster's NICs, shaped when the cluster came up


@dataclass(frozen=True)
class Link:
    """One link: its kind and, but on the host network, its canonical rate ('1gbit')."""

    kind: LinkKind = LinkKind.HOST
    rate: str | None = None

    @classmethod
    def parse(cls, text: str | None, where: str = "--bandwidth") -> Link | None:
        """--bandwidth as a user gives it: None when not given (the command's default applies), the host
        network for 'host', else this machine's loopback shaped to the rate (checked, canonical)."""
        if text is None or text == "":
            return None
        if text == HOST_KEY:
            return HOST
        return cls(LinkKind.SHAPED, canonical_rate(text, where))

    @classmethod
    def of_key(cls, key: str | None, where: str = "link") -> Link:
        """The link a stored key names (a plan's, a run request's): 'host' or None, or a rate to shape."""
        return HOST if not key or key == HOST_KEY else cls(LinkKind.SHAPED, canonical_rate(key, where))

    @classmethod
    def cluster(cls, rate: str | None) -> Link:
        """The emulated cluster's NICs at their rate (the host network when it came up unshaped)."""
        return cls(LinkKind.CLUSTER, canonical_rate(rate)) if rate else HOST

    @property
    def is_host(self) -> bool:
        """Whether nothing shapes it: its figures are the network's as it is."""
        return self.rate is None

    @property
    def key(self) -> str:
        """What profiles, plans and runs are keyed by: the canonical rate, or 'host'."""
        return self.rate or HOST_KEY

    @property
    def label(self) -> str:
        """For people: '1 Gbit/s', or 'host network'."""
        return describe_rate(self.rate)

    @property
    def bits_per_s(self) -> int | None:
        """The rate in bits per second; None on the host network."""
        return parse_rate(self.rate) if self.rate else None

    @property
    def shaped_rate(self) -> str | None:
        """The rate this machine shapes its loopback to for the run; None where nothing is to shape here."""
        return self.rate if self.kind is LinkKind.SHAPED else None

    @property
    def flag(self) -> str:
        """The option that asks for it again on a command line: ' --bandwidth 1gbit' for a shaped loopback,
        nothing for the host network or the emulated cluster's NICs (its hosts bring their rate)."""
        return f" --bandwidth {self.shaped_rate}" if self.shaped_rate else ""

    def __str__(self) -> str:
        return self.key


HOST = Link()
