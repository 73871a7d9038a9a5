"""Bandwidth emulation: a private network namespace whose loopback is shaped with `tc` tbf.

Every process of a group enters the same namespace, so all of them share one bottleneck, as on
a cluster link. Unprivileged `unshare -rn` works where user namespaces are allowed. The
namespace lives as long as a holder process that exits when its stdin closes, so nothing
outlives the run, even if xover itself is killed.
"""

from __future__ import annotations

import re
import subprocess

from ..errors import XoverError

RATE_PATTERN = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$")
# tbf's burst must exceed loopback's 64 KiB MTU, or packets are dropped and Gloo times out.
TBF_BURST, TBF_LATENCY = "256kb", "50ms"


def check_rate(rate: str) -> str:
    rate = rate.strip().lower()
    if not RATE_PATTERN.match(rate):
        raise XoverError(f"--bandwidth {rate!r}: expected a tc rate such as 1gbit, 200mbit or 500kbit")
    return rate


class ShapedNetwork:
    def __init__(self, rate: str) -> None:
        self.rate = check_rate(rate)
        self.holder: subprocess.Popen | None = None

    def __enter__(self) -> "ShapedNetwork":
        script = (f"ip link set lo up && tc qdisc add dev lo root tbf rate {self.rate} burst {TBF_BURST} "
                  f"latency {TBF_LATENCY} && echo ready && exec cat")
        self.holder = subprocess.Popen(["unshare", "-rn", "sh", "-c", script], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            error = self.holder.stderr.read().strip()
            self.holder.wait()
            raise XoverError(f"--bandwidth {self.rate}: cannot build the emulated network here "
                             f"({error or 'unshare failed'}); run `xover doctor`, or drop --bandwidth")
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """The command run inside the namespace (same user, its network shaped)."""
        return ["nsenter", "--target", str(self.holder.pid), "--user", "--net", "--preserve-credentials",
                "--", *command]

    def __exit__(self, *exc) -> None:
        if self.holder and self.holder.poll() is None:
            self.holder.stdin.close()  # `cat` sees EOF and the namespace goes with it
            try:
                self.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()


class HostNetwork:
    """No shaping: the jobs use the host network as it is."""

    rate = None

    def __enter__(self) -> "HostNetwork":
        return self

    def wrap(self, command: list[str]) -> list[str]:
        return command

    def __exit__(self, *exc) -> None:
        pass


def network_for(rate: str | None):
    return ShapedNetwork(rate) if rate else HostNetwork()
