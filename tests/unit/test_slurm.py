"""Slurm's host-list syntax, per-node counts, time limits and allocations described by variables, as pure
functions; what xover refuses before sbatch and what a group's batch script carries (the real cluster:
tests/e2e/test_slurm_cluster.py)."""

import os
import time
from pathlib import Path

import pytest

from xover.run.external.slurm import (
    SlurmError,
    allocation,
    check_time_limit,
    diagnose_slurm,
    expand_counts,
    expand_hostlist,
    hostnames,
    in_allocation,
    submit,
)

ROOT = Path(__file__).resolve().parents[2]


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


def test_missing_commands_are_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmError, match="sbatch was not found"):
        submit("#!/bin/bash\ntrue\n")
    assert diagnose_slurm({}).summary().startswith("not installed")


# ---------------------------------------------------------------------------------------------
# The store's URL stays off command lines (docs/security.md)
# ---------------------------------------------------------------------------------------------

SECRET_URL = "postgresql://xover:s3cret-pw@db.example:5432/xover"


def _request(plan, db_url: str):
    """One group of a plan (crossover, work-conserving, engine torch, 5 iterations) for the store at `db_url`."""
    import types

    from xover.links import HOST
    from xover.run.commands import RunOptions
    from xover.run.launchers import LaunchRequest

    return LaunchRequest(store=types.SimpleNamespace(url=db_url), groups=[types.SimpleNamespace(index=0, jobs=[])], units=[],
                         options=RunOptions(modes=("crossover",), policies=("work-conserving",), engine="torch",
                                            iterations=5, plan_path=str(plan)), link=HOST)


def _following(tmp_path, reaped: list | None = None):
    """A Slurm launch's following, with a stand-in for its experiment (its id, results folder and reaper)."""
    import types

    from xover.run.batch import Following
    from xover.run.on_slurm import SlurmLauncher

    current = types.SimpleNamespace(id="20260101-000000-abcd", results_dir=tmp_path / "results" / "runs" / "x",
                                    context=types.SimpleNamespace(reaper=types.SimpleNamespace(
                                        add_job=lambda command: (reaped if reaped is not None else []).append(command[-1]))))
    current.results_dir.mkdir(parents=True)
    console = types.SimpleNamespace(print=lambda *a, **k: None)
    return Following(SlurmLauncher(), current, {0: []}, {}, console)


def _stub_scancel(monkeypatch, tmp_path):
    """A scancel on PATH that does nothing: a unit test must not need Slurm's client installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_groups_batch_script_gives_the_store_in_its_environment_not_its_command(monkeypatch, tmp_path):
    import shlex

    from xover.run import batch
    from xover.run.external import slurm as launch_slurm

    scripts = []
    _stub_scancel(monkeypatch, tmp_path)  # what a reaper would run is resolved at submission
    monkeypatch.setattr(launch_slurm, "submit", lambda script, *a, **k: scripts.append(script) or "41")
    monkeypatch.setattr(batch, "group_shape", lambda group: (1, 2))
    monkeypatch.setenv("XOVER_DB", "sqlite:///elsewhere.db")  # the flag's URL wins over the environment's
    plan = tmp_path / "plan.json"
    plan.write_text('{"device_kind": "cpu"}')
    _following(tmp_path).submit_all(_request(plan, SECRET_URL))
    [script] = scripts
    [command] = [line for line in script.splitlines() if line.startswith("exec ")]
    assert "s3cret-pw" not in command and "--db" not in command
    assert f"export XOVER_DB={shlex.quote(SECRET_URL)}" in script.splitlines()


def test_a_groups_job_takes_the_store_from_its_environment(monkeypatch, tmp_path):
    from xover.errors import XoverError
    from xover.run import group_job, jobs, targets
    from xover.run.on_slurm import SlurmLauncher
    from xover.run.request import GroupRequest, RunOptions
    from xover.store import session

    opened = []
    monkeypatch.setattr(targets, "groups_from_plan", lambda *a: ([jobs.GroupToRun(index=0, jobs=[])], None))
    monkeypatch.setattr(SlurmLauncher, "job_here", lambda self: ("n1:2", "7", "job"))
    monkeypatch.setattr(group_job, "remap_to_hosts", lambda group, hosts: None)

    def open_store(db):
        opened.append(db)
        raise XoverError("stop here")

    monkeypatch.setattr(session, "open_store", open_store)
    monkeypatch.setenv("XOVER_DB", SECRET_URL)
    request = GroupRequest("e", 0, "slurm", RunOptions(plan_path="p.json")).write(tmp_path / "request.json")
    with pytest.raises(SystemExit) as exited:
        group_job.main([str(request)])
    assert exited.value.code == 2 and opened == [SECRET_URL]
    monkeypatch.delenv("XOVER_DB")
    with pytest.raises(SystemExit) as refused:
        group_job.main([str(request)])
    assert refused.value.code == 2 and opened == [SECRET_URL]


def test_a_submission_whose_answer_was_lost_is_found_by_name_for_cancelling(monkeypatch, tmp_path):
    """Issue 52, finding 6. Before: sbatch killed at its timeout left no job id; a job it had made all
    the same ran later into the ended experiment, its rows `running` for good. Now it is looked up by
    its name, and the group's submission records it as submitted, so that the clean-up that follows
    (cancel_unfinished) cancels it and closes its rows."""

    from xover.run import batch
    from xover.run.external import slurm as launch_slurm

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\ncat > /dev/null\nsleep 30\n")  # submits, answers too late
    (bin_dir / "squeue").write_text('#!/bin/sh\necho "$*" >> "$0.calls"\n'
                                    'case "$*" in *--name=xover-20260101-000000-abcd-g0*) echo 77 ;; esac\n')
    (bin_dir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for name in ("sbatch", "squeue", "scancel"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    real_run = launch_slurm._run
    monkeypatch.setattr(launch_slurm, "_run", lambda args, input=None, timeout_s=1.0: real_run(args, input, 1.0))
    monkeypatch.setattr(batch, "group_shape", lambda group: (1, 2))
    reaped = []
    plan = tmp_path / "plan.json"
    plan.write_text('{"device_kind": "cpu"}')
    following = _following(tmp_path, reaped)
    with pytest.raises(batch.SubmissionLost) as lost:
        following.submit_all(_request(plan, "sqlite:///x.db"))
    submitted = following.submitted
    assert submitted == {0: "77"} and reaped == ["77"] and lost.value.job_ids == ["77"]
    assert "\n" not in str(lost.value) and "77" in str(lost.value)
    assert "--user=" in (bin_dir / "squeue.calls").read_text()  # only this user's jobs


def test_a_lost_submission_that_slurm_does_not_list_is_still_an_error(monkeypatch, tmp_path):
    from xover.run.external import slurm as launch_slurm

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\nsleep 30\n")
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for name in ("sbatch", "squeue", "scancel"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(launch_slurm, "LOOKUP_AGAIN_S", 0.0)
    real_run = launch_slurm._run
    monkeypatch.setattr(launch_slurm, "_run", lambda args, input=None, timeout_s=1.0: real_run(args, input, 1.0))
    with pytest.raises(launch_slurm.SlurmError) as error:
        launch_slurm.submit("#!/bin/bash\ntrue\n", job_name="xover-x-g0")
    assert not isinstance(error.value, launch_slurm.LostSubmission) and "did not answer" in str(error.value)
