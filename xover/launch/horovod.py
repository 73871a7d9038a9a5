"""`horovodrun` command lines: the real launcher, Gloo on CPU, NCCL on GPU (Horovod picks it)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import find_launcher


def horovodrun_path() -> str:
    return find_launcher("horovodrun", "run `make setup` (it builds Horovod), then `xover doctor`")


def worker_command(spec_path: Path) -> list[str]:
    return [sys.executable, "-u", "-m", "xover.runtime.worker", str(spec_path)]


def horovodrun_command(np: int, hosts: str, log_dir: Path, spec_path: Path, start_timeout_s: int = 120,
                       program: list[str] | None = None) -> list[str]:
    # horovodrun 0.28.1 crashes on --output-filename with one rank (log10(0) padding its rank number);
    # a single rank's output is in the launcher's log anyway.
    per_rank_logs = ["--output-filename", str(log_dir)] if np > 1 else []
    return [horovodrun_path(), "-np", str(np), "-H", hosts, "--gloo", "--start-timeout", str(start_timeout_s),
            *per_rank_logs, *(program or worker_command(spec_path))]
