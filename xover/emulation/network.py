"""Bandwidth emulation: a private network namespace whose loopback is shaped with `tc` tbf.

`--bandwidth R` means what a cluster's spec sheet means: one node's NIC rate, each way. On one
machine each device of a unit stands for a node, and every rank's traffic crosses the one loopback,
so the loopback is shaped to R times the unit's devices: a ring all-reduce then takes as long as over
nodes with NICs of R (each node sends its share at R). Before 2026-11-27 the loopback was shaped to R
itself, about R / k per node for k devices (docs/measurements.md says which figures were taken so).

Every process of a group enters the same namespace, so all of them share one bottleneck, as on
a cluster link. Unprivileged `unshare -rn` works where user namespaces are allowed. The
namespace lives as long as a holder process that exits when its stdin closes, so nothing
outlives the run, even if xover itself is killed.

The link queues little, like a NIC with byte queue limits: 32 KiB packets and at most 32 KiB
queued per TCP socket (`tcp_limit_output_bytes`, per namespace). With loopback's 64 KiB packets
and the kernel's 4 MiB per socket, two bulk transfers kept tbf's whole 50 ms queue full, so every
small all-reduce waited 50 ms behind a partner's; with these limits it waits a few ms, the link as busy
as before (docs/measurements.md, *Figures behind the design*: *The shaped link's queue*).

Under the rate, packets wait in a priority queue (pfifo_fast: three bands by the sending socket's
SO_PRIORITY, band 0 first), so that a job given the link first (turns/policies.py: link_bands) has its
all-reduce served ahead of a partner's bulk transfer. Sockets left at their default priority share
band 1 first come, first served, which is how the link behaved before the bands.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ..errors import XoverError
from ..rates import canonical_rate, format_canonical, parse_rate

# tbf's burst must exceed the packet size, or packets are dropped and Gloo times out.
TBF_BURST, TBF_LATENCY = "256kb", "50ms"
LINK_MTU = 32768
SOCKET_QUEUE_BYTES = 32768


def shaping_commands(device: str, rate: str) -> str:
    """Shell commands that shape `device` to `rate`: tbf, with the priority queue under it."""
    return (
        f"tc qdisc add dev {device} root handle 1: tbf rate {rate} burst {TBF_BURST} latency {TBF_LATENCY} "
        f"&& tc qdisc add dev {device} parent 1:1 handle 10: pfifo_fast"
    )


def check_rate(rate: str) -> str:
    """The canonical form of a --bandwidth (see rates.py); what tc is given and profiles are keyed by."""
    return canonical_rate(rate)


def missing_tools() -> list[str]:
    """The tools a shaped network needs that are not on PATH."""
    return [tool for tool in ("unshare", "nsenter", "ip", "tc", "sysctl") if shutil.which(tool) is None]


def refuse_without_tools(rate: str) -> None:
    """--bandwidth `rate` where a tool the shaped network needs is not on PATH: refused, naming them. A run asks
    before it records a unit's runs (refused input keeps nothing), and the network again as it is built."""
    missing = missing_tools()
    if missing:
        raise XoverError(
            f"--bandwidth {rate}: {', '.join(missing)} not found (util-linux, iproute2, procps); install them, or "
            "drop --bandwidth to use the host network"
        )


class ShapedNetwork:
    """A unit's shaped network (--bandwidth): a private namespace whose loopback carries every node's share,
    alive while the `with` block lasts."""

    def __init__(self, rate: str, env: dict[str, str] | None = None, nodes: int = 1) -> None:
        self.rate = check_rate(rate)  # one node's NIC, each way
        self.nodes = max(1, nodes)  # the devices that stand for nodes: they share the loopback
        self.loopback_rate = format_canonical(parse_rate(self.rate) * self.nodes)
        self.env = env  # the run's tag, so that a holder left behind is found with the run's processes
        self.holder: subprocess.Popen | None = None

    def __enter__(self) -> ShapedNetwork:
        refuse_without_tools(self.rate)
        script = (
            f"ip link set lo mtu {LINK_MTU} up && sysctl -qw net.ipv4.tcp_limit_output_bytes={SOCKET_QUEUE_BYTES} "
            f"&& {shaping_commands('lo', self.loopback_rate)} "
            f"&& echo ready && exec cat"
        )
        self.holder = subprocess.Popen(
            ["unshare", "-rn", "sh", "-c", script],
            stdin=subprocess.PIPE,
            env={**os.environ, **(self.env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.holder.stdout is not None and self.holder.stderr is not None  # piped
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            error = self.holder.stderr.read().strip()
            self.holder.wait()
            raise XoverError(
                f"--bandwidth {self.rate}: cannot build the emulated network here "
                f"({error or 'unshare failed'}); run `xover doctor`, or drop --bandwidth"
            )
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """The command run inside the namespace (same user, its network shaped)."""
        assert self.holder is not None, "wrap() is for inside the `with` block"
        return [
            "nsenter",
            "--target",
            str(self.holder.pid),
            "--user",
            "--net",
            "--preserve-credentials",
            "--",
            *command,
        ]

    def __exit__(self, *exc) -> None:
        if self.holder and self.holder.poll() is None:
            assert self.holder.stdin is not None  # piped
            self.holder.stdin.close()  # `cat` sees EOF and the namespace goes with it
            try:
                self.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()


class HostNetwork:
    """No shaping: the jobs use the host network as it is."""

    rate = None

    def __enter__(self) -> HostNetwork:
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """The command as it is."""
        return command

    def __exit__(self, *exc) -> None:
        pass


def network_for(rate: str | None, env: dict[str, str] | None = None, nodes: int = 1) -> ShapedNetwork | HostNetwork:
    """The network of a unit: `rate` per node (its `nodes` devices share the loopback), or the host's."""
    return ShapedNetwork(rate, env, nodes) if rate else HostNetwork()
