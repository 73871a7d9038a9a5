"""`torchrun` command lines: torch.distributed's own launcher (c10d rendezvous).

One machine: `torchrun --standalone`. Several (`-H h1:2,h2:2`): torchrun is started on every node
(over ssh for other hosts, as horovodrun does) with --nnodes / --node-rank and one c10d rendezvous
endpoint on the first host; the launcher waits for all of them and fails if any fails.
"""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path

from ..errors import XoverError
from . import find_launcher
from .horovod import is_local, parse_hosts

FORWARDED_PREFIXES = ("XOVER_", "HOROVOD_", "PYTHONPATH", "PYTHONUNBUFFERED")  # what ssh must carry over


def torchrun_path() -> str:
    return find_launcher("torchrun", "torch is not installed in this environment (make setup)")


def _worker_module(spec_path: Path) -> list[str]:
    return ["-m", "xover.runtime.worker", str(spec_path)]


def _output_options(log_dir: Path) -> list[str]:
    # each rank's output kept under log_dir, and relayed prefixed with [defaultN] (the metrics parser skips it)
    return ["--log-dir", str(log_dir), "--redirects", "3", "--tee", "3"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def torchrun_command(np: int, hosts: str, log_dir: Path, spec_path: Path, env: dict[str, str] | None = None,
                     program: list[str] | None = None) -> list[str]:
    """torchrun for xover's worker on the spec, or for `program` (a module and its arguments, after -m)."""
    program = program or _worker_module(spec_path)
    nodes = parse_hosts(hosts)
    if len(nodes) == 1:
        if not is_local(nodes[0][0]):
            raise XoverError(f"-H {hosts}: --engine torch on one other host: run xover there instead")
        return [torchrun_path(), "--standalone", f"--nproc-per-node={np}", *_output_options(log_dir), *program]
    slots = {count for _, count in nodes}
    if len(slots) != 1 or np != sum(count for _, count in nodes):
        raise XoverError(f"-H {hosts} with --engine torch: torchrun starts the same number of ranks on every "
                         f"node, so every host needs the same slots and np ({np}) must be their sum")
    endpoint = f"{nodes[0][0]}:{_free_port()}"
    forwarded = {k: v for k, v in (env or os.environ).items() if k.startswith(FORWARDED_PREFIXES)}
    launches = []
    for node_rank, (host, count) in enumerate(nodes):
        command = [torchrun_path(), f"--nnodes={len(nodes)}", f"--node-rank={node_rank}", f"--nproc-per-node={count}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={spec_path.parent.name}",
                   *_output_options(log_dir / f"node{node_rank}"), *program]
        if is_local(host):
            launches.append(shlex.join(command))
        else:
            remote = f"cd {shlex.quote(os.getcwd())} && env {' '.join(shlex.quote(f'{k}={v}') for k, v in forwarded.items())} {shlex.join(command)}"
            launches.append(shlex.join(["ssh", "-o", "BatchMode=yes", host, remote]))
    # start every node, then wait for each; the first failure's exit code is the launcher's
    script = " ".join(f"{launch} & pids[{i}]=$!;" for i, launch in enumerate(launches))
    script += ' rc=0; for pid in "${pids[@]}"; do wait "$pid" || { [ "$rc" = 0 ] && rc=$?; }; done; exit "$rc"'
    return ["bash", "-c", script]
