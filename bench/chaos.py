"""Fault injection: many runs, each hit once at a random time, and what they leave behind.

Each trial starts a two-job group (crossover, concurrent or adaptive, horovod or torch, on this machine or on
two hosts of the emulated cluster when one can be built) and then, after the jobs have started
iterating, does one of:
  kill-rank   SIGKILL a random rank of a random job
  stop-rank   SIGSTOP a random rank of a random job (it hangs; its turn's lease and --timeout end it,
              or its engine first: Horovod's Gloo fails the other ranks after 30 s)
  kill-xover  SIGKILL xover itself (its reaper must stop everything and mark the rows lost)
  stop-server SIGSTOP the group's turn server (one host's, on the cluster) in crossover or adaptive: its workers
              must stop waiting for it within 30 s (it says nothing: no keep-alives) and train on
              without turns; both jobs finish (--timeout 180 s here: the run's usual 120 plus that wait)
  stalled-ssh on the emulated cluster, SIGSTOP the second host's sshd before the run starts (a host
              that accepts connections and never answers): the run must fail within ssh's
              ConnectTimeout and leave nothing behind (without a cluster: stop-server)
  forged-output  write lines that look like xover's metric records (an end, an exit, records without
              the run's token or with another, malformed JSON, a 100 KiB line) into a random rank's
              standard output, as a training script's own output could: both jobs must run to their
              end with exactly their own rows (docs/security.md; --timeout 180 s). Under Horovod only:
              its ranks write into a pipe, where a line from outside is one more line of the rank's;
              torchrun's ranks write a log file at their own offset, which would overwrite what was
              appended from outside (the torch engine's forged lines are tests/e2e/test_forged_metrics.py)
  stop-waiter in crossover, SIGSTOP a rank while it waits for its turn (blocked in recv on the turn
              socket), for STOP_WAITER_S, with keep-alives every 1 ms (XOVER_TURN_HEARTBEAT), the kernel's
              smallest send buffer (XOVER_TURN_SEND_BUFFER) and round robin, so that its socket fills
              before its grant: the turn server must not stall (a grant to the full socket fails at once,
              and that job loses its turns on every device, its other ranks told so), the partner must
              not stall, both jobs must finish, and a job that lost its slot must say so in its record
              (docs/security.md). Where the grant came before the socket filled, the stopped holder's
              lease is revoked instead; `filled` counts the trials where the socket did fill (the
              server's `unwritable` event), and `drops` lists each trial's unwritable, lease-revoked and
              released events (job, device, why, seconds after the stop)
  slurm-pause the group runs through Slurm (`--launcher slurm`, the single-node cluster of
              scripts/slurm.sh, brought up when missing); SIGSTOP slurmctld for 25 s, more than
              Slurm's MessageTimeout, so that xover's queries of the job time out (a transient
              Slurm error): both jobs must finish and be recorded as such
It then counts, and the target for each is 0:
  survivor stalls   iterations over 1 s of the job that was not hit, after the fault
  orphans           processes of the run still alive 10 s after xover ended
  stale sockets     the run's turn sockets and yield pages left in the runtime folder
  stale leases      devices still leased once xover ended
  stale namespaces  network namespaces of the run left (shaped links; emulated clusters are kept)
  rows not terminal runs or experiments still pending/running
  metrics lost      a survivor that finished without a row for each of its iterations

    .venv/bin/python bench/chaos.py [--trials 50] [--seed 1] [--engines horovod torch] [--no-cluster]
        [--faults kill-rank stop-rank kill-xover stop-server stalled-ssh forged-output slurm-pause stop-waiter]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xover.emulation import cluster  # noqa: E402
from xover.records import MARKER  # noqa: E402
from xover.run.leases import DeviceLeases  # noqa: E402
from xover.run.supervise import tagged_processes  # noqa: E402
from xover.turns.service import runtime_dir  # noqa: E402

XOVER = [sys.executable, "-m", "xover"]
JOBS = ("mlp-digits", "resnet-digits")
ITERATIONS = {"mlp-digits": 1500, "resnet-digits": 250}  # about as long as each other alone
FAULTS = (
    "kill-rank",
    "stop-rank",
    "kill-xover",
    "stop-server",
    "stalled-ssh",
    "forged-output",
    "slurm-pause",
    "stop-waiter",
)
STOP_WAITER_S = 12  # its socket full of keep-alives after 3 s; less than Gloo's 30 s, so its job lives on
WAITER_HEARTBEAT_S = "0.001"  # a keep-alive every 1 ms, the shortest the server keeps (epoll waits whole ms)
# The server's send buffer per worker at the kernel's minimum (asked for 1 byte, given 4608 here): 6 unread
# keep-alives fill it, in under a millisecond. With the default buffer (212992 bytes here) 278 are needed,
# about 30 ms at this heartbeat, and the partner's release (every 2-30 ms for this pair) granted the turn to
# the stopped rank first in every trial: its lease was revoked, and the full socket was never reached.
WAITER_SEND_BUFFER = "1"
# Round robin: a waiter waits for its partner's whole phase (work-conserving has the holder yield to it
# within a layer, or takes it first), long enough for its 6 keep-alives to fill the socket before its grant.
WAITER_POLICY = "round-robin"
SLURM_SH = ROOT / "scripts" / "slurm.sh"
SLURM_PAUSE_S = 25  # longer than slurmctld's MessageTimeout (10 s by default): a query times out
SHORT_LEASE = "floor=0.5,factor=5,initial=20"  # a stopped rank holding a turn loses it within a second


def _query(db: Path, sql: str, *params):
    for _ in range(50):
        try:
            with sqlite3.connect(db) as connection:
                return connection.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            time.sleep(0.1)
    return []


def _workers(experiment: str) -> list[tuple[int, str]]:
    """(pid, job) of every rank of the run: processes tagged with it that run xover's worker."""
    found = []
    for pid in tagged_processes(experiment):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            variables = dict(
                item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
            )
        except OSError:
            continue
        if b"xover.runtime.worker" in command and b"torchrun" not in command.split(b"\0")[0]:
            found.append((pid, variables.get(b"XOVER_JOB", b"?").decode()))
    return found


