"""`horovodrun` command lines: the real launcher, Gloo on CPU, NCCL on GPU (Horovod picks it).

The interface of a job on one host that is not this machine is named (`--network-interfaces`).
horovodrun 0.28.1 finds the interfaces its workers share by having each host probe the next one's
addresses; with a single remote host that host probes itself, so its loopback passes as "routed".
The rendezvous address workers are given is then the launching machine's address on whichever of the
found interfaces a Python set yields first, which depends on the process's string hashing: about
half of such runs gave the worker 127.0.0.1 of the launching machine, and the worker's Gloo
rendezvous failed with "HTTP GET request failed too many times" (one-rank jobs and one-host
profiles on the emulated cluster). With two hosts or more the probes cross hosts and loopback
fails them, so nothing is named there.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from ...hosts import is_local, parse_hosts
from . import find_launcher

# horovodrun writes every variable of its environment into each rank's command line (`K=V ... python
# ...`, through ssh for another host), which every user of either host can read (`ps`). So it gets
# these, and the job file's own variables, not the caller's whole environment: no PGPASSWORD, no
# AWS_*, no tokens. (torchrun's nodes get theirs the same way: run/external/torchrun.py.)
FORWARDED_PREFIXES = (
    "XOVER_",
    "HOROVOD_",
    "PYTHON",
    "OMP_",
    "GLOO_",
    "NCCL_",
    "CUDA_",
    "TORCH_",
    "MKL_",
    "KMP_",
    "LC_",
)
FORWARDED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "SHELL",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "SSH_AUTH_SOCK",
        "NVIDIA_VISIBLE_DEVICES",
        "XDG_CACHE_HOME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
    }
)


def horovodrun_env(env: dict[str, str], forward: tuple[str, ...] = (), secret: tuple[str, ...] = ()) -> dict[str, str]:
    """What horovodrun's own environment may hold (it forwards all of it): the allow-list above, the
    names in `forward` (a job file's own variables), never those in `secret`."""
    return {
        name: value
        for name, value in env.items()
        if (name.startswith(FORWARDED_PREFIXES) or name in FORWARDED_NAMES or name in forward) and name not in secret
    }


def horovodrun_path() -> str:
    """The horovodrun program, or one line saying how to get it."""
    return find_launcher("horovodrun", "run `make setup` (it builds Horovod), then `xover doctor`")


def horovodrun_launcher() -> list[str]:
    """horovodrun itself, or where it is this Python's own, its entry point through
    xover.run.external.horovodrun_main (the same launcher, its Gloo build check answered once per installation)."""
    path = horovodrun_path()
    if Path(path).parent == Path(sys.executable).parent:
        return [sys.executable, "-m", "xover.run.external.horovodrun_main"]
    return [path]


def worker_command(spec_path: Path) -> list[str]:
    """What each rank runs for a built-in model: the worker, on the job's spec file."""
    return [sys.executable, "-u", "-m", "xover.runtime.worker", str(spec_path)]


def route_interface(host: str) -> str | None:
    """The interface (not loopback) this machine reaches `host` through, from the kernel's route."""
    try:
        import psutil

        address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # UDP: picks the route and source address, sends nothing
            source = probe.getsockname()[0]
        for name, addresses in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == source for a in addresses):
                return None if source.startswith("127.") else name
    except (OSError, IndexError, ImportError):
        pass
    return None


def network_interface_options(hosts: str, interfaces: dict[str, str] | None = None) -> list[str]:
    """`--network-interfaces NIC` for a job on one host that is not this machine, else nothing: the
    host's interface as `interfaces` names it (an emulated host's, xover.emulation.cluster), else the
    one this machine routes to it through."""
    names = [name for name, _ in parse_hosts(hosts)]
    if len(names) != 1 or is_local(names[0]):
        return []
    nic = (interfaces or {}).get(names[0]) or route_interface(names[0])
    return ["--network-interfaces", nic] if nic else []


def horovodrun_command(
    np: int,
    hosts: str,
    log_dir: Path,
    spec_path: Path,
    start_timeout_s: int = 120,
    program: list[str] | None = None,
    interfaces: dict[str, str] | None = None,
) -> list[str]:
    """The horovodrun command line of a job: its ranks on `hosts` over Gloo, each rank's output in `log_dir`,
    running `program` (else the worker)."""
    # horovodrun 0.28.1 crashes on --output-filename with one rank (log10(0) padding its rank number);
    # a single rank's output is in the launcher's log anyway.
    per_rank_logs = ["--output-filename", str(log_dir)] if np > 1 else []
    return [
        *horovodrun_launcher(),
        "-np",
        str(np),
        "-H",
        hosts,
        "--gloo",
        "--start-timeout",
        str(start_timeout_s),
        *network_interface_options(hosts, interfaces),
        *per_rank_logs,
        *(program or worker_command(spec_path)),
    ]
