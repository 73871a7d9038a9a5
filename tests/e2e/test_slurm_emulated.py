"""Slurm across the emulated hosts (scripts/slurm.sh up --emulated): slurmctld on the head, a slurmd on each
host in its own namespaces, munge shared; a job of two nodes gets one task on each host, with the host's
name, address and cores; a plan of two groups across both hosts is two Slurm jobs of two nodes (recording
into PostgreSQL) with the losses of the jobs alone; scancel, a time limit and a lost node are recorded and
leave nothing; `down` leaves no daemon and no folder, also after `xover cluster down` took the namespaces first.

Needs root, Slurm and the emulated cluster's packages: skipped without them on a developer's machine,
failed under CI=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, iteration_losses, require_no_emulated_cluster_yet, wait_for_iterating_runs
from fixtures_services import postgres_server, postgres_url, prometheus  # noqa: F401  (fixtures)

from xover.emulation import cluster
from xover.run.reaper import tagged_processes
from xover.turns.credentials import credentials_folder

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


PAIR = {"mlp-digits": (2, 8), "resnet-digits": (30, 5)}  # job: (compute ms, communication ms) of its trace row
TWO_PAIRS = PAIR | {"mlp-synthetic": (2, 20), "resnet-synthetic": (40, 4)}


def _plan_across_both_hosts(tmp_path: Path, iterations: int = ITERATIONS, jobs: dict = PAIR) -> tuple[Path, list]:
    """A plan from a trace of np=2 jobs on the two hosts' one device each: every group spans both hosts."""
    trace = tmp_path / "trace.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\n" + "".join(
        f"{name},2,{compute},{comm},0.1,{iterations}\n" for name, (compute, comm) in jobs.items()))
    plan = tmp_path / "plan.json"
    made = subprocess.run([*XOVER, "plan", "--profiles", str(trace), "-H", TWO_HOSTS, "--max-group", "2",
                           "--out", str(plan), "--json"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    groups = json.loads(made.stdout)["groups"]  # complementary pairs, each on both hosts' one device
    assert len(groups) == len(jobs) // 2 and all(len(group["jobs"]) == 2 for group in groups), groups
    return plan, groups


def test_a_plan_of_two_groups_across_both_hosts_runs_as_two_slurm_jobs_of_two_nodes(
        slurm_on_hosts, isolated_results, tmp_path, postgres_url, monkeypatch):  # noqa: F811
    """A plan of two groups, each planned on both hosts, submitted from the head: two Slurm jobs of two
    nodes (one after the other: each needs both hosts' one device), inside which each group runs as with
    -H, recording into a PostgreSQL store every node reaches; under crossover every job's losses are
    those of the job alone, per iteration."""
    monkeypatch.setenv("XOVER_DB", postgres_url)
    plan, _ = _plan_across_both_hosts(tmp_path, jobs=TWO_PAIRS)
    slurm_run = _on_head(*XOVER, "run", str(plan), "--launcher", "slurm", "--mode", "sequential,crossover",
                         "--iterations", str(ITERATIONS), "--time-limit", "10", "--json", timeout=900)
    assert slurm_run.returncode == 0, slurm_run.stderr[-4000:]
    report = json.loads(slurm_run.stdout)
    job_ids = set(report["slurm_jobs"].values())
    assert len(job_ids) == 2, report["slurm_jobs"]
    for job_id in job_ids:
        assert f"Slurm job {job_id} COMPLETED" in slurm_run.stderr, slurm_run.stderr[-3000:]
    assert slurm_run.stderr.count("(2 nodes x 1 devices)") == 2, slurm_run.stderr[-3000:]
    # inside each job xover runs on its first node, which it names localhost, as it names this machine
    assert sorted((j["name"], j["mode"]) for j in report["jobs"]) == sorted(
        (name, mode) for name in TWO_PAIRS for mode in ("sequential", "crossover")), report["jobs"]
    assert all(j["status"] == "finished" and j["iterations"] == ITERATIONS and j["hosts"] == "localhost:1,xo-h2:1"
               for j in report["jobs"]), report["jobs"]
    losses = iteration_losses(postgres_url, report["experiment"])
    for name in TWO_PAIRS:
        alone = losses[(name, "sequential")]
        assert len(alone) == ITERATIONS and losses[(name, "crossover")] == alone, name  # exactly, per iteration


def test_prometheus_on_the_head_finds_a_slurm_groups_turn_servers_on_both_nodes(
        slurm_on_hosts, isolated_results, tmp_path, prometheus, monkeypatch):  # noqa: F811
    """A group submitted with --metrics-port serves its figures from its first node; a real Prometheus on
    the head, told only that node's exporter, finds the turn server of each node through its /targets and
    scrapes both, each on its own node, on a port of XOVER_TURN_METRICS_PORTS (the batch script's)."""
    monkeypatch.setenv("XOVER_TURN_METRICS_PORTS", "19470-19473")  # each host is a namespace of its own
    monkeypatch.setenv("XOVER_METRICS_ADDRESS", "0.0.0.0")  # scraped from the head: every interface of the nodes
    plan, _ = _plan_across_both_hosts(tmp_path, iterations=300)
    port, window = 19464, "[10m]"
    # HTTPS with the user's certificate pinned and the bearer token (docs/reference.md): the credentials the
    # submitter made, which the group's first node reads from the same folder (the batch script names it)
    # every second, also each scrape's timeout (TLS to a busy Python process can take past 500 ms on a loaded machine)
    server = prometheus(["xo-h1:19464"], interval="1s", honor_labels=True,
                        http_sd=f"https://xo-h1:{port}/targets", namespace=cluster.HEAD_NS,
                        xover=credentials_folder())
    run = _on_head(*XOVER, "run", str(plan), "--launcher", "slurm", "--mode", "crossover", "--metrics-port",
                   str(port), "--time-limit", "10", "--json", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    hosts = {"xo-h1", "xo-h2"}
    up = server.wait_for(f"max_over_time(xover_turn_server_up{window})",
                         until=lambda result: {s["metric"]["host"] for s in result} == hosts)
    assert {s["metric"]["instance"].split(":")[0] for s in up} == hosts, up  # each scraped on its own node
    assert {int(s["metric"]["instance"].split(":")[1]) for s in up} <= set(range(19470, 19474)), up
    assert {s["metric"]["experiment"] for s in up} == {report["experiment"]}
    held = server.query(f"max_over_time(xover_device_turn_held_seconds_total{window})")
    assert {(s["metric"]["host"], s["metric"]["job"]) for s in held} == {
        (host, job) for host in hosts for job in PAIR}, held
    iterations = server.query(f"max_over_time(xover_job_iterations_total{window})")  # the first node's exporter
    assert {s["metric"]["job"] for s in iterations} == set(PAIR)
    assert not tagged_processes(report["experiment"])


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
    # niced: Slurm's clock (its limits count in minutes) sets how long this takes, not the jobs' speed. Slurm
    # passes the submitter's nice to what runs under slurmd (slurm.sh: PropagatePrioProcess), not to the ranks
    # the first node starts on the second over ssh: those are niced here once they iterate (before, they
    # trained at full priority for the whole minute, beside the other pytest workers' tests)
    xover = subprocess.Popen(["ip", "netns", "exec", cluster.HEAD_NS, "nice", "-n", "10", *XOVER, "run", str(plan),
                              "--launcher", "slurm", "--mode", "crossover", "--time-limit", "1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})
    try:
        [(_, experiment), *_] = wait_for_iterating_runs(isolated_results / "xover.db", runs=2)
        for pid in tagged_processes(experiment):
            with contextlib.suppress(OSError):  # gone already
                os.setpriority(os.PRIO_PROCESS, pid, max(10, os.getpriority(os.PRIO_PROCESS, pid)))
        out, err = xover.communicate(timeout=600)
    finally:
        if xover.poll() is None:
            xover.kill()
    run = subprocess.CompletedProcess(xover.args, xover.returncode, out, err)
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
    [(_, experiment), *_] = wait_for_iterating_runs(isolated_results / "xover.db", runs=2)
    # Slurm takes its SlurmdTimeout to notice: the run's processes on both hosts wait for it niced, so
    # that the other tests on these shared cores go first
    for pid in tagged_processes(experiment):
        with contextlib.suppress(OSError):  # gone already
            os.setpriority(os.PRIO_PROCESS, pid, 10)
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


KILL_WAIT_S = 5  # Slurm's SIGKILL this long after its SIGTERM (30 s by default): shorter than an orderly stop


@contextlib.contextmanager
def _kill_wait(seconds: int):
    """The cluster with `KillWait=seconds` (slurm.conf, `scontrol reconfigure`), then as it was."""
    conf = DIR / "slurm.conf"
    original = conf.read_text()
    conf.write_text(original + f"KillWait={seconds}\n")
    try:
        reconfigured = _on_head("scontrol", "reconfigure")
        assert reconfigured.returncode == 0, reconfigured.stderr
        shown = _on_head("scontrol", "show", "config").stdout
        assert re.search(rf"^KillWait\s*=\s*{seconds} sec", shown, re.M), shown
        yield
    finally:
        conf.write_text(original)
        _on_head("scontrol", "reconfigure")


def _on_host(name: str, pids: list[int]) -> list[int]:
    """Those of `pids` that run on the emulated host `name` (in its network namespace)."""
    namespace = f"net:[{os.stat(cluster.NETNS_RUN / name).st_ino}]"
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/net") == namespace:
                found.append(pid)
    return found


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            lines.append(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode()[:160]}")
    return "; ".join(lines)


def test_a_cancel_under_a_short_kill_wait_leaves_nothing_on_the_other_node(slurm_on_hosts, isolated_results,
                                                                          tmp_path):
    """Issue 52, finding 14, end to end. Inside a Slurm job xover has no reaper, and its orderly stop, over
    ssh, can outlast KillWait, after which Slurm SIGKILLs everything of the job on its first node, and
    nothing stops what runs on the other node (started there through ssh, outside Slurm's tracking).
    Here KillWait is 5 s and the ranks on the second host hang (SIGSTOP: they notice no hang-up, no lost
    peer), as hung ranks do: at the SIGTERM xover stops them first, at once, before the rest."""
    plan, _ = _plan_across_both_hosts(tmp_path, iterations=50000)
    with _kill_wait(KILL_WAIT_S):
        xover = subprocess.Popen(["ip", "netns", "exec", cluster.HEAD_NS, *XOVER, "run", str(plan), "--launcher",
                                  "slurm", "--mode", "crossover", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})
        try:
            job_id, experiment = wait_for_iterating_runs(isolated_results / "xover.db", runs=2)[0]
            elsewhere = _on_host("xo-h2", tagged_processes(experiment))
            ranks = [pid for pid in elsewhere if b"xover.runtime.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            assert ranks, f"no rank of the run on the second node: {_describe(elsewhere)}"
            for pid in ranks:
                os.kill(pid, signal.SIGSTOP)  # hung ranks
            cancelled_at = time.time()
            cancelled = _on_head("scancel", job_id)
            assert cancelled.returncode == 0, cancelled.stderr
            out, err = xover.communicate(timeout=300)
        finally:
            if xover.poll() is None:
                xover.kill()
    assert xover.returncode == 1, err[-3000:]
    assert f"Slurm job {job_id} CANCELLED" in err, err[-3000:]
    # Slurm's SIGKILL came KILL_WAIT_S after its SIGTERM; what xover stopped, it stopped before (or its
    # sweep of the other node was killed with it). The bound leaves the hosts' sshd and the reaper time.
    deadline = cancelled_at + KILL_WAIT_S + 20
    while (left := _on_host("xo-h2", tagged_processes(experiment))) and time.time() < deadline:
        time.sleep(0.5)
    for pid in left:  # not left for the tests after this one
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the run left on the second node: {_describe(left)}"
    assert not tagged_processes(experiment), "processes of the run left on a node"


def test_down_leaves_no_daemon_and_no_folder_even_after_the_hosts_went_first(slurm_on_hosts):
    pids = _daemon_pids()
    assert len(pids) == 4, pids  # munged, slurmctld, a slurmd per host
    cluster.cluster_down()  # the hosts' namespaces first, with the slurmd inside them
    stopped = _slurm_sh("down", timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    assert not DIR.exists()
    assert not [pid for pid in pids if _alive(pid)]
    assert _slurm_sh("status").returncode == 3