def _private_namespaces(pids: list[int]) -> set[str]:
    """The network namespaces that processes left by a run keep alive, other than this machine's own and the
    emulated cluster's (which outlive runs by design): a run's shaped link lives exactly as long as these."""
    kept = {os.readlink("/proc/self/ns/net")}
    for name in cluster.live_namespaces():
        try:
            kept.add(_namespace_id(name))
        except OSError:
            pass
    found = set()
    for pid in pids:
        try:
            found.add(os.readlink(f"/proc/{pid}/ns/net"))
        except OSError:
            continue
    return found - kept


def _namespace_id(name: str) -> str:
    """'net:[inode]' of a named namespace, as /proc/PID/ns/net reads."""
    return f"net:[{os.stat(cluster.NETNS_RUN / name).st_ino}]"


def _turn_servers(experiment: str) -> list[int]:
    found = []
    for pid in tagged_processes(experiment):
        try:
            if b"xover.turns.server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _sshd_of(host: str) -> int | None:
    for entry in (cluster.read_state() or {}).get("hosts", []):
        if entry.get("name") == host:
            return entry.get("sshd_pid")
    return None


def _forge_output(pid: int, rng: random.Random) -> None:
    """Append look-alikes of xover's metric records to the standard output of a rank (a pipe to its
    launcher, or the log file torchrun tails), as a training script printing them would."""
    token = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    forged = [
        {"kind": "end", "iterations": 1, "samples_per_s": 1.0},
        {"kind": "exit", "code": 0},
        {"kind": "iter", "step": 3, "time_s": 1.0, "samples": 8, "token": token},
        {"kind": "iter", "step": 10**9, "time_s": "soon", "token": token},
        {"kind": "end", "iterations": 2, "peak_memory_gb": 123.0, "token": token},
    ]
    lines = [MARKER + json.dumps(record) for record in forged]
    lines += [MARKER + '{"kind": "iter", "step": ', "[rank0]:" + MARKER + '{"kind":"start"}', MARKER + "x" * 100_000]
    descriptor = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
    try:
        for line in lines:
            try:
                os.write(descriptor, (line + "\n").encode())
            except BlockingIOError:  # a full pipe: the launcher is behind; what got in is enough
                break
    finally:
        os.close(descriptor)


