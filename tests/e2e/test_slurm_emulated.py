"""Slurm across the emulated hosts (scripts/slurm.sh up --emulated): slurmctld on the head, a slurmd on each
host in its own namespaces, munge shared; a job of two nodes gets one task on each host, with the host's
name, address and cores; a plan's group across both hosts is one Slurm job of two nodes (recording into
PostgreSQL) with the losses of -H; scancel, a time limit and a lost node are recorded and leave nothing;
`down` leaves no daemon and no folder, also after `xover cluster down` took the namespaces first.

Needs root, Slurm and the emulated cluster's packages: skipped without them on a developer's machine,
failed under CI=true.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, iteration_losses, require_no_emulated_cluster_yet, wait_for_iterating_runs

from fixtures_services import postgres_server, postgres_url  # noqa: F401  (fixtures)
from xover.launch import cluster
from xover.run.reaper import tagged_processes

XOVER = [sys.executable, "-m", "xover"]
TWO_HOSTS = "xo-h1:1,xo-h2:1"
ITERATIONS = 8
SLURM_SH = ROOT / "scripts" / "slurm.sh"
DIR = Path("/tmp/xover-slurm-emulated")  # slurm.sh's default for --emulated


def _slurm_sh(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SLURM_SH), *args, "--emulated"], capture_output=True, text=True, timeout=timeout)


def _on_head(*command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A Slurm client on the cluster's head node (its login node)."""
    return subprocess.run(["ip", "netns", "exec", cluster.HEAD_NS, *command], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})


def _daemon_pids() -> list[int]:
    pids = []
    for file in (DIR / "run").glob("*.pid") if (DIR / "run").is_dir() else []:
        text = file.read_text().strip()
        if text.isdigit():
            pids.append(int(text))
    return pids


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture(scope="module")
def slurm_on_hosts():
    require_no_emulated_cluster_yet()
    cluster.cluster_up(2, 1, "1gbit")
    try:
        started = _slurm_sh("up")
        assert started.returncode == 0, started.stderr[-3000:]
        yield cluster.read_state()
    finally:
        _slurm_sh("down", timeout=300)
        cluster.cluster_down()


def test_a_two_node_job_runs_one_task_on_each_emulated_host(slurm_on_hosts):
    nodes = _on_head("sinfo", "-h", "-N", "-p", "emulated", "-o", "%N %T %c")
    assert nodes.returncode == 0, nodes.stderr
    assert sorted(nodes.stdout.split("\n")[:-1]) == ["xo-h1 idle 1", "xo-h2 idle 1"], nodes.stdout

    where = _on_head("srun", "-N", "2", "-l", "sh", "-c",
                     "echo $(hostname) $SLURM_JOB_NODELIST $(ip -4 -o addr show eth0 | awk '{print $4}') "
                     "$(grep Cpus_allowed_list /proc/self/status | cut -f2)")
    assert where.returncode == 0, where.stderr
    hosts = {host["name"]: host for host in slurm_on_hosts["hosts"]}
    lines = sorted(line.split(": ", 1)[1].split() for line in where.stdout.strip().splitlines())
    assert [line[0] for line in lines] == ["xo-h1", "xo-h2"], where.stdout
    for name, nodelist, address, cores in lines:
        assert nodelist == "xo-h[1-2]"
        assert address == f"{hosts[name]['address']}/24"  # the host's own NIC: its traffic is shaped
        assert cores == ",".join(map(str, hosts[name]["cores"]))  # the host's cores, not the machine's


def test_a_batch_job_of_two_nodes_is_started_on_the_first_and_steps_reach_both(slurm_on_hosts, tmp_path):
    output = tmp_path / "job.out"
    submitted = _on_head("sbatch", "--parsable", "-N", "2", "-o", str(output), "--wrap",
                         "hostname; scontrol show hostnames $SLURM_JOB_NODELIST | tr '\\n' ' '; echo; srun hostname | sort")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = _on_head("scontrol", "show", "job", job).stdout
        if "JobState=COMPLETED" in state or "JobState=FAILED" in state:
            break
        time.sleep(0.5)
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state
    assert output.read_text().split("\n")[:-1] == ["xo-h1", "xo-h1 xo-h2 ", "xo-h1", "xo-h2"], output.read_text()


