"""The `local` launcher: this process runs the units itself, each job's engine starting its ranks
(run/ranks.py) on this machine or on -H hosts over ssh (run/reach.py)."""

from __future__ import annotations

import contextlib

from .experiment import lease_devices
from .launchers import Launcher, register_launcher
from .mps import MpsDaemon
from .request import LaunchRequest, LaunchResult
from .schedule import Scheduler


class LocalLauncher(Launcher):
    """The units run from this process, on this machine or on -H hosts over ssh."""

    name = "local"
    summary = "this machine, or -H hosts over ssh"

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Lease the jobs' devices, start an MPS daemon if asked, and run the units in order here."""
        with request.experiment() as current:
            jobs = [job for group in request.groups for job in group.jobs]
            # a plan placed its groups; without one the jobs are on the first devices, free to move
            lease_devices(current, jobs, request.options.wait, movable=request.options.plan is None)
            with MpsDaemon(current.results_dir, current.id) if request.options.mps else contextlib.nullcontext():
                Scheduler(current.context).run(request.units, exclusive=request.comparison)
        return LaunchResult(current)


register_launcher(LocalLauncher())
