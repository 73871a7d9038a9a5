"""Launchers whose groups run as jobs of another machine's scheduler (Slurm; a Kubernetes one in
docs/extending.md): each group of a plan is one job, submitted with the request it reads (request.py's
GroupRequest, run by `python -m xover.run.group_job`), followed until it ends, cancelled when the run stops
early, and what its end says of its runs recorded through the Recorder. A `BatchLauncher` subclass says
only how its scheduler submits, reports, cancels and names a job; this module does the rest.

    xover run PLAN --launcher NAME [its options]

This process (the *submitter*) records the experiment, submits one job per group (nodes and devices per
node from the plan), prints their ids and follows them. Whatever ends it early (Ctrl-C, SIGTERM, --timeout,
a group the scheduler refused, an error from it) cancels the jobs submitted and not ended, and records
them. A job that ends before or without its runs being ended (cancelled while pending, a time limit, a node
failure) has them recorded as such here. Inside each job, the group runs exactly as `-H` would (a turn
server per node, horovodrun or torchrun) on the nodes the scheduler gave it, recording its runs into the
same experiment (so the store must be one every node reaches).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import xover_pythonpath
from ..console import errors
from ..devices import local_device_count
from ..errors import XoverError
from ..settings import DB_VARIABLE, RESULTS_VARIABLE, VARIABLE_PREFIX
from ..sharing import PLANNED, RunStatus
from .experiment import Experiment
from .jobs import GroupToRun
from .launchers import Launcher
from .request import GroupRequest, LaunchRequest, LaunchResult
from .schedule import Unit
from .supervise import TimedOut, uninterrupted
from .units import group_units


class JobState(Protocol):
    """A scheduler's job as it last reported it."""

    @property
    def job_id(self) -> str:
        """Its id at the scheduler."""
        ...

    @property
    def state(self) -> str:
        """The scheduler's own word for it: PENDING, RUNNING, COMPLETED, ..."""
        ...

    @property
    def reason(self) -> str | None:
        """Why it is in that state, where the scheduler says."""
        ...

    @property
    def finished(self) -> bool:
        """Whether the scheduler is done with the job, however it ended."""
        ...

    @property
    def succeeded(self) -> bool:
        """Whether the job completed, exit status 0."""
        ...


class SubmissionLost(XoverError):
    """The scheduler's answer to a submission was lost, but it made these jobs all the same: they are
    known now, to be cancelled and recorded."""

    def __init__(self, message: str, job_ids: list[str]) -> None:
        super().__init__(message)
        self.job_ids = job_ids


@dataclass(frozen=True)
class GroupJob:
    """What a group's job is made of: its group, its shape (nodes x devices per node), the command its nodes
    run, and the environment they run it with."""

    group: GroupToRun
    nodes: int
    per_node: int
    command: list[str]
    environment: dict[str, str]
    name: str  # the job's name at the scheduler
    output: Path  # where the scheduler writes what the job prints


class BatchLauncher(Launcher):
    """A launcher whose groups run as jobs of another machine's scheduler. A subclass names the scheduler
    and implements `submit`, `job_state`, `cancel`, `cancel_command` and `ended_as`; on the nodes,
    `allocated_hosts` and `job_here`."""

    runs_here = False
    scheduler = ""  # how messages name it: "Slurm job 41"
    poll_s = 1.0  # how often a job's state is asked for while it runs

    # -- what a scheduler provides ------------------------------------------------------------
    def submit(self, job: GroupJob, request: LaunchRequest, device_kind: str) -> str:
        """Submit the group's job; returns its id. A lost answer is SubmissionLost, naming the jobs made."""
        raise NotImplementedError

    def job_state(self, job_id: str, limit_s: float | None, on_retry: Callable[[XoverError], None]) -> JobState:
        """The job's state now; a scheduler slow to answer is asked again for up to `limit_s`."""
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:
        """End the job (a job that already ended is fine)."""
        raise NotImplementedError

    def wait_for_end(self, job_id: str, timeout_s: float) -> JobState:
        """Wait until the scheduler says the job ended (after a cancel), for at most `timeout_s`."""
        raise NotImplementedError

    def cancel_command(self, job_id: str) -> list[str]:
        """The command that ends the job, for the reaper to run should xover die."""
        raise NotImplementedError

    def ended_as(self, state: JobState) -> str:
        """The status (RunStatus) of a run that was open when its job ended so: what the job's end says."""
        return RunStatus.FAILED.value

    def job_here(self) -> tuple[str, str, str]:
        """Inside a job of this scheduler: its hosts as a -H value, its id, and one line describing them."""
        raise NotImplementedError

    # -- the launch, shared --------------------------------------------------------------------
    def check(self, request: LaunchRequest) -> None:
        """Refuse all but a plan file, and --bandwidth or --mps, which cannot reach another machine's jobs."""
        shaped = request.options.link is not None and request.options.link.shaped_rate is not None
        if not request.options.plan_path or shaped or request.options.mps:
            raise XoverError(
                f"--launcher {self.name} runs a plan file (each group one {self.scheduler} job), without "
                "--bandwidth or --mps"
            )

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Submit each group's job and follow them to their ends; returns group -> its job id."""
        submitted: dict[int, str] = {}
        modes, policies = list(request.options.modes), list(request.options.policies)
        planned = {group.index: group_units(group, modes, policies) for group in request.groups}
        with request.experiment(sinks=()) as current:
            Following(self, current, planned, submitted).run(request)
        return LaunchResult(current, submitted)


