"""CUDA MPS for one run (`xover run --mps`): kernels of the jobs' processes run side by side on a GPU
instead of taking time slices. This is what a GPU user tries first for co-located jobs, so it is the
baseline crossover is compared with on GPUs (docs/gpu.md).

xover starts a control daemon of its own, with its pipe and log folders inside the run's results
folder, before the first job, and stops it after the last; every process started in between finds it
through CUDA_MPS_PIPE_DIRECTORY. Each worker records whether MPS served it (runs.gpu_sharing).

The folders are made 0700 by xover; one already there is used only if it is a real folder (not a link)
of the user's, and is made 0700 first (a results root may be shared: another user's folder or link
there would receive the daemon's pipes and log). Under `--launcher slurm`, a group the plan put under
MPS starts its own daemon on its node, inside its Slurm job (run/group_job.py): the submitting host (a
login node) need have no GPU.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from ..devices import gpu_count
from ..errors import XoverError
from ..settings import EXPERIMENT_VARIABLE

CONTROL = "nvidia-cuda-mps-control"
# where NVIDIA's driver installs put the control program when it is not on PATH
CONTROL_FOLDERS = ("/usr/local/nvidia/bin", "/usr/bin", "/usr/local/cuda/bin")
VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
START_TIMEOUT_S = 30.0  # for `nvidia-cuda-mps-control -d` to start the daemon and return


def running_under_mps() -> bool:
    """Whether this process's runs start under an MPS daemon now (its pipe folder is set: `MpsDaemon`)."""
    return bool(os.environ.get(VARIABLES[0]))


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
            private_folder(folder)
        self.saved = {name: os.environ.get(name) for name in VARIABLES}
        os.environ.update(CUDA_MPS_PIPE_DIRECTORY=str(self.pipes), CUDA_MPS_LOG_DIRECTORY=str(self.logs))
        env = {**os.environ, **({EXPERIMENT_VARIABLE: self.experiment_id} if self.experiment_id else {})}
        try:
            started = subprocess.run(
                [self.program, "-d"], capture_output=True, text=True, timeout=START_TIMEOUT_S, env=env
            )
        except subprocess.TimeoutExpired:
            self._quit()  # whatever it started by then
            self._restore()
            raise XoverError(
                f"--mps: the MPS control daemon did not start within {START_TIMEOUT_S:.0f} s; see {self.logs}, "
                "or run without --mps"
            ) from None
        except OSError as error:
            self._restore()
            raise XoverError(f"--mps: {self.program} could not be run ({error.strerror or error})") from None
        except BaseException:  # Ctrl-C or SIGTERM while it starts: no __exit__ follows, so stop it here
            self._quit()
            self._restore()
            raise
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
            self._quit()  # the jobs have ended by now
        finally:
            self._restore()

    def _quit(self) -> None:
        """`quit`: the daemon stops once its clients are gone."""
        assert self.program is not None  # __enter__ set it first
        try:
            subprocess.run([self.program], input="quit\n", text=True, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _restore(self) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def private_folder(folder: Path) -> None:
    """`folder` made 0700 (with its parents), or, where something is there already, used only if it is a
    real folder of this user's (not a link), made 0700 first; an XoverError naming it otherwise."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder, 0o700)
        return
    except FileExistsError:
        pass
    except OSError as error:
        raise XoverError(f"--mps: cannot make {folder} for the MPS daemon ({error.strerror})") from None
    try:  # the folder itself, never through a link: checked and made private through one descriptor
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        what = "a link" if folder.is_symlink() else "not a folder"
        raise XoverError(
            f"--mps: {folder}, the MPS daemon's folder, is {what}: someone else may have made it; remove it"
        ) from None
    try:
        info = os.fstat(descriptor)
        if info.st_uid != os.geteuid():
            raise XoverError(
                f"--mps: {folder}, the MPS daemon's folder, belongs to uid {info.st_uid}, not to you; remove it"
            )
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(descriptor, 0o700)
    finally:
        os.close(descriptor)
