"""Where xover's own files are: the checkout every process it starts imports, and the results folder."""

from __future__ import annotations

from pathlib import Path

from .settings import settings

# The folder above xover/, put first on PYTHONPATH of every process xover starts (workers, turn
# servers, the reaper, Slurm jobs, sweeps through ssh) so that they import this xover, installed or not.
XOVER_ROOT = str(Path(__file__).resolve().parent.parent)


def results_root() -> Path:
    """Where run logs go: results/ by default, XOVER_RESULTS to move them (tests use a temp dir)."""
    return settings().results