class Following:
    """One launch of a BatchLauncher: its jobs submitted, followed, cancelled if it stops early, recorded.
    `planned`: each group's units (what it was to run); `submitted`: group -> job id, filled as they go, so
    that a failure part way knows which to cancel; `console`: where the jobs' changes are said."""

    def __init__(
        self,
        launcher: BatchLauncher,
        current: Experiment,
        planned: dict[int, list[Unit]],
        submitted: dict[int, str],
        console: Any = errors,
    ) -> None:
        self.launcher, self.current, self.planned, self.submitted = launcher, current, planned, submitted
        self.console = console
        self.ended: dict[int, Any] = {}

    def run(self, request: LaunchRequest) -> None:
        """Submit every group, then follow them to their ends; anything that ends it early cancels the jobs
        submitted and not ended, and records them."""
        timeout_s = request.options.timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            self.submit_all(request)
            self.follow(deadline)
        except BaseException as stop:
            self.cancel_unfinished(RunStatus.TIMEOUT.value if isinstance(stop, TimedOut) else None)
            raise

    def submit_all(self, request: LaunchRequest) -> None:
        """Each group's job, with its request written next to the experiment's results."""
        launcher, current = self.launcher, self.current
        plan = request.options.plan
        # what the groups run on: the kind of device the plan's profiles were taken on, not this host's
        device_kind = (plan.device_kind if plan is not None else None) or local_device_count()[0]
        for group in request.groups:
            job = group_job(launcher, current, group, request)
            with uninterrupted():  # a job submitted is a job known, to cancel and to the reaper
                try:
                    job_id = launcher.submit(job, request, device_kind)
                except SubmissionLost as lost:
                    # the answer was lost but the job made: known now, so the clean-up cancels it and closes
                    # its rows instead of leaving a ghost to run into an ended experiment
                    self.submitted[group.index] = lost.job_ids[0]
                    for job_id in lost.job_ids:
                        current.context.reaper.add_job(launcher.cancel_command(job_id))
                    for extra in lost.job_ids[1:]:
                        with contextlib.suppress(XoverError):
                            launcher.cancel(extra)
                    raise
                self.submitted[group.index] = job_id
                current.context.reaper.add_job(launcher.cancel_command(job_id))
            self.console.print(
                f"group {group.index}: {launcher.scheduler} job {job_id} ({job.nodes} node"
                f"{'s' if job.nodes > 1 else ''} x {job.per_node} devices)",
                highlight=False,
            )

    def follow(self, deadline: float | None, poll_s: float | None = None) -> None:
        """Wait until every job has ended, saying each state change and recording each end; TimedOut past
        `deadline` (time.monotonic()). `poll_s`: the launcher's unless given."""
        launcher = self.launcher
        seen: dict[int, str] = {}
        told: list[str] = []

        def say_retrying(error: XoverError) -> None:
            if not told:  # once per outage is enough
                told.append(str(error))
                self.console.print(
                    f"{launcher.scheduler} did not answer ({error}); asking again", highlight=False, markup=False
                )

        while len(self.ended) < len(self.submitted):
            for index, job_id in self.submitted.items():
                if index in self.ended:
                    continue
                left = None if deadline is None else max(1.0, deadline - time.monotonic())
                state = launcher.job_state(job_id, left, say_retrying)
                told.clear()
                if seen.get(index) != state.state:
                    seen[index] = state.state
                    said = f" ({state.reason})" if state.reason and state.reason != "None" else ""
                    self.console.print(
                        f"group {index}: {launcher.scheduler} job {job_id} {state.state}{said}", highlight=False
                    )
                if state.finished:
                    self.ended[index] = state
                    self.record(index, state)
            if deadline is not None and len(self.ended) < len(self.submitted) and time.monotonic() > deadline:
                raise TimedOut()
            time.sleep(launcher.poll_s if poll_s is None else poll_s)

    def cancel_unfinished(self, status: str | None = None) -> None:
        """Cancel every submitted job not known to have ended, wait until the scheduler says each ended (two
        minutes at most), and record them (as `status` where given). A failure to cancel one does not stop
        the others from being cancelled."""
        launcher = self.launcher
        with uninterrupted():
            unfinished = {index: job_id for index, job_id in self.submitted.items() if index not in self.ended}
            for index, job_id in unfinished.items():
                try:
                    launcher.cancel(job_id)
                except XoverError as error:
                    self.console.print(
                        f"group {index}: could not cancel {launcher.scheduler} job {job_id}: {error}", highlight=False
                    )
            for index, job_id in unfinished.items():
                try:
                    state = launcher.wait_for_end(job_id, 120)
                except XoverError as error:
                    self.console.print(f"group {index}: {launcher.scheduler} job {job_id}: {error}", highlight=False)
                    continue
                self.record(index, state, status)

    def record(self, index: int, state: JobState, status: str | None = None) -> None:
        """What the scheduler says of a group's job, where its own runs could not say it (or `status`: why
        xover cancelled it)."""
        said = f"{self.launcher.scheduler} job {state.job_id} {state.state}"
        why = f": {state.reason}" if state.reason and state.reason != "None" else ""
        self.current.context.recorder.launcher_job_ended(
            self.planned[index], state.job_id, status or self.launcher.ended_as(state), said, why, state.succeeded
        )


