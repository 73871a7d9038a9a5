"""xover.run.external.slurm against a real single-node Slurm cluster (scripts/slurm.sh: munged, slurmctld,
slurmd on this machine): jobs submitted, failed, cancelled, waited for, and allocations seen from inside."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures_services import slurm_cluster  # noqa: F401  (a fixture)

from xover.run.external.slurm import (
    Allocation,
    SlurmError,
    batch_script,
    cancel,
    diagnose_slurm,
    expand_hostlist,
    hostnames,
    job_state,
    output_path,
    submit,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
PRINT_ALLOCATION = ("import json, os; from xover.run.external.slurm import allocation; a = allocation(); "
                    "print(json.dumps({'hosts': a.hosts_option(), 'this_node': a.this_node, "
                    "'devices': [[h.name, h.device_kind, h.devices, h.cpus, h.gpus] for h in a.hosts], "
                    "'usable_cores': len(os.sched_getaffinity(0))}))")


def test_scontrol_agrees_with_the_pure_expansion(slurm_cluster):
    for expression in ("n[1-3]", "gpu[08-11],login", "n[8-010]", "r[1-2]-c[8-9]", "n[1-3],n2", slurm_cluster.node):
        out = subprocess.run(["scontrol", "show", "hostnames", expression], capture_output=True, text=True)
        assert out.stdout.split() == expand_hostlist(expression) == hostnames(expression), expression


def test_a_job_completes_with_exit_code_0(slurm_cluster, tmp_path):
    marker = tmp_path / "ran"
    job = submit(batch_script(["touch", str(marker)], workdir=tmp_path), job_name="xover-ok",
                 output=tmp_path / "%j.out", time_limit="5")
    final = wait_for(job, poll_s=0.2, timeout_s=120)
    assert (final.state, final.exit_code, final.returncode, final.nodes) == ("COMPLETED", 0, 0, slurm_cluster.node)
    assert final.succeeded
    assert marker.exists()


def test_a_failing_job_is_failed_with_its_exit_code(slurm_cluster, tmp_path):
    job = submit("#!/bin/bash\necho about to fail\nexit 3\n", output=tmp_path / "%j.out")
    seen = []
    final = wait_for(job, poll_s=0.2, timeout_s=120, on_change=seen.append)
    assert (final.state, final.exit_code, final.returncode, final.reason) == ("FAILED", 3, 3, "NonZeroExitCode")
    assert seen[-1] == final and len({s.state for s in seen}) == len(seen)  # one call per new state
    assert (tmp_path / f"{job}.out").read_text() == "about to fail\n"


def test_a_cancelled_job_is_cancelled_and_its_processes_are_gone(slurm_cluster, tmp_path):
    pid_file = tmp_path / "pid"
    job = submit(f"#!/bin/bash\nsleep 300 &\necho $! > {pid_file}\nwait\n", output=tmp_path / "%j.out")
    _wait_until(job, "RUNNING")
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job never started its sleep"
        time.sleep(0.1)
    sleeper = int(pid_file.read_text())
    cancel(job)
    final = wait_for(job, poll_s=0.2, timeout_s=120)
    assert final.state == "CANCELLED" and final.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while _alive(sleeper):
        assert time.monotonic() < deadline, f"the job's sleep (pid {sleeper}) outlived the cancelled job"
        time.sleep(0.2)
    cancel(job)  # cancelling an ended job is not an error


def test_a_job_cancelled_before_it_started_has_no_exit_code(slurm_cluster):
    job = submit("#!/bin/bash\ntrue\n", output="/dev/null", extra_args=["--hold"])
    held = job_state(job)
    assert (held.state, held.reason, held.finished, held.returncode) == ("PENDING", "JobHeldUser", False, None)
    cancel(job)
    final = wait_for(job, poll_s=0.2, timeout_s=60)
    assert final.state == "CANCELLED" and final.returncode is None and not final.succeeded


def test_ctrl_c_while_waiting_cancels_the_job(slurm_cluster, tmp_path):
    # A process started in the background by a shell inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the waiter the handler a terminal's Ctrl-C meets.
    code = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from xover.run.external.slurm import submit, wait_for; "
            "job = submit('#!/bin/bash\\nsleep 300\\n', output='/dev/null'); print(job, flush=True); "
            "wait_for(job, poll_s=0.2, on_change=lambda state: print(state.state, flush=True))")
    waiter = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    job = waiter.stdout.readline().strip()
    assert job.isdigit(), waiter.stderr.read()
    # the interrupt must reach the waiter while it follows a running job, not before it started following
    while (line := waiter.stdout.readline().strip()) != "RUNNING":
        assert line, waiter.stderr.read()
    waiter.send_signal(signal.SIGINT)
    _, errors = waiter.communicate(timeout=60)
    assert waiter.returncode != 0 and "KeyboardInterrupt" in errors
    final = job_state(job)
    assert final.state == "CANCELLED", final


def test_sbatch_refusals_are_reported_in_slurms_words(slurm_cluster):
    with pytest.raises(SlurmError, match="sbatch refused the job: .*invalid partition"):
        submit("#!/bin/bash\ntrue\n", partition="no-such-partition")
    with pytest.raises(SlurmError, match="sbatch refused the job: .*(?i:node)"):
        submit("#!/bin/bash\ntrue\n", nodes=2)  # a one-node cluster
    with pytest.raises(SlurmError, match="not known to slurmctld"):
        job_state("987654")


def test_inside_salloc_allocation_sees_this_node_and_its_cpus(slurm_cluster):
    out = subprocess.run(["salloc", "-N1", "--exclusive", sys.executable, "-c", PRINT_ALLOCATION],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    node, cpus = slurm_cluster.node, slurm_cluster.cpus
    assert seen == {"hosts": f"{node}:{cpus}", "this_node": node, "devices": [[node, "cpu", cpus, cpus, 0]],
                    "usable_cores": cpus}


def test_inside_a_batch_job_allocation_sees_the_cores_it_asked_for(slurm_cluster, tmp_path):
    job = submit(batch_script([sys.executable, "-c", PRINT_ALLOCATION], workdir=ROOT,
                              environment={"PYTHONPATH": str(ROOT)}),
                 tasks_per_node=1, cpus_per_task=1, output=tmp_path / "%j.out")
    final = wait_for(job, poll_s=0.2, timeout_s=120)
    log = (tmp_path / f"{job}.out").read_text()
    assert final.state == "COMPLETED", log
    seen = json.loads(log.strip().splitlines()[-1])
    assert seen["devices"] == [[slurm_cluster.node, "cpu", 1, 1, 0]]
    # where cgroup v1's freezer and cpuset are mounted (this project's machines), slurm.sh must confine jobs
    # to their cores: a cluster that silently fell back to /proc tracking went unseen for six days
    mounts = Path("/proc/mounts").read_text()
    cgroups_here = all(f" /sys/fs/cgroup/{name} cgroup " in mounts for name in ("freezer", "cpuset"))
    if cgroups_here and os.environ.get("XOVER_SLURM_CGROUP", "1") != "0":
        assert slurm_cluster.confines_cores, slurm_cluster.conf.read_text()
    if slurm_cluster.confines_cores:  # the job's processes run on its one core only
        assert seen["usable_cores"] == 1


def test_doctor_view_inside_and_outside_an_allocation(slurm_cluster, monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.delenv(name, raising=False)
    outside = diagnose_slurm()
    assert outside.usable and outside.allocation is None
    assert "sbatch" in outside.summary() and "is UP" in outside.summary() and "not inside" in outside.summary()
    inside = diagnose_slurm({"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": slurm_cluster.node,
                             "SLURM_JOB_CPUS_PER_NODE": "2"})
    assert isinstance(inside.allocation, Allocation) and f"{slurm_cluster.node}:2" in inside.summary()
    assert inside.to_dict()["in_allocation"] is True


def _wait_until(job_id, wanted, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state.state == wanted:
            return state
        assert not state.finished, f"job {job_id} ended {state} before it was {wanted}"
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not {wanted} after {timeout_s} s: {job_state(job_id)}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_working_directory_with_a_percent_sign_is_the_one_the_job_runs_in(slurm_cluster, tmp_path):
    """sbatch expands %-patterns (%j, %x, %u) in its --output, --error and --input only, not in --chdir nor in the
    batch script's `cd` (Slurm's fname_create serves the stdio paths alone): a folder of '%j%x%%' is taken as
    written both ways, and the output's own folder has its '%' doubled (output_path)."""
    folder = tmp_path / "run %j%x%%"
    folder.mkdir()
    for script, workdir in ((batch_script(["pwd"], workdir=folder), None), ("#!/bin/bash\npwd\n", folder)):
        job = submit(script, job_name="xover-percent", output=output_path(folder, "%j.out"), workdir=workdir,
                     time_limit="5")
        final = wait_for(job, poll_s=0.2, timeout_s=120)
        log = (folder / f"{job}.out").read_text()
        assert final.succeeded, log
        assert log.strip() == str(folder), log
