"""xover.launch.slurm against a real single-node Slurm cluster (scripts/slurm.sh: munged, slurmctld,
slurmd on this machine), and Slurm's host-list syntax and variables as pure functions."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures_services import slurm_cluster  # noqa: F401  (a fixture)
from xover.launch.slurm import (Allocation, SlurmError, allocation, batch_script, cancel, check_time_limit,
                                diagnose_slurm, expand_counts, expand_hostlist, hostnames, in_allocation,
                                job_state, submit, wait_for)

ROOT = Path(__file__).resolve().parent.parent
PRINT_ALLOCATION = ("import json, os; from xover.launch.slurm import allocation; a = allocation(); "
                    "print(json.dumps({'hosts': a.hosts_option(), 'this_node': a.this_node, "
                    "'devices': [[h.name, h.device_kind, h.devices, h.cpus, h.gpus] for h in a.hosts], "
                    "'usable_cores': len(os.sched_getaffinity(0))}))")


# ---------------------------------------------------------------------------------------------
# Pure: host lists, per-node counts, allocations described by variables
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, expected", [
    ("vm", ["vm"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("gpu[08-11],login", ["gpu08", "gpu09", "gpu10", "gpu11", "login"]),
    ("n[1-2,5]", ["n1", "n2", "n5"]),
    ("n[8-010]", ["n8", "n9", "n10"]),  # padding follows the lower bound as written
    ("n[01-2]", ["n01", "n02"]),
    ("r[1-2]-c[8-9]", ["r1-c8", "r1-c9", "r2-c8", "r2-c9"]),  # every bracket multiplies
    ("a-b[1-2],c", ["a-b1", "a-b2", "c"]),
    ("n[1-3],n2", ["n1", "n2", "n3", "n2"]),  # duplicates stay, as Slurm keeps them
])
def test_bracket_expansion(expression, expected):
    assert expand_hostlist(expression) == expected


@pytest.mark.parametrize("expression, problem", [
    ("n[1-", "'\\[' without '\\]'"),
    ("n[3-1]", "runs backwards"),
    ("n[a-b]", "must hold numbers"),
    ("x[7]y", "text after its last"),
    ("n1,,n2", "empty host name"),
    ("n[[1]]", "nested"),
])
def test_bracket_expansion_errors_are_precise(expression, problem):
    with pytest.raises(SlurmError, match=problem):
        expand_hostlist(expression)


def test_hostnames_without_a_usable_slurm_configuration_expand_in_python(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))  # scontrol would retry for a minute
    started = time.monotonic()
    assert hostnames("gpu[1-2]") == ["gpu1", "gpu2"]
    assert time.monotonic() - started < 5


def test_per_node_counts():
    assert expand_counts("4(x2),2") == [4, 4, 2]
    assert expand_counts("8") == [8]
    with pytest.raises(SlurmError, match="per-node count"):
        expand_counts("4x2")


def test_time_limits_in_slurm_forms():
    for value in ("90", "1:30", "1:30:00", "2-0", "2-00:00", "2-00:00:00", "UNLIMITED"):
        assert check_time_limit(value) == value
    with pytest.raises(SlurmError, match="time limit '2h'"):
        check_time_limit("2h")


def test_allocation_from_variables_gpus_per_node():
    environ = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_CPUS_PER_NODE": "16(x2)",
               "SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_TASKS_PER_NODE": "4(x2)",
               "SLURMD_NODENAME": "gpu01", "SLURM_JOB_PARTITION": "a100"}
    found = allocation(environ)
    assert found.hosts_option() == "gpu01:4,gpu02:4"
    assert found.hosts_option(this_node_as="localhost") == "localhost:4,gpu02:4"
    assert [(h.cpus, h.gpus, h.tasks, h.device_kind) for h in found.hosts] == [(16, 4, 4, "gpu")] * 2
    assert found.hosts_option(devices_per_host=2) == "gpu01:2,gpu02:2"
    with pytest.raises(SlurmError, match="5 devices per host asked for, but gpu01 has 4"):
        found.hosts_option(devices_per_host=5)
    assert found.visible_gpus == ("0", "1", "2", "3") and found.partition == "a100"
    assert "SLURM_GPUS_ON_NODE" in found.describe() and "8 GPUs on 2 nodes" in found.describe()


def test_allocation_from_variables_other_gpu_sources_and_cpus():
    base = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "8,4(x2)"}
    assert allocation({**base, "SLURM_GPUS_PER_NODE": "a100:2"}).hosts_option() == "n1:2,n2:2,n3:2"
    assert allocation({**base, "SLURM_JOB_GPUS": "3,5"}).hosts_option() == "n1:2,n2:2,n3:2"
    assert allocation({**base, "CUDA_VISIBLE_DEVICES": "1"}).hosts_option() == "n1:1,n2:1,n3:1"
    cpu_only = allocation({**base, "CUDA_VISIBLE_DEVICES": "NoDevFiles"})
    assert cpu_only.hosts_option() == "n1:8,n2:4,n3:4" and cpu_only.this_node is None
    assert allocation({"SLURM_JOBID": "9", "SLURM_NODELIST": "vm", "SLURM_CPUS_ON_NODE": "2"}).hosts_option() == "vm:2"


def test_allocation_errors_are_precise():
    assert not in_allocation({})
    with pytest.raises(SlurmError, match="not inside a Slurm allocation"):
        allocation({})
    with pytest.raises(SlurmError, match="SLURM_JOB_NODELIST is not set"):
        allocation({"SLURM_JOB_ID": "1"})
    with pytest.raises(SlurmError, match="3 nodes .* but CPU counts for 2"):
        allocation({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "2,2"})


def test_submit_refuses_bad_input_before_sbatch(tmp_path):
    with pytest.raises(SlurmError, match="at least one node"):
        submit("#!/bin/bash\ntrue\n", nodes=0)
    with pytest.raises(SlurmError, match="does not exist"):
        submit(tmp_path / "missing.sh")


# ---------------------------------------------------------------------------------------------
# Real Slurm
# ---------------------------------------------------------------------------------------------

def _wait_until(job_id, wanted, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state.state == wanted:
            return state
        assert not state.finished, f"job {job_id} ended {state} before it was {wanted}"
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not {wanted} after {timeout_s} s: {job_state(job_id)}")


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_ctrl_c_while_waiting_cancels_the_job(slurm_cluster, tmp_path):
    # A process started in the background by a shell inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the waiter the handler a terminal's Ctrl-C meets.
    code = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from xover.launch.slurm import submit, wait_for; "
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


def test_missing_commands_are_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmError, match="sbatch was not found"):
        submit("#!/bin/bash\ntrue\n")
    assert diagnose_slurm({}).summary().startswith("not installed")


# ---------------------------------------------------------------------------------------------
# The store's URL stays off command lines (docs/security.md)
# ---------------------------------------------------------------------------------------------

SECRET_URL = "postgresql://xover:s3cret-pw@db.example:5432/xover"


def test_a_groups_batch_script_gives_the_store_in_its_environment_not_its_command(monkeypatch, tmp_path):
    import shlex
    import types

    from xover.launch import slurm as launch_slurm
    from xover.run import slurm as run_slurm

    scripts = []
    monkeypatch.setattr(launch_slurm, "submit", lambda script, *a, **k: scripts.append(script) or "41")
    monkeypatch.setattr(run_slurm, "group_shape", lambda group: (1, 2))
    monkeypatch.setenv("XOVER_DB", "sqlite:///elsewhere.db")  # the flag's URL wins over the environment's
    run = types.SimpleNamespace(id="20260101-000000-abcd", results_dir=tmp_path / "results" / "runs" / "x",
                                context=types.SimpleNamespace(reaper=types.SimpleNamespace(add_slurm_job=lambda j: None)))
    plan = tmp_path / "plan.json"
    plan.write_text('{"device_kind": "cpu"}')
    console = types.SimpleNamespace(print=lambda *a, **k: None)
    run_slurm.submit_groups(run, [types.SimpleNamespace(index=0)], str(plan), ["crossover"], ["work-conserving"],
                            "torch", 5, None, SECRET_URL, None, None, None, console)
    [script] = scripts
    [command] = [line for line in script.splitlines() if line.startswith("exec ")]
    assert "s3cret-pw" not in command and "--db" not in command
    assert f"export XOVER_DB={shlex.quote(SECRET_URL)}" in script.splitlines()


def test_a_groups_job_takes_the_store_from_its_environment(monkeypatch):
    from xover.errors import XoverError
    from xover.run import jobs, slurm as run_slurm
    from xover.store import session

    opened = []
    monkeypatch.setattr(jobs, "groups_from_plan", lambda *a: ([jobs.GroupToRun(index=0, jobs=[])], None))
    monkeypatch.setattr(run_slurm.slurm, "allocation", lambda: type("A", (), {"describe": lambda self: "job"})())
    monkeypatch.setattr(run_slurm, "remap_to_allocation", lambda group, allocation: None)

    def open_store(db):
        opened.append(db)
        raise XoverError("stop here")

    monkeypatch.setattr(session, "open_store", open_store)
    monkeypatch.setenv("XOVER_DB", SECRET_URL)
    with pytest.raises(SystemExit) as exited:
        run_slurm.main(["--experiment", "e", "--plan", "p.json", "--group", "0"])
    assert exited.value.code == 2 and opened == [SECRET_URL]
    monkeypatch.delenv("XOVER_DB")
    with pytest.raises(SystemExit) as refused:
        run_slurm.main(["--experiment", "e", "--plan", "p.json", "--group", "0"])
    assert refused.value.code == 2 and opened == [SECRET_URL]
