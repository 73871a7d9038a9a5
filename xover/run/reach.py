"""Reaching other hosts, and shaping a run's link, from this machine: the one seam between running jobs
and the emulated cluster (xover/emulation/).

A host of this machine needs nothing. A host of the live emulated cluster (`xover cluster up`: each host a
network namespace of this machine) is reached from the cluster's head namespace, its ranks bound to its
NIC; any other host over ssh, as horovodrun and torchrun reach it themselves. A run on this machine alone
may shape its link (--bandwidth: a token bucket on a private namespace's loopback); hosts elsewhere use
their network as it is.
"""

from __future__ import annotations

from ..emulation import cluster
from ..emulation.network import HostNetwork, ShapedNetwork, network_for, refuse_without_tools
from ..errors import XoverError
from ..hosts import is_local
from ..links import HOST, Link

__all__ = [
    "host_interfaces",
    "is_emulated_host",
    "prefix_to_reach",
    "run_link",
    "shaped_link",
]


def prefix_to_reach(hosts: list[str]) -> list[str]:
    """What goes in front of a command that starts or stops something on these hosts from here: the emulated
    cluster's head namespace, or nothing (this machine, or ssh). A spec that mixes emulated hosts with
    others, or names an emulated host that is not up, is an XoverError."""
    return cluster.launch_prefix([host for host in hosts if not is_local(host)])


def host_interfaces() -> dict[str, str]:
    """Each host of the live emulated cluster, by name and by address -> its NIC (none without one)."""
    return cluster.host_interfaces()


def is_emulated_host(host: str) -> bool:
    """Whether `host` is a host of the live emulated cluster (a namespace of this machine, sharing its /tmp)."""
    return cluster.is_emulated_host(host)


def run_link(hosts: list[str], asked: Link | None) -> Link:
    """The link a run over `hosts` is measured on: the one asked for (--bandwidth: this machine's shaped
    loopback, or the host network), else the emulated cluster's NICs when the jobs span its hosts, else the
    host network. A spec that mixes emulated and other hosts, or a shaped loopback across hosts, is refused."""
    remote = sorted(host for host in hosts if not is_local(host))
    if not remote:
        return asked or HOST
    prefix_to_reach(remote)  # refuses a spec that mixes emulated hosts with others
    if asked is not None and asked.shaped_rate:
        raise XoverError(
            f"--bandwidth shapes this machine's loopback; jobs on {', '.join(remote)} use their "
            "network as it is (an emulated cluster shapes its NICs at `xover cluster up --bandwidth`)"
        )
    return Link.cluster(cluster.cluster_rate()) if all(cluster.is_emulated_host(h) for h in remote) else HOST


def refuse_unshapable(link: Link) -> None:
    """A shaped link (--bandwidth) where a tool it needs is not on PATH: refused, before anything of a unit is
    recorded or started."""
    if link.shaped_rate is not None:
        refuse_without_tools(link.shaped_rate)


def shaped_link(rate: str | None, env: dict[str, str] | None = None, nodes: int = 1) -> ShapedNetwork | HostNetwork:
    """A unit's network, entered and left around it: `rate` per node (its `nodes` devices share this
    machine's loopback), or the host's as it is (None)."""
    return network_for(rate, env, nodes)
