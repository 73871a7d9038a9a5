"""The `slurm` launcher: each group of a plan is one Slurm job (run/batch.py does the submitting,
following, cancelling and recording any scheduler's launcher does; this module says how Slurm does each).

    xover run PLAN --launcher slurm [--partition P] [--account A] [--time-limit T]

Each group's batch script runs `python -m xover.run.group_job REQUEST` on its first node (sbatch reads the
script from stdin: the store's URL and the job file's passed variables are in it, not on a command line).
Inside the job the nodes and devices come from Slurm's variables (`job_here`). A controller that does not
answer for a while (a query timing out) is asked again, for up to `slurm.TRANSIENT_RETRY_S`, before the run
gives up and cancels its jobs. Slurm is known to this module and run/external/slurm.py only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..config import results_root
from ..errors import XoverError, printable
from ..sharing import RunStatus
from .batch import BatchLauncher, GroupJob, JobState, SubmissionLost
from .external import slurm
from .launchers import LauncherOption, register_launcher
from .request import LaunchRequest

# what a group's runs end as when their Slurm job ended this way while they were open
SLURM_TO_STATUS = {
    "CANCELLED": RunStatus.CANCELLED.value,
    "TIMEOUT": RunStatus.TIMEOUT.value,
    "DEADLINE": RunStatus.TIMEOUT.value,
    "FAILED": RunStatus.FAILED.value,
    "NODE_FAIL": RunStatus.FAILED.value,
    "OUT_OF_MEMORY": RunStatus.FAILED.value,
    "PREEMPTED": RunStatus.CANCELLED.value,
    "BOOT_FAIL": RunStatus.FAILED.value,
    "COMPLETED": RunStatus.FAILED.value,  # completed while a run was still open: it ended without saying so
}


class SlurmLauncher(BatchLauncher):
    """Each group of a plan submitted as one Slurm job, followed until it ends and recorded."""

    name = "slurm"
    summary = "each group of the plan submitted as one Slurm job; the store must be one every node reaches"
    scheduler = "Slurm"
    options = (
        LauncherOption("partition", "Slurm partition"),
        LauncherOption("account", "Slurm account"),
        LauncherOption("time_limit", "Slurm time limit per group, e.g. 1:00:00"),
    )

    def submit(self, job: GroupJob, request: LaunchRequest, device_kind: str) -> str:
        """sbatch of the group's batch script (its command and environment), nodes and devices from the plan;
        a group whose node failed ends failed, as recorded (requeued, Slurm's default, it would run again
        into the same experiment)."""
        script = slurm.batch_script(job.command, workdir=os.getcwd(), environment=job.environment)
        try:
            return slurm.submit(
                script,
                job.nodes,
                tasks_per_node=job.per_node if device_kind == "cpu" else None,
                gpus_per_node=job.per_node if device_kind == "gpu" else None,
                partition=request.option("partition"),
                account=request.option("account"),
                time_limit=request.option("time_limit"),
                job_name=job.name,
                output=slurm.output_path(job.output.parent, job.output.name),  # the folder's '%' kept as it is
                extra_args=["--no-requeue"],
            )
        except slurm.LostSubmission as lost:
            raise SubmissionLost(str(lost), lost.job_ids) from None

    def check(self, request: LaunchRequest) -> None:
        """A plan file, as any scheduler's launcher takes; a results folder whose groups' output files sbatch
        can name (no backslash in it: slurm.output_path); and --partition, --account, --time-limit that sbatch
        reads as the value given (slurm.name_problem)."""
        super().check(request)
        slurm.output_path(results_root(), "")
        for name in ("partition", "account"):
            value = request.option(name)
            if value is not None and (problem := slurm.name_problem(value)) is not None:
                raise XoverError(f"--{name} {printable(value)}: {problem}")
        if (limit := request.option("time_limit")) is not None:  # before anything is recorded, not at sbatch
            try:
                slurm.check_time_limit(limit)
            except slurm.SlurmError as error:
                raise XoverError(f"--time-limit: {printable(str(error))}") from None

    def job_state(self, job_id: str, limit_s: float | None, on_retry: Callable[[XoverError], None]) -> slurm.JobState:
        """squeue / sacct, asked again while the controller does not answer (TRANSIENT_RETRY_S at most)."""
        return slurm.retrying(
            lambda: slurm.job_state(job_id),
            on_retry=on_retry,
            limit_s=None if limit_s is None else min(limit_s, slurm.TRANSIENT_RETRY_S),
        )

    def cancel(self, job_id: str) -> None:
        """scancel."""
        slurm.cancel(job_id)

    def wait_for_end(self, job_id: str, timeout_s: float) -> slurm.JobState:
        """Until Slurm says the job ended (a cancelled one takes a moment)."""
        return slurm.wait_for(job_id, poll_s=0.5, timeout_s=timeout_s, cancel_on_interrupt=False)

    def cancel_command(self, job_id: str) -> list[str]:
        """scancel JOB."""
        return slurm.cancel_command(job_id)

    def ended_as(self, state: JobState) -> str:
        """As SLURM_TO_STATUS says (failed for a state it does not name)."""
        return SLURM_TO_STATUS.get(state.state, RunStatus.FAILED.value)

    def allocated_hosts(self) -> tuple[str, str] | None:
        """Inside a Slurm job (salloc, sbatch, srun): the allocation's nodes and devices."""
        if not slurm.in_allocation():
            return None
        allocation = slurm.allocation()
        return allocation.hosts_option(), f"hosts from the {allocation.describe()}"

    def job_here(self) -> tuple[str, str, str]:
        """The allocation this group's job runs in: its nodes and devices, its id, and where they came from."""
        allocation = slurm.allocation()
        return allocation.hosts_option(), allocation.job_id, f"hosts from the {allocation.describe()}"

    def doctor_check(self) -> tuple[str, bool, str, str] | None:
        """Whether Slurm's commands are here and its controller answers (optional: xover runs without it)."""
        found = slurm.diagnose_slurm()
        # optional: not installed is fine; installed but not answering is shown with its fix
        ok = found.usable or not any(found.commands.values())
        fix = "" if ok else "slurmctld does not answer: check `scontrol ping` / SLURM_CONF"
        return "slurm", ok, found.summary(), fix


register_launcher(SlurmLauncher())
