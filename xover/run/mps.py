"""CUDA MPS for one run (`xover run --mps`): kernels of the jobs' processes run side by side on a GPU
instead of taking time slices. This is what a GPU user tries first for co-located jobs, so it is the
baseline crossover is compared with on GPUs (docs/gpu.md).

xover starts a control daemon of its own, with its pipe and log folders inside the run's results
folder (private to the user), before the first job, and stops it after the last; every process
started in between finds it through CUDA_MPS_PIPE_DIRECTORY. Each worker records whether MPS served it
(runs.gpu_sharing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..devices import gpu_count
from ..errors import XoverError
from ..settings import EXPERIMENT_VARIABLE

CONTROL = "nvidia-cuda-mps-control"
# where NVIDIA's driver installs put the control program when it is not on PATH
CONTROL_FOLDERS = ("/usr/local/nvidia/bin", "/usr/bin", "/usr/local/cuda/bin")
VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


def control_program() -> str | None:
    """The MPS control program's path, on PATH or where NVIDIA's installs put it; None if there is none."""
    found = shutil.which(CONTROL)
    if found:
        return found
    for folder in CONTROL_FOLDERS:
        candidate = Path(folder) / CONTROL
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def check_mps() -> str:
    """The control program, or a clear error where MPS cannot run (checked before a run is recorded)."""
    program = control_program()
    if program is None:
        raise XoverError(f"--mps: {CONTROL} was not found (it comes with NVIDIA's driver); run without --mps")
    if gpu_count() == 0:
        raise XoverError("--mps needs NVIDIA GPUs, and none is visible here; run without --mps")
    return program


class MpsDaemon:
    """The run's own MPS control daemon, as a context: started on entry, stopped on exit."""

    def __init__(self, folder: Path, experiment_id: str | None = None) -> None:
        self.pipes, self.logs = folder / "mps-pipe", folder / "mps-log"
        # the daemon carries the run's tag, as every other process of the run does, so that the reaper
        # (which stops what carries XOVER_EXPERIMENT=<id>) stops it too if xover dies
        self.experiment_id = experiment_id
        self.program: str | None = None
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> MpsDaemon:
        self.program = check_mps()
        for folder in (self.pipes, self.logs):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.saved = {name: os.environ.get(name) for name in VARIABLES}
        os.environ.update(CUDA_MPS_PIPE_DIRECTORY=str(self.pipes), CUDA_MPS_LOG_DIRECTORY=str(self.logs))
        env = {**os.environ, **({EXPERIMENT_VARIABLE: self.experiment_id} if self.experiment_id else {})}
        started = subprocess.run([self.program, "-d"], capture_output=True, text=True, timeout=30, env=env)
        if started.returncode != 0:
            self._restore()
            detail = (started.stderr or started.stdout).strip().splitlines()
            raise XoverError(
                f"--mps: the MPS control daemon did not start ({detail[-1] if detail else 'no output'}); "
                f"see {self.logs}"
            )
        return self

    def __exit__(self, *exc) -> None:
        try:
            assert self.program is not None  # __enter__ set it, or raised (and then there is no __exit__)
            # `quit` stops the daemon once its clients are gone (the jobs have ended by now)
            subprocess.run([self.program], input="quit\n", text=True, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self._restore()

    def _restore(self) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