def _waiting_for_turn(pid: int) -> bool:
    """Is the rank's main thread blocked on its turn socket? The turn client waits in poll() of that one
    socket (x86-64 syscall 7, one descriptor; its timeout is the silence limit), then recv(); the main
    thread polls nothing else alone (Horovod's waits sleep, Gloo's collectives wait on a futex)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
        call = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return wchan == "unix_stream_read_generic" or (len(call) > 2 and call[0] == "7" and call[2] == "0x1")


def _device_of(pid: int) -> int | None:
    """The device whose turns a local rank asks for: its local rank's entry of XOVER_DEVICES ('0,1')."""
    try:
        variables = dict(
            item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
        )
        local_rank = int(variables.get(b"HOROVOD_LOCAL_RANK") or variables[b"LOCAL_RANK"])
        return int(variables[b"XOVER_DEVICES"].decode().split(",")[local_rank])
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _stop_a_waiter(workers: list[tuple[int, str]], rng: random.Random) -> tuple[int, str] | None:
    """SIGSTOP a rank caught waiting for its turn (tried for up to 20 s); the rank, or None."""
    deadline = time.time() + 20
    while workers and time.time() < deadline:
        pid, job = rng.choice(workers)
        if _waiting_for_turn(pid):
            os.kill(pid, signal.SIGSTOP)
            if _waiting_for_turn(pid):  # still there once stopped (not granted in between)
                return pid, job
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    return None


