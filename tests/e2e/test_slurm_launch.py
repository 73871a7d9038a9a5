"""xover on a real single-node Slurm cluster (scripts/slurm.sh, started by the fixture): a plan submitted
with --launcher slurm (each group one Slurm job) runs to the end and is recorded; a cancelled Slurm job is
recorded as cancelled; inside salloc, hosts come from the allocation. Under CI=true these fail, never
skip, when Slurm cannot be set up."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time

from conftest import wait_for_iterating_runs
from fixtures_services import slurm_cluster  # noqa: F401 - the fixture

XOVER = [sys.executable, "-m", "xover"]


def _plan(tmp_path, iterations: int) -> str:
    trace = tmp_path / "trace.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\n"
                     f"mlp-digits,2,2,8,0.1,{iterations}\nresnet-digits,2,30,5,0.1,{iterations}\n")
    path = tmp_path / "plan.json"
    made = subprocess.run([*XOVER, "plan", "--profiles", str(trace), "--devices", "2", "--max-group", "2",
                           "--out", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert len(json.loads(made.stdout)["groups"]) >= 1
    return str(path)


def test_a_plan_submitted_to_slurm_runs_and_is_recorded(slurm_cluster, isolated_results, tmp_path):  # noqa: F811
    plan = _plan(tmp_path, 12)
    result = subprocess.run([*XOVER, "run", plan, "--launcher", "slurm", "--mode", "crossover", "--time-limit", "10",
                             "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    job_ids = set(report["slurm_jobs"].values())
    assert job_ids and all(job_id.isdigit() for job_id in job_ids)
    for job_id in job_ids:
        assert re.search(rf"Slurm job {job_id} COMPLETED", result.stderr)
    assert report["jobs"] and all(j["status"] == "finished" and j["iterations"] == 12 for j in report["jobs"])
    with sqlite3.connect(isolated_results / "xover.db") as db:
        rows = db.execute("SELECT launcher_job_id, status FROM runs").fetchall()
        assert {job_id for job_id, _ in rows} == job_ids and {status for _, status in rows} == {"finished"}
        assert db.execute("SELECT status FROM experiments").fetchall() == [("finished",)]


def test_a_cancelled_slurm_job_is_recorded_as_cancelled(slurm_cluster, isolated_results, tmp_path):  # noqa: F811
    plan = _plan(tmp_path, 5000)
    xover = subprocess.Popen([*XOVER, "run", plan, "--launcher", "slurm", "--mode", "crossover", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = wait_for_iterating_runs(isolated_results / "xover.db", runs=1, timeout_s=180)[0][0]
    subprocess.run(["scancel", job_id], check=True, env=os.environ)
    out, err = xover.communicate(timeout=300)
    assert xover.returncode == 1, err[-3000:]  # a group did not finish
    assert f"Slurm job {job_id} CANCELLED" in err
    ran = json.loads(out)
    statuses = {j["status"] for j in ran["jobs"]}
    assert statuses == {"cancelled"}
    # xover ran the experiment to its end, but its job was cancelled: every view says cancelled, not finished
    for args in (["all"], [ran["experiment"]]):
        shown = subprocess.run([*XOVER, "report", *args, "--format", "json"], capture_output=True, text=True,
                               timeout=120)
        assert shown.returncode == 0, shown.stderr[-3000:]
        report = json.loads(shown.stdout)
        assert ([row["status"] for row in report["experiments"]] if args == ["all"]
                else [report["experiment"]["status"]]) == ["cancelled"], report
    if ran.get("schedule") is not None:  # no makespan where a job did not finish, as `xover report` says
        assert ran["schedule"]["measured_makespan_s"] is None, ran["schedule"]


def test_timeout_cancels_the_slurm_jobs_and_records_them(slurm_cluster, isolated_results, tmp_path):  # noqa: F811
    from xover.run.external.slurm import job_state

    plan = _plan(tmp_path, 5000)
    started = time.time()
    # niced: the timeout sets how long this takes, not the jobs' speed (slurm.sh: PropagatePrioProcess)
    result = subprocess.run(["nice", "-n", "10", *XOVER, "run", plan, "--launcher", "slurm", "--mode", "crossover",
                             "--timeout", "25", "--json"], capture_output=True, text=True, timeout=400, env=os.environ)
    assert result.returncode == 124, result.stderr[-3000:]  # --timeout ended it, as without Slurm
    assert time.time() - started < 200
    with sqlite3.connect(isolated_results / "xover.db") as db:
        rows = db.execute("SELECT launcher_job_id, status FROM runs").fetchall()
        assert db.execute("SELECT status FROM experiments").fetchall() == [("timeout",)]
    assert rows and {status for _, status in rows} == {"timeout"}, rows
    for job_id in {job_id for job_id, _ in rows}:
        assert job_state(job_id).finished  # cancelled, not left running unwatched


def test_a_comparison_cancelled_while_pending_records_every_run_it_was_to_make(slurm_cluster, isolated_results,  # noqa: F811
                                                                                tmp_path):
    """A group that never started is recorded run by run as it would have run: each job alone, the group
    concurrent, and crossover once per policy (it was recorded as crossover rows alone)."""
    plan = _plan(tmp_path, 12)
    groups = json.loads((tmp_path / "plan.json").read_text())["groups"]
    # a job holding the whole node keeps the plan's jobs pending until --timeout cancels them
    blocker = subprocess.run(["sbatch", "--parsable", "-N1", "--exclusive", "--output", str(tmp_path / "blocker.out"),
                              "--wrap", "sleep 600"], capture_output=True, text=True, timeout=60, check=True,
                             env=os.environ).stdout.strip().split(";")[0]
    try:
        result = subprocess.run([*XOVER, "run", plan, "--launcher", "slurm", "--mode", "all", "--policy", "all",
                                 "--timeout", "10", "--json"], capture_output=True, text=True, timeout=400,
                                env=os.environ)
    finally:
        subprocess.run(["scancel", blocker], timeout=60, env=os.environ)
    assert result.returncode == 124, result.stderr[-3000:]
    assert "RUNNING" not in result.stderr, result.stderr[-3000:]
    with sqlite3.connect(isolated_results / "xover.db") as db:
        rows = db.execute("SELECT group_index, name, mode, policy, status FROM runs").fetchall()
    expected = []
    for index, group in enumerate(groups):
        names = group["jobs"]
        if len(names) == 1:
            expected += [(index, names[0], "sequential", None)]
            continue
        expected += [(index, name, mode, None) for mode in ("sequential", "concurrent") for name in names]
        expected += [(index, name, "crossover", policy) for policy in ("round-robin", "work-conserving")
                     for name in names]
        expected += [(index, name, "adaptive", "work-conserving") for name in names]  # under the first policy

    def order(row):
        return row[0], row[1], row[2], row[3] or ""

    assert sorted((row[:4] for row in rows), key=order) == sorted(expected, key=order)
    assert {row[4] for row in rows} == {"timeout"}


def test_inside_an_allocation_hosts_come_from_slurm(slurm_cluster, isolated_results):  # noqa: F811
    result = subprocess.run(["salloc", "-N1", "--ntasks-per-node=2", *XOVER, "train", "mlp-digits",
                             "--iterations", "3", "--json"], capture_output=True, text=True, timeout=300,
                            env=os.environ)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hosts from the Slurm allocation" in result.stderr
    out = result.stdout[result.stdout.index("{"):]  # salloc may print its own lines first
    [job] = json.loads(out)["jobs"]
    assert job["status"] == "finished" and job["hosts"] == "localhost:2"


def test_a_variable_a_job_file_passes_by_name_reaches_its_ranks_under_export_none(slurm_cluster, isolated_results,  # noqa: F811
                                                                                    tmp_path):
    """Issue 58, finding 4 under Slurm: a plan's job that passes HF_TOKEN by name gets it on the node even
    where sbatch propagates no environment (a site's --export=NONE, here SBATCH_EXPORT naming a few
    variables): the group's batch script exports it, as it does the store's URL; no command line holds it."""
    from secret_checks import PASSED, job_file, run_watching_command_lines

    from xover.scripts import content_hash

    job = job_file(tmp_path, "passed", "", {"HF_TOKEN": PASSED}, "torch")
    script = tmp_path / "check_env_torch.py"
    args = json.loads(job.read_text().split("args = ", 1)[1].splitlines()[0])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({
        "format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 2]], "engine": "torch", "device_kind": "cpu",
        "groups": [{"jobs": ["passed"], "devices": ["localhost:0", "localhost:1"], "wave": 0, "sharing": "alone",
                    "predicted_period_ms": 1.0, "predicted_gain": 1.0, "predicted_duration_ms": 1.0,
                    "predicted_slowdown": {"passed": 1.0}}],
        "jobs": {"passed": {"devices": 2, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1, "iterations": 6,
                            "script": {"path": str(script), "args": args, "engine": "torch",
                                       "sha256": content_hash(script), "env": {}, "pass_env": ["HF_TOKEN"]}}},
        "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1.0, "sequential_makespan_ms": 1.0}))
    env = {**os.environ, "HF_TOKEN": PASSED, "SBATCH_EXPORT": "PATH,HOME,LANG,SLURM_CONF"}
    result, seen = run_watching_command_lines(["run", str(plan), "--launcher", "slurm", "--mode", "sequential",
                                               "--time-limit", "10", "--json"], env, [PASSED])
    assert result.returncode == 0, result.stderr[-4000:]
    [run] = json.loads(result.stdout)["jobs"]
    assert run["status"] == "finished", run
    assert not seen, seen


def test_a_group_planned_under_mps_is_submitted_and_gets_its_daemon_on_its_node(slurm_cluster, isolated_results,
                                                                               tmp_path):  # noqa: F811
    """Issue 58. Before: `--launcher slurm --mode planned` of a plan that put a group under MPS was refused on
    the submitting host, as if --mps were given there (a login node has no GPU: "--mps: nvidia-cuda-mps-control
    was not found", exit 2, nothing submitted). Now the group is submitted, and its own Slurm job starts its
    MPS daemon on its node; this node has no MPS, so the job says so there, in one line, and fails."""
    plan_path = _plan(tmp_path, 12)
    plan = json.loads(open(plan_path).read())
    plan["groups"][0]["sharing"] = "mps"
    plan["groups"][0]["predicted_by_sharing"]["mps"] = plan["groups"][0]["predicted_gain"]
    with open(plan_path, "w") as file:
        json.dump(plan, file)
    result = subprocess.run([*XOVER, "run", plan_path, "--launcher", "slurm", "--mode", "planned", "--time-limit",
                             "10", "--json"], capture_output=True, text=True, timeout=600)
    assert "nvidia-cuda-mps-control was not found" not in result.stderr, result.stderr[-3000:]  # not checked here
    assert result.returncode == 1, result.stderr[-3000:]  # submitted; the group did not finish
    report = json.loads(result.stdout)
    [job_id] = set(report["slurm_jobs"].values())
    assert f"Slurm job {job_id} FAILED" in result.stderr
    [output] = list((isolated_results / "results" / "runs" / report["experiment"]).glob(f"slurm-group0-{job_id}.out"))
    said = output.read_text()
    assert "group 0 was planned under CUDA MPS, which" in said and "nvidia-cuda-mps-control was not found" in said
    assert "Traceback" not in said
    assert {j["status"] for j in report["jobs"]} == {"failed"}
