"""Host names in `-H` specs, and which of them are this machine.

A device is a (host, index) pair everywhere. The names this machine answers to - localhost,
127.0.0.1, ::1, its hostname, its fully qualified name, the addresses of its interfaces - are one host,
spelt `localhost`, so `-H localhost:2` and `-H myhost:2` lease, schedule and take turns on the same
devices.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shlex
import socket
from collections.abc import Mapping, Sequence

from .errors import XoverError, mask_credentials, printable

LOCAL = "localhost"
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)  # a DNS name or an IPv4 address
Device = tuple[str, int]  # (host, device index)

# Every ssh xover starts itself: no prompt (BatchMode), a host that does not answer fails within
# ConnectTimeout instead of the system's TCP timeout (minutes), and a connection whose host stopped
# answering (a node that died, a network cut) ends after ServerAliveInterval x ServerAliveCountMax
# seconds, so that a turn server's or a node's ssh can never wait for ever. A user's ~/.ssh/config
# cannot lengthen them: options given on the command line win.
SSH_CONNECT_TIMEOUT_S = 20
SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=4",
)


def ssh_command(host: str, *remote: str, tty: bool = False) -> list[str]:
    """`ssh` to `host` running `remote` (words that ssh joins with spaces: quote them), with SSH_OPTIONS."""
    return ["ssh", *(["-tt"] if tty else []), *SSH_OPTIONS, host, *remote]


def command_on(
    host: str,
    argv: Sequence[str],
    *,
    remote_prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    here: bool = False,
    tty: bool = False,
) -> list[str]:
    """The command that runs `argv` on `host` from here, the one way xover itself starts or stops something
    on another host (horovodrun and Slurm start their ranks their own way): on this machine `argv` itself;
    on any other host over ssh, its words quoted for the shell there.
    `remote_prefix`: how this machine reaches the host (the emulated cluster's head namespace:
    run/reach.py's `prefix_to_reach`; nothing for this machine or ssh); `env`: variables set for it (a
    `Popen`'s own `env` where it can be given one is better: these are seen in the host's process list);
    `here`: in this process's folder on that host too (the one it runs in on this machine)."""
    variables = ["env", *(f"{name}={value}" for name, value in env.items())] if env else []
    if variables:
        argv = after_variables(argv)
    if is_local(host):
        return [*remote_prefix, *variables, *argv]
    line = shlex.join([*variables, *argv])
    return [*remote_prefix, *ssh_command(host, f"cd {shlex.quote(os.getcwd())} && {line}" if here else line, tty=tty)]


MAX_SLOTS = 65536  # of one host: far beyond any machine (a billion built a billion slots in memory)


# A variable's name as a shell sets or exports it; horovodrun's rank lines and a Slurm batch script write names
# unquoted (only values are quoted), so a name like XOVER_X$(cmd) would have that shell run cmd
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


def after_variables(argv: Sequence[str]) -> list[str]:
    """`argv` as it can follow `env K=V ...` (how xover's ssh lines and horovodrun's rank lines set variables):
    a program whose path holds '=' (/opt/a=b/python) goes through `sh -c 'exec "$@"'`, which env would else
    read as one more variable."""
    return ["/bin/sh", "-c", 'exec "$@"', "sh", *argv] if "=" in argv[0] else list(argv)


def _masked(text: str) -> str:
    """`text` of an -H spec as an error shows it: a password in it is ***, a URL's or ssh-style's ('user:pw@host',
    which a spec echoed whole showed as typed) and one of `token=...`."""
    return mask_credentials(re.sub(r"([^,:@/\s]+):([^,@/\s]+)@", r"\1:***@", text))


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """'h1:2,h2:2' -> [('h1', 2), ('h2', 2)], with precise errors."""
    # as errors show it: one line, a password masked, a spec of thousands of hosts cut
    spec = printable(_masked(hosts if len(hosts) <= 200 else f"{hosts[:60]}... ({len(hosts)} characters)"))
    parsed: list[tuple[str, int]] = []
    seen: set[str] = set()  # each host once, as canonical_host names it (a set: a spec of thousands of hosts took
    # minutes when every host was compared with every one before it)
    for item in hosts.split(","):
        if item.count(":") > 1 or item.strip().startswith("["):  # [::1]:2 or ::1:2
            raise XoverError(
                f"-H {spec}: {_masked(item[:100])!r} has more than one ':': -H takes HOST:SLOTS, as horovodrun's "
                "does, and an IPv6 address is no HOST there (horovodrun splits each at its ':'); name the host "
                "instead: its host name, or one /etc/hosts gives the address"
            )
        name, _, slots = item.strip().partition(":")
        if not re.fullmatch(r"[0-9]{1,7}", slots, re.ASCII) or not 1 <= int(slots) <= MAX_SLOTS:
            raise XoverError(
                f"-H {spec}: {_masked(item[:100])!r} must be HOST:SLOTS with SLOTS a whole number from 1 to {MAX_SLOTS}"
            )
        if not HOST_NAME.fullmatch(name):
            raise XoverError(f"-H {spec}: {_masked(name[:100])!r} is not a host name (letters, digits, '.', '-', '_')")
        if ".." in name:  # ssh and the resolver take it for a name, and fail only once the run has started
            raise XoverError(f"-H {spec}: {name[:100]!r} is not a host name: a '.' follows a '.' (an empty label)")
        canonical = canonical_host(name)
        if canonical in seen:
            raise XoverError(f"-H {spec}: host '{name}' is listed twice (this machine's names are one host)")
        seen.add(canonical)
        parsed.append((name, int(slots)))
    return parsed


@functools.lru_cache(maxsize=1)
def local_names() -> frozenset[str]:
    """Every name this machine answers to: localhost, its host names and its interfaces' addresses."""
    names = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}
    try:
        hostname = socket.gethostname()
        names |= {hostname, socket.getfqdn(), hostname.split(".")[0]}
    except OSError:
        pass
    try:
        import psutil

        for addresses in psutil.net_if_addrs().values():
            names |= {
                address.address.split("%")[0]
                for address in addresses
                if address.family in (socket.AF_INET, socket.AF_INET6)
            }
    except Exception:  # psutil missing or interfaces unreadable: the names above still hold
        pass
    return frozenset(names)


def is_local(host: str) -> bool:
    """Whether `host` names this machine: any of its names, in any case (host names are not case-sensitive), any
    loopback address (127.0.0.2 is this machine as much as 127.0.0.1: a plan naming both gave one device to two
    groups at once), the unspecified one (0.0.0.0, ::: a connection to it reaches this machine), and an address in
    the short forms ssh and the resolver read (127.1 is 127.0.0.1: it went over ssh to this machine)."""
    address = _address(host)
    if address is not None and (address.is_loopback or address.is_unspecified):
        return True
    return host.lower() in _lowered(local_names()) or (address is not None and str(address) in local_names())


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` spells, in full or as inet_aton reads it (127.1, 0x7f.1, 2130706433), else None."""
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9][0-9a-fA-FxX.]*", text):  # a name: not an address in any form
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _lowered(names: frozenset[str]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


def canonical_host(host: str) -> str:
    """The name a host is known by: LOCAL for any of this machine's names, so that they count as one host."""
    return LOCAL if is_local(host) else host


def hosts_spec(devices: dict[str, list[int]]) -> str:
    """The -H spec of a job placed on these devices (host -> device index of each local rank)."""
    return ",".join(f"{host}:{len(indices)}" for host, indices in devices.items())