def _plan_across_both_hosts(tmp_path: Path, iterations: int = ITERATIONS) -> tuple[Path, dict]:
    trace = tmp_path / "trace.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\n"
                     f"mlp-digits,2,2,8,0.1,{iterations}\nresnet-digits,2,30,5,0.1,{iterations}\n")
    plan = tmp_path / "plan.json"
    made = subprocess.run([*XOVER, "plan", "--profiles", str(trace), "-H", TWO_HOSTS, "--max-group", "2",
                           "--out", str(plan), "--json"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    [group] = json.loads(made.stdout)["groups"]  # complementary: one group on both hosts' one device each
    assert len(group["jobs"]) == 2, group
    return plan, group


def test_a_group_across_both_hosts_runs_as_one_slurm_job_of_two_nodes(slurm_on_hosts, isolated_results, tmp_path,
                                                                       postgres_url, monkeypatch):  # noqa: F811
    """A plan's group planned on both hosts, submitted from the head: one Slurm job of two nodes, inside
    which the group runs as with -H, recording into a PostgreSQL store every node reaches; its losses
    are those of the same group run with -H."""
    monkeypatch.setenv("XOVER_DB", postgres_url)
    plan, group = _plan_across_both_hosts(tmp_path)
    slurm_run = _on_head(*XOVER, "run", str(plan), "--launcher", "slurm", "--mode", "crossover",
                         "--iterations", str(ITERATIONS), "--time-limit", "10", "--json", timeout=900)
    assert slurm_run.returncode == 0, slurm_run.stderr[-4000:]
    report = json.loads(slurm_run.stdout)
    [job_id] = set(report["slurm_jobs"].values())
    assert f"Slurm job {job_id} COMPLETED" in slurm_run.stderr and "(2 nodes x 1 devices)" in slurm_run.stderr
    # inside the job xover runs on the first node, which it names localhost, as it names this machine
    assert all(j["status"] == "finished" and j["iterations"] == ITERATIONS and j["hosts"] == "localhost:1,xo-h2:1"
               for j in report["jobs"]), report["jobs"]
    with_h = subprocess.run([*XOVER, "run", "--group", *group["jobs"], "-H", TWO_HOSTS, "--mode", "crossover",
                             "--iterations", str(ITERATIONS), "--json"], capture_output=True, text=True, timeout=900)
    assert with_h.returncode == 0, with_h.stderr[-4000:]
    through_slurm = iteration_losses(postgres_url, report["experiment"])
    direct = iteration_losses(postgres_url, json.loads(with_h.stdout)["experiment"])
    assert through_slurm == direct and len(direct) == 2, (through_slurm, direct)  # exactly, per iteration


def test_scancel_of_a_group_running_on_both_nodes_records_it_and_leaves_nothing(slurm_on_hosts, isolated_results,
                                                                                 tmp_path):
    plan, _ = _plan_across_both_hosts(tmp_path, iterations=5000)
    xover = subprocess.Popen(["ip", "netns", "exec", cluster.HEAD_NS, *XOVER, "run", str(plan), "--launcher", "slurm",
                              "--mode", "crossover", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})
    job_id, experiment = wait_for_iterating_runs(isolated_results / "xover.db", runs=2)[0]  # both jobs, both nodes
    cancelled = _on_head("scancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    out, err = xover.communicate(timeout=300)
    assert xover.returncode == 1, err[-3000:]  # the group did not finish
    assert f"Slurm job {job_id} CANCELLED" in err
    assert {j["status"] for j in json.loads(out)["jobs"]} == {"cancelled"}
    deadline = time.time() + 30  # the sweep of the hosts after Slurm killed the batch step
    while tagged_processes(experiment) and time.time() < deadline:
        time.sleep(1)
    assert not tagged_processes(experiment), "processes of the run left on a node"


def test_a_time_limit_hit_on_both_nodes_is_recorded_as_timeout(slurm_on_hosts, isolated_results, tmp_path):
    plan, _ = _plan_across_both_hosts(tmp_path, iterations=50000)
    run = _on_head(*XOVER, "run", str(plan), "--launcher", "slurm", "--mode", "crossover", "--time-limit", "1",
                   "--json", timeout=600)
    assert run.returncode == 1, run.stderr[-3000:]
    report = json.loads(run.stdout)
    [job_id] = set(report["slurm_jobs"].values())
    assert f"Slurm job {job_id} TIMEOUT" in run.stderr, run.stderr[-3000:]
    assert {j["status"] for j in report["jobs"]} == {"timeout"}, report["jobs"]
    assert not tagged_processes(report["experiment"]), "processes of the run left on a node"


def test_inside_salloc_of_two_nodes_a_group_takes_its_hosts_from_the_allocation(slurm_on_hosts, isolated_results):
    run = _on_head("salloc", "-N", "2", *XOVER, "run", "--group", "mlp-digits", "resnet-digits", "--mode", "crossover",
                   "--iterations", str(ITERATIONS), "--json", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "hosts from the Slurm allocation" in run.stderr
    jobs = json.loads(run.stdout[run.stdout.index("{"):])["jobs"]  # salloc may print its own lines first
    assert all(j["status"] == "finished" and j["hosts"] == TWO_HOSTS and j["iterations"] == ITERATIONS
               for j in jobs), jobs


def test_a_node_whose_slurmd_dies_fails_the_group_and_leaves_nothing(slurm_on_hosts, isolated_results, tmp_path):
    plan, _ = _plan_across_both_hosts(tmp_path, iterations=50000)
    xover = subprocess.Popen(["ip", "netns", "exec", cluster.HEAD_NS, *XOVER, "run", str(plan), "--launcher", "slurm",
                              "--mode", "crossover", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})
    wait_for_iterating_runs(isolated_results / "xover.db", runs=2)
    slurmd = int((DIR / "run" / "slurmd-xo-h2.pid").read_text())
    os.kill(slurmd, signal.SIGKILL)  # the second host's slurmd: Slurm loses the node
    try:
        out, err = xover.communicate(timeout=400)
        assert xover.returncode == 1, err[-3000:]
        report = json.loads(out)
        [job_id] = set(report["slurm_jobs"].values())
        assert f"Slurm job {job_id} NODE_FAIL" in err, err[-3000:]
        assert {j["status"] for j in report["jobs"]} == {"failed"}, report["jobs"]
        deadline = time.time() + 30
        while tagged_processes(report["experiment"]) and time.time() < deadline:
            time.sleep(1)
        assert not tagged_processes(report["experiment"]), "processes of the run left on a node"
    finally:
        restarted = _slurm_sh("up")  # the cluster again, for the tests after this one
        assert restarted.returncode == 0, restarted.stderr[-3000:]


def test_down_leaves_no_daemon_and_no_folder_even_after_the_hosts_went_first(slurm_on_hosts):
    pids = _daemon_pids()
    assert len(pids) == 4, pids  # munged, slurmctld, a slurmd per host
    cluster.cluster_down()  # the hosts' namespaces first, with the slurmd inside them
    stopped = _slurm_sh("down", timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    assert not DIR.exists()
    assert not [pid for pid in pids if _alive(pid)]
    assert _slurm_sh("status").returncode == 3