def group_job(launcher: BatchLauncher, current: Experiment, group: GroupToRun, request: LaunchRequest) -> GroupJob:
    """A group's job: its request written next to the experiment's results, the command its nodes run, and
    the run's XOVER_* settings in its environment (a site may submit with --export=NONE). The store's URL (a
    password, perhaps) is one of them, not an argument: every user of a node can read a command line, while
    the job's script is for its owner and the scheduler's administrators."""
    options = request.options
    assert options.plan_path is not None  # BatchLauncher.check refuses a run without a plan file
    planned = GroupRequest(current.id, group.index, launcher.name, options)
    path = planned.write(current.results_dir / f"group{group.index}-request.json")
    nodes, per_node = group_shape(group)
    settings = {key: value for key, value in os.environ.items() if key.startswith(VARIABLE_PREFIX)}
    return GroupJob(
        group=group,
        nodes=nodes,
        per_node=per_node,
        command=[sys.executable, "-m", "xover.run.group_job", str(path.resolve())],
        environment={
            **passed_variables(group),
            **settings,
            DB_VARIABLE: request.store.url,
            "PYTHONPATH": xover_pythonpath(os.environ.get("PYTHONPATH")),
            RESULTS_VARIABLE: str(current.results_dir.parent.parent.resolve()),
        },
        name=f"xover-{current.id}-g{group.index}",
        output=current.results_dir / f"{launcher.name}-group{group.index}-%j.out",
    )


def group_shape(group: GroupToRun) -> tuple[int, int]:
    """(nodes, devices per node) the plan gives the group."""
    per_host: dict[str, set[int]] = {}
    for job in group.jobs:
        for host, indices in job.devices.items():
            per_host.setdefault(host, set()).update(indices)
    return len(per_host), max(len(indices) for indices in per_host.values())


def passed_variables(group: GroupToRun) -> dict[str, str]:
    """The variables the group's job files pass by name (`pass_env`), with their values here: in the job's
    environment, as the store's URL is, so that they reach it under --export=NONE too, and no command line."""
    return {name: os.environ[name] for job in group.jobs for name in job.recipe.pass_env if name in os.environ}


def planned_under_mps(group: GroupToRun, modes: tuple[str, ...] | list[str]) -> bool:
    """Whether a group runs under a CUDA MPS daemon of its own, inside its job: the plan put it under MPS
    and the run is the plan's (`--mode planned`). Checked on its node, where its GPUs are."""
    return list(modes) == [PLANNED] and group.needs_mps