def _slurm_plan(folder: Path) -> Path:
    """A plan of the chaos pair as one group of two devices, from figures (not profiles)."""
    plan = folder / "slurm-plan.json"
    if not plan.exists():
        trace = folder / "slurm-trace.csv"
        trace.write_text(
            "name,devices,compute_ms,comm_ms,memory_gb,iterations\n"
            + "".join(
                f"{name},2,{compute},{comm},0.1,{ITERATIONS[name]}\n"
                for name, compute, comm in (("mlp-digits", 2, 8), ("resnet-digits", 30, 5))
            )
        )
        subprocess.run(
            [*XOVER, "plan", "--profiles", str(trace), "--devices", "2", "--max-group", "2", "--out", str(plan)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return plan


def _slurmctld() -> int | None:
    found = subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


def trial(
    number: int,
    rng: random.Random,
    engine: str,
    on_cluster: bool,
    folder: Path,
    faults: tuple[str, ...] = FAULTS,
    cluster_built: bool = False,
) -> dict:
    fault = faults[number % len(faults)]  # in turn, so that a few trials already meet each
    if fault == "stalled-ssh":
        if cluster_built:
            on_cluster = True
        else:
            fault = "stop-server"
    through_slurm = fault == "slurm-pause"
    if fault == "forged-output":
        engine = "horovod"
    if through_slurm:
        on_cluster = False  # Slurm's one node is this machine
    if fault == "stop-waiter":
        on_cluster = False  # wchan of this machine's ranks
    # adaptive too: its switches between turns and none, and its controller, meet the same faults
    mode = (
        "crossover"
        if fault == "stop-waiter"  # a rank waiting for its turn: adaptive without turns has none
        else rng.choice(["crossover", "adaptive"])
        if fault in ("stop-server", "slurm-pause")
        else rng.choice(["crossover", "concurrent", "adaptive"])
    )
    db = folder / f"trial{number}.db"
    recipes = folder / "recipes"
    recipes.mkdir(exist_ok=True)
    for name, count in ITERATIONS.items():  # own copies: --iterations would give both jobs one length
        text = (ROOT / "recipes" / f"{name}.toml").read_text()
        lines = [
            f"iterations = {count}"
            if line.startswith("iterations")
            else "eval_interval = 0"
            if line.startswith("eval_interval")
            else line
            for line in text.splitlines()
        ]
        (recipes / f"{name}.toml").write_text("\n".join(lines) + "\n")
    shaped = (
        not on_cluster and not through_slurm and rng.random() < 0.5
    )  # a private shaped network, which must go with the run
    hosts = ["-H", "xo-h1:1,xo-h2:1"] if on_cluster else ["--bandwidth", "1gbit"] if shaped else []
    if through_slurm:
        command = [
            *XOVER,
            "--db",
            str(db),
            "run",
            str(_slurm_plan(folder)),
            "--launcher",
            "slurm",
            "--mode",
            mode,
            "--engine",
            engine,
            "--time-limit",
            "10",
            "--json",
        ]
    else:
        command = [
            *XOVER,
            "--db",
            str(db),
            "run",
            "--group",
            *(str(recipes / f"{n}.toml") for n in JOBS),
            *hosts,
            "--mode",
            mode,
            "--engine",
            engine,
            "--timeout",
            "180" if fault in ("stop-server", "forged-output", "stop-waiter") else "120",
            "--json",
            *(["--policy", WAITER_POLICY] if fault == "stop-waiter" else []),
        ]
    env = {
        **os.environ,
        "XOVER_TURN_LEASE": SHORT_LEASE,
        "XOVER_RESULTS": str(folder / "results"),
        **(
            {"XOVER_TURN_HEARTBEAT": WAITER_HEARTBEAT_S, "XOVER_TURN_SEND_BUFFER": WAITER_SEND_BUFFER}
            if fault == "stop-waiter"
            else {}
        ),
    }
    stalled_sshd = _sshd_of("xo-h2") if fault == "stalled-ssh" else None
    if stalled_sshd:
        os.kill(stalled_sshd, signal.SIGSTOP)  # accepts connections (the kernel does), answers none
    try:
        xover = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + (240 if through_slurm else 120)
        while (
            fault != "stalled-ssh"
            and time.time() < deadline
            and xover.poll() is None
            and (_query(db, "SELECT COUNT(*) FROM iteration_metrics") or [(0,)])[0][0] < 5
        ):
            time.sleep(0.2)
        if fault != "stalled-ssh":
            time.sleep(rng.uniform(0.5, 4.0))
        experiment = (_query(db, "SELECT id FROM experiments") or [("?",)])[0][0]
        workers = _workers(experiment)
        hit_job, hit_at, stopped_device = None, time.time(), None
        if fault == "kill-xover":
            xover.kill()
        elif fault == "stop-server":
            servers = _turn_servers(experiment)
            if servers:
                os.kill(rng.choice(servers), signal.SIGSTOP)
                hit_job = "turn server"
        elif fault in ("kill-rank", "stop-rank") and workers:
            pid, hit_job = rng.choice(workers)
            os.kill(pid, signal.SIGKILL if fault == "kill-rank" else signal.SIGSTOP)
        elif fault == "forged-output" and workers:
            pid, hit_job = rng.choice(workers)
            _forge_output(pid, rng)
        elif fault == "stop-waiter" and (stopped_waiter := _stop_a_waiter(workers, rng)):
            hit_job = stopped_waiter[1]
            stopped_device = _device_of(stopped_waiter[0])
            try:
                time.sleep(STOP_WAITER_S)
            finally:
                os.kill(stopped_waiter[0], signal.SIGCONT)
        elif fault == "slurm-pause" and (controller := _slurmctld()):
            hit_job = "slurmctld"
            os.kill(controller, signal.SIGSTOP)
            try:
                time.sleep(SLURM_PAUSE_S)
            finally:
                os.kill(controller, signal.SIGCONT)
        try:
            xover.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            xover.kill()
            xover.communicate()
            return {"trial": number, "fault": fault, "hung": 1}
    finally:
        if stalled_sshd:
            os.kill(stalled_sshd, signal.SIGCONT)
    if experiment == "?":  # xover had not recorded it yet when the fault came (stalled-ssh: at once)
        experiment = (_query(db, "SELECT id FROM experiments") or [("?",)])[0][0]
    ended = time.time()
    while time.time() < ended + 10 and tagged_processes(experiment):
        time.sleep(0.5)
    if fault == "kill-xover":  # the reaper marks the rows; give it its seconds
        while (
            time.time() < ended + 30
            and _query(db, "SELECT COUNT(*) FROM runs WHERE status IN ('pending', 'running')")[0][0]
        ):
            time.sleep(0.5)
    stopped = [pid for pid in tagged_processes(experiment)]
    namespaces = _private_namespaces(stopped)
    for pid in stopped:  # count them, then do not leave them for the next trial
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    survivors = (
        [job for job in JOBS if job != hit_job]
        if fault in ("kill-rank", "stop-rank")
        else list(JOBS)
        if fault in ("stop-server", "forged-output", "slurm-pause", "stop-waiter")
        else []
    )
    stalls = lost = unfinished = 0
    for job in survivors:
        rows = _query(
            db,
            "SELECT m.wall_time, m.iteration_s FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
            "WHERE r.name = ? ORDER BY m.step",
            job,
        )
        if fault != "stop-server" and not (fault == "stop-waiter" and job == hit_job):
            # stop-server: both jobs wait up to the silence limit once, by design; stop-waiter: the
            # stopped job's own iteration lasts as long as it was stopped
            stalls += sum(1 for wall, seconds in rows if wall > hit_at and seconds > 1.0)
        if (
            fault in ("stop-server", "forged-output", "slurm-pause", "stop-waiter")
            and (_query(db, "SELECT status FROM runs WHERE name = ?", job) or [("?",)])[0][0] != "finished"
        ):
            unfinished += 1
        status = _query(db, "SELECT status, iterations_planned FROM runs WHERE name = ?", job)
        if status and status[0][0] == "finished" and len(rows) != ITERATIONS[job]:
            lost += abs(ITERATIONS[job] - len(rows))  # a forged row counts as much as a lost one
    leases = DeviceLeases("chaos check")
    devices = {("xo-h1", 0), ("xo-h2", 0)} if on_cluster else {("localhost", 0), ("localhost", 1)}
    busy = leases.try_acquire(devices)
    leases.release()
    # stop-waiter: a job that lost its slot (the server found its socket full) says so in its record;
    # `filled`: the stopped rank's own slot was dropped so (its job and device); `wrongly_dropped`: any
    # other rank's was (a rank that reads its keep-alives must never lose its slot)
    filled = unsaid = wrongly_dropped = revoked = 0
    # [job, device, why, seconds after the stop] of each `unwritable`, then `lease-revoked` and `released` event
    drops = []
    if fault == "stop-waiter":
        dropped = _query(
            db,
            "SELECT r.name, e.device, r.turn_stats, e.detail FROM turn_events e JOIN runs r ON r.id = e.run_id "
            "WHERE e.kind = 'unwritable'",
        )
        drops = [
            [
                name,
                device,
                json.loads(detail or "{}").get("reason"),
                round(json.loads(detail or "{}").get("wall_time", hit_at) - hit_at, 3),
            ]
            for name, device, _, detail in dropped
        ]
        filled = sum(1 for name, device, _, _ in dropped if name == hit_job and device == stopped_device)
        wrongly_dropped = len(dropped) - filled
        unsaid = sum(1 for _, _, stats, _ in dropped if not stats or '"lost"' not in stats)
        revoked = _query(db, "SELECT COUNT(*) FROM turn_events WHERE kind = 'lease-revoked'")[0][0]
        drops += [
            [name, device, kind, round(json.loads(detail or "{}").get("wall_time", hit_at) - hit_at, 3)]
            for name, device, kind, detail in _query(
                db,
                "SELECT r.name, e.device, e.kind, e.detail FROM turn_events e JOIN runs r ON r.id = e.run_id "
                "WHERE e.kind IN ('lease-revoked', 'released')",
            )
        ]
    not_terminal = (
        _query(db, "SELECT COUNT(*) FROM runs WHERE status IN ('pending', 'running')")[0][0]
        + _query(db, "SELECT COUNT(*) FROM experiments WHERE status = 'running'")[0][0]
    )
    return {
        "trial": number,
        "fault": fault,
        "mode": mode,
        "engine": engine,
        "hosts": "cluster" if on_cluster else "slurm" if through_slurm else "local shaped" if shaped else "local",
        "hit": hit_job or ("xover" if fault == "kill-xover" else "-"),
        "stalls": stalls,
        "orphans": len(stopped),
        "sockets": len([f for f in os.listdir(runtime_dir()) if f.startswith(experiment)]),
        "leases": len(busy),
        "namespaces": len(namespaces),
        "not_terminal": not_terminal,
        "metrics_lost": lost,
        "hung": 0,
        "unfinished": unfinished,
        "unsaid": unsaid,
        "wrongly_dropped": wrongly_dropped,
        "filled": filled,
        "revoked": revoked,
        "stopped_device": stopped_device,
        "drops": drops,
        "seconds": round(time.time() - hit_at, 1),
        "statuses": dict(_query(db, "SELECT name, status FROM runs")),
    }


COUNTS = (
    "stalls",
    "orphans",
    "sockets",
    "leases",
    "namespaces",
    "not_terminal",
    "metrics_lost",
    "hung",
    "unfinished",
    "unsaid",
    "wrongly_dropped",
)


def _slurm_up() -> bool:
    """The single-node Slurm cluster for slurm-pause, brought up when it is not running (True: this run
    started it, and takes it down); its clients pointed at it through SLURM_CONF."""
    running = subprocess.run(["bash", str(SLURM_SH), "status"], capture_output=True, timeout=60).returncode == 0
    if not running:
        started = subprocess.run(["bash", str(SLURM_SH), "up"], capture_output=True, text=True, timeout=900)
        if started.returncode != 0:
            sys.exit(
                f"chaos: slurm-pause needs Slurm, and scripts/slurm.sh up failed: {started.stderr.strip()[-500:]} "
                "(leave slurm-pause out of --faults to run without it)"
            )
    line = subprocess.run(["bash", str(SLURM_SH), "env"], capture_output=True, text=True, timeout=30).stdout.strip()
    os.environ["SLURM_CONF"] = line.split("=", 1)[1].strip("'\"")
    return not running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engines", nargs="+", default=["horovod", "torch"])
    parser.add_argument("--no-cluster", action="store_true", help="only this machine, no emulated hosts")
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS, help="the faults to take in turn")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    use_cluster = (
        not args.no_cluster
        and not cluster.missing_requirements()
        and cluster.read_state() is None
        and not set(args.faults) <= {"stop-waiter", "slurm-pause"}
    )  # those two run on this machine only
    built = slurm_started = False
    results = []
    try:
        if "slurm-pause" in (args.faults[number % len(args.faults)] for number in range(args.trials)):
            slurm_started = _slurm_up()
        if use_cluster:
            cluster.cluster_up(2, 1, "1gbit")
            built = True
        with tempfile.TemporaryDirectory() as tmp:
            for number in range(args.trials):
                on_cluster = built and rng.random() < 0.4
                result = trial(number, rng, rng.choice(args.engines), on_cluster, Path(tmp), tuple(args.faults), built)
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        if built:
            cluster.cluster_down()
        if slurm_started:
            subprocess.run(["bash", str(SLURM_SH), "down"], capture_output=True, timeout=180)
    leftover_namespaces = [ns for ns in cluster.live_namespaces()] if built else []
    print(
        f"\n{len(results)} trials ({sum(r.get('hosts') == 'cluster' for r in results)} on two emulated hosts); "
        f"faults: " + ", ".join(f"{f} {sum(r['fault'] == f for r in results)}" for f in FAULTS if f in args.faults)
    )
    for key in COUNTS:
        print(f"  {key:14} {sum(r.get(key, 0) for r in results)}")
    print(f"  namespaces left after the cluster went down: {len(leftover_namespaces)}")
    waiters = [r for r in results if r["fault"] == "stop-waiter" and r.get("hit", "-") != "-"]
    if any(r["fault"] == "stop-waiter" for r in results):  # what the fault is for: the full socket reached
        print(
            f"  stop-waiter: {len(waiters)} trials stopped a waiting rank; its socket filled (slot lost) in "
            f"{sum(r.get('filled', 0) > 0 for r in waiters)}, its held turn's lease was revoked in "
            f"{sum(r.get('filled', 0) == 0 and r.get('revoked', 0) > 0 for r in waiters)}"
        )
    if any(sum(r.get(key, 0) for r in results) for key in COUNTS) or leftover_namespaces:
        sys.exit(1)


if __name__ == "__main__":
    main()
