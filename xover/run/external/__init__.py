"""Command lines for the distributed launchers (horovodrun, torchrun, Slurm), the hosts they run on and
the processes they start (the emulated cluster and the shaped link: xover.emulation)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ...errors import XoverError


def find_launcher(name: str, missing_hint: str) -> str:
    """A launcher installed beside this Python (the venv's), else on PATH."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if not found:
        raise XoverError(f"{name} was not found: {missing_hint}")
    return found
