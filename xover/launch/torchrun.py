"""`torchrun` command lines: torch.distributed's own launcher (c10d rendezvous)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ..errors import XoverError
from .horovod import is_local, parse_hosts, worker_command


def torchrun_path() -> str:
    beside_python = Path(sys.executable).parent / "torchrun"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("torchrun")
    if not found:
        raise XoverError("torchrun was not found: torch is not installed in this environment (make setup)")
    return found


def torchrun_command(np: int, hosts: str, log_dir: Path, spec_path: Path) -> list[str]:
    """One node: --standalone picks a free rendezvous port. Each rank's output is kept under log_dir
    and also relayed, prefixed with [defaultN], which the metrics parser ignores."""
    nodes = parse_hosts(hosts)
    if len(nodes) > 1 or not is_local(nodes[0][0]):
        raise XoverError("--engine torch runs on this machine only for now: torchrun must be started on "
                         "every node; use --engine horovod for -H with other hosts")
    python = worker_command(spec_path)
    return [torchrun_path(), "--standalone", f"--nproc-per-node={np}", "--log-dir", str(log_dir),
            "--redirects", "3", "--tee", "3", *python[2:]]
