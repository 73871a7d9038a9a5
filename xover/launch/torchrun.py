"""`torchrun` command lines: torch.distributed's own launcher (c10d rendezvous).

One machine: `torchrun --standalone`. Several hosts (`-H h1:2,h2:2`): one torchrun per node, each a
process xover supervises itself (a node that fails fails the job; Ctrl-C stops every node), with
--nnodes / --node-rank and one c10d rendezvous endpoint on the first host, on a port found free
there. Other hosts are reached with `ssh -tt`: when xover stops the ssh client, the remote torchrun
gets SIGHUP and stops its workers.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from ..errors import XoverError
from . import find_launcher
from .hosts import is_local, parse_hosts

FORWARDED_PREFIXES = ("XOVER_", "HOROVOD_", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_", "GLOO_")  # what ssh carries over


def torchrun_path() -> str:
    return find_launcher("torchrun", "torch is not installed in this environment (make setup)")


def _worker_module(spec_path: Path) -> list[str]:
    return ["-m", "xover.runtime.worker", str(spec_path)]


def _output_options(log_dir: Path) -> list[str]:
    # each rank's output kept under log_dir, and relayed prefixed with [defaultN] (the metrics parser skips it)
    return ["--log-dir", str(log_dir), "--redirects", "3", "--tee", "3"]


def free_port(host: str, remote_prefix: list[str]) -> int:
    """A port free on `host` now (the rendezvous runs there, not necessarily here)."""
    if is_local(host):
        with socket.socket() as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]
    code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    try:
        out = subprocess.run([*remote_prefix, "ssh", "-o", "BatchMode=yes", host, sys.executable, "-c", shlex.quote(code)],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise XoverError(f"-H: {host} did not answer over ssh within a minute") from None
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise XoverError(f"-H: cannot reach {host} over ssh to find a rendezvous port: "
                         f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return int(out.stdout.strip())


def torchrun_commands(np: int, hosts: str, log_dir: Path, spec_path: Path, env: dict[str, str] | None = None,
                      program: list[str] | None = None, remote_prefix: list[str] | None = None) -> list[list[str]]:
    """torchrun for xover's worker on the spec, or for `program` (a module and its arguments, after -m):
    one command on one host, one per node otherwise."""
    program = program or _worker_module(spec_path)
    nodes = parse_hosts(hosts)
    if len(nodes) == 1 and is_local(nodes[0][0]):
        return [[torchrun_path(), "--standalone", f"--nproc-per-node={np}", *_output_options(log_dir), *program]]
    slots = {count for _, count in nodes}
    if len(slots) != 1 or np != sum(count for _, count in nodes):
        raise XoverError(f"-H {hosts} with --engine torch: torchrun starts the same number of ranks on every "
                         f"node, so every host needs the same slots and np ({np}) must be their sum")
    first = nodes[0][0]
    # Every node must reach the endpoint by this name: this machine's hosts are spelt `localhost`
    # (hosts.py), which on another node is that node, so it is named by its hostname instead.
    endpoint = f"{socket.gethostname() if is_local(first) else first}:{free_port(first, remote_prefix or [])}"
    forwarded = {k: v for k, v in (env or os.environ).items() if k.startswith(FORWARDED_PREFIXES)}
    commands = []
    for node_rank, (host, count) in enumerate(nodes):
        command = [torchrun_path(), f"--nnodes={len(nodes)}", f"--node-rank={node_rank}", f"--nproc-per-node={count}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={spec_path.parent.name}",
                   *_output_options(log_dir / f"node{node_rank}"), *program]
        variables = {**forwarded, "XOVER_HOST": host}  # a worker knows which host it is on (emulated hosts share one)
        if is_local(host):
            commands.append(["env", *[f"{k}={v}" for k, v in variables.items()], *command])
        else:
            remote = (f"cd {shlex.quote(os.getcwd())} && env "
                      f"{' '.join(shlex.quote(f'{k}={v}') for k, v in variables.items())} {shlex.join(command)}")
            commands.append(["ssh", "-tt", "-o", "BatchMode=yes", host, remote])
    return commands
