"""The turn server with real processes on a real Unix socket: scripted clients check the policies'
properties (the same order on every device, work conservation, preemption at a checkpoint), and
the server's handling of departures, deaths, duplicates, leases and its start barrier."""

import difflib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from xover.runtime.turn_client import CrossoverToken
from xover.turns.server import parse_devices, parse_traits


def test_parse_devices_and_traits():
    assert parse_devices(["0=0,1", "1=1"]) == {0: [0, 1], 1: [1]}
    traits = parse_traits(["1:rank=0.2,max_slowdown=1.5,solo_s=0.13", "0:"])
    assert traits[1].rank == 0.2 and traits[1].max_slowdown == 1.5 and traits[0].rank is None


class Server:
    def __init__(self, path, devices, policy="work-conserving", slots=(), join_timeout=30, lease=None, extra=()):
        args = [sys.executable, "-m", "xover.turns.server", "--socket", path, "--policy", policy,
                "--control-stdin", "--join-timeout", str(join_timeout), *[f"--device={d}" for d in devices],
                *[f"--slot={s}" for s in slots]]
        for key, value in (lease or {}).items():
            args += [f"--lease-{key}", str(value)]
        args += list(extra)
        self.path = path
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self):
        """Quit; the lines it printed (events, then its statistics)."""
        if self.proc.poll() is None:
            self.send("Q")
        out, _ = self.proc.communicate(timeout=10)
        return [line for line in out.splitlines() if line]


@pytest.fixture
def server(tmp_path):
    started = []

    def start(*devices, **kw):
        s = Server(str(tmp_path / f"t{len(started)}.sock"), devices, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def _rank(path, device, slot, iterations, compute_s, comm_s, barrier, log):
    """One rank of a scripted job: compute (checkpoint every ms), release, then an 'all-reduce'
    that needs every rank of the job (a barrier) and takes comm_s."""
    token = CrossoverToken(path, device, slot)
    for i in range(iterations):
        log.put(("request", device, slot, i, time.monotonic()))
        token.acquire()
        log.put(("grant", device, slot, i, time.monotonic()))
        end = time.monotonic() + compute_s
        while time.monotonic() < end:
            time.sleep(0.001)
            token.checkpoint()
        released_at = time.monotonic()  # before the release is sent: never after the grant it causes
        token.release()
        log.put(("release", device, slot, i, released_at, token.phase.yields, token.phase.held))
        barrier.wait()
        time.sleep(comm_s)
    token.close()


def _run_jobs(path, jobs, iterations=12):
    """jobs: slot -> (devices, compute_s, comm_s). Returns the log events in time order."""
    log = mp.Queue()
    procs = []
    for slot, (devices, compute_s, comm_s) in jobs.items():
        barrier = mp.Barrier(len(devices))
        procs += [mp.Process(target=_rank, args=(path, d, slot, iterations, compute_s, comm_s, barrier, log))
                  for d in devices]
    for p in procs:
        p.start()
    events = []
    deadline = time.monotonic() + 60
    while any(p.is_alive() for p in procs) or not log.empty():
        try:
            events.append(log.get(timeout=0.5))
        except Exception:
            if time.monotonic() > deadline:
                break
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    return sorted(events, key=lambda e: e[4])


@pytest.mark.parametrize("policy", ["work-conserving", "round-robin"])
def test_same_order_on_every_device(server, policy):
    s = server("0=0,1,2", "1=0,1,2", policy=policy, slots=["0:rank=0.5", "1:rank=0.2", "2:rank=0.9"])
    events = _run_jobs(s.path, {0: ([0, 1], 0.02, 0.03), 1: ([0, 1], 0.01, 0.04), 2: ([0, 1], 0.03, 0.01)})
    for device in (0, 1):  # never two holders of one device at a time (held intervals, yields included)
        held = sorted((a, b, slot) for kind, dev, slot, *rest in events if kind == "release" and dev == device
                      for a, b in rest[-1])
        for (_, b0, s0), (a1, _, s1) in zip(held, held[1:]):
            assert b0 <= a1 + 1e-4, f"device {device}: slot {s1} held from {a1} while {s0} held until {b0}"
    # the order in which iterations got the turn, device by device (yields and re-grants aside)
    order = {d: [(slot, i) for kind, dev, slot, i, *_ in events if kind == "grant" and dev == d] for d in (0, 1)}
    assert len(order[0]) == 36
    # the same on both devices, but for moments when one job's request reached a free device a little
    # before the other job's (work conservation grants it at once): a swap of neighbours at most
    same = difflib.SequenceMatcher(a=order[0], b=order[1]).ratio()
    print(f"{policy}: grant order shared by the two devices: {same:.0%}")
    assert same >= 0.75, (order[0], order[1])
    # each iteration's first grants on the two devices close together (rank skew). Part of the skew is
    # inherited from the grant's causes (the request, the previous holder letting go), both timed by the
    # scripted clients' sleeps, and under round robin, where every grant follows the previous holder,
    # that part wanders with their jitter. The server's own part is the delay from the later cause to
    # the grant: a fraction of a ms here, a few ms on a loaded CI machine.
    requested, granted, delays = {}, {}, []
    freed = {d: [t for kind, dev, _, _, t, *_ in events if kind == "release" and dev == d] for d in (0, 1)}
    for kind, dev, slot, i, t, *_ in events:
        if kind == "request":
            requested[(slot, i, dev)] = t
        elif kind == "grant":
            granted.setdefault((slot, i), {})[dev] = t
            let_go = max((r for r in freed[dev] if r <= t), default=0.0)
            delays.append(max(t - max(requested[(slot, i, dev)], let_go), 0.0))
    skews = sorted(abs(t[0] - t[1]) for t in granted.values() if len(t) == 2)
    delays.sort()

    def p(xs, q):
        return xs[int(q * len(xs))] * 1000
    print(f"{policy}: rank skew p50 {p(skews, 0.5):.2f} ms, p90 {p(skews, 0.9):.2f} ms; "
          f"server's delay p50 {p(delays, 0.5):.2f} ms, p90 {p(delays, 0.9):.2f} ms")
    # process wake-ups on a loaded 2-core machine: a few ms typical, tens of ms in the tail, several times
    # that when CI's other work saturates both cores (six ranks and the server wake here on every grant).
    # Bounds that only a server that batches or sleeps crosses (hundreds of ms per grant), not the scheduler
    assert p(delays, 0.5) < 50 and p(delays, 0.9) < 500
    assert p(skews, 0.9) < 500
    stats = json.loads(s.stop()[-1].removeprefix("stats "))
    assert stats["policy"] == policy and set(stats["slots"]) == {"0", "1", "2"}


def test_round_robin_alternates_strictly(server):
    s = server("0=0,1", policy="round-robin")
    events = _run_jobs(s.path, {0: ([0], 0.005, 0.02), 1: ([0], 0.005, 0.0)}, iterations=8)
    order = [slot for kind, _, slot, *_ in events if kind == "grant"]
    assert order == [0, 1] * 8  # slot 1 is always ready first, yet waits for slot 0's turn


def test_work_conserving_never_idles_while_a_job_waits(server):
    s = server("0=0,1", slots=["0:rank=0.5", "1:rank=0.5"])
    # job 0 communicates for long; job 1 computes again at once: it must not wait for job 0
    events = _run_jobs(s.path, {0: ([0], 0.005, 0.1), 1: ([0], 0.005, 0.0)}, iterations=8)
    order = [slot for kind, _, slot, *_ in events if kind == "grant"]
    first_of_zero = order.index(0)
    assert order.count(1) == 8 and order[first_of_zero + 1:first_of_zero + 4] == [1, 1, 1]


def test_a_critical_job_preempts_at_a_checkpoint(server):
    s = server("0=0,1", slots=["0:rank=0.9", "1:rank=0.1"])
    # slot 1 computes 10 ms, communicates 200 ms, then wants the device while slot 0 is in a 0.5 s phase
    events = _run_jobs(s.path, {0: ([0], 0.5, 0.0), 1: ([0], 0.01, 0.2)}, iterations=2)
    second_request = [e for e in events if e[0] == "release" and e[2] == 1][0][4] + 0.2
    second_grant = [e for e in events if e[0] == "grant" and e[2] == 1][1][4]
    assert second_grant - second_request < 0.1  # about one checkpoint, not the rest of the 0.5 s phase
    long_release = [e for e in events if e[0] == "release" and e[2] == 0][0]
    assert long_release[5] >= 1 and len(long_release[6]) >= 2  # yielded, then got the turn back


def _hold_forever(path, device, slot, ready):
    token = CrossoverToken(path, device, slot)
    token.acquire()
    ready.set()
    time.sleep(600)


def test_killed_holder_releases_within_a_second(server):
    s = server("0=0,1", policy="round-robin")
    ready = mp.Event()
    holder = mp.Process(target=_hold_forever, args=(s.path, 0, 0, ready))
    holder.start()
    other = CrossoverToken(s.path, 0, 1)
    granted = threading.Event()
    waiting = threading.Thread(target=lambda: (other.acquire(), granted.set()))
    waiting.start()  # slot 1 asks for its turn: the barrier opens, slot 0 goes first
    assert ready.wait(10)
    time.sleep(0.2)
    assert not granted.is_set()
    os.kill(holder.pid, signal.SIGKILL)
    start = time.perf_counter()
    assert granted.wait(5)
    assert time.perf_counter() - start < 1.0
    waiting.join()
    for _ in range(3):  # alone now: every turn is its own
        other.release()
        other.acquire()
    other.close()
    holder.join()


@pytest.mark.parametrize("policy", ["work-conserving", "round-robin"])
def test_a_turn_held_past_its_lease_is_taken_back(server, policy):
    s = server("0=0,1", slots=["0:rank=0.1", "1:rank=0.9"], lease={"floor": 0.3, "factor": 3, "initial": 0.5},
               policy=policy)
    ready = mp.Event()
    hung = mp.Process(target=_hold_forever, args=(s.path, 0, 0, ready))
    hung.start()
    other = CrossoverToken(s.path, 0, 1)
    granted = threading.Event()
    threading.Thread(target=lambda: (other.acquire(), granted.set()), daemon=True).start()
    assert ready.wait(10)  # slot 0 (ranked first, first in round robin) got the turn and hangs holding it
    start = time.perf_counter()
    assert granted.wait(5)  # the lease (0.5 s before any history) ends its turn
    assert 0.3 < time.perf_counter() - start < 3.0
    other.release()
    for _ in range(3):  # and the hung job does not block its partner's next turns either
        again = threading.Event()
        threading.Thread(target=lambda again=again: (other.acquire(), again.set()), daemon=True).start()
        assert again.wait(5)
        other.release()
    other.close()
    lines = s.stop()
    events = [json.loads(line.removeprefix("event ")) for line in lines if line.startswith("event ")]
    assert any(e["kind"] == "lease-revoked" and e["slot"] == 0 for e in events)
    hung.kill()
    hung.join()


def test_a_duplicate_registration_is_refused(server):
    s = server("0=0,1")
    first = CrossoverToken(s.path, 0, 0)
    second = CrossoverToken(s.path, 0, 0)  # the same (device, slot) again: refused, not a deadlock
    start = time.perf_counter()
    second.acquire()  # the server closed it: the client goes on without turns
    assert time.perf_counter() - start < 2
    first.close()
    lines = s.stop()
    assert any('"refused"' in line for line in lines)


def _closed_by_server(path, message, timeout=5.0):
    """Send `message` on a fresh connection; whether the server closed it (rather than waiting for more)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        try:
            conn.sendall(message)
        except BrokenPipeError:
            return True
        try:
            return conn.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


@pytest.mark.parametrize("message", [b"Hx y\n", b"H1\n", b"H0 1 2\n", b"H\xff\xfe\n", b"H" + b"9" * 5000 + b" 0\n",
                                     b"H0" + b" " * 8000])
def test_a_malformed_hello_closes_that_client_not_the_server(server, message):
    s = server("0=0,1")
    assert _closed_by_server(s.path, message)  # a hello without its newline: dropped past 4 KiB
    assert s.proc.poll() is None
    grants = [e for e in _run_jobs(s.path, {0: ([0], 0.002, 0.0), 1: ([0], 0.002, 0.0)}, iterations=3)
              if e[0] == "grant"]  # and goes on serving the others
    assert len(grants) == 6 and s.proc.poll() is None
    lines = s.stop()
    assert any('"malformed"' in line for line in lines), lines


def test_a_turn_lease_too_long_for_the_server_is_refused(monkeypatch):
    from xover.errors import XoverError
    from xover.settings import settings

    for value in ("initial=3000000", "floor=86401", "factor=1e300", "initial=1e308"):
        monkeypatch.setenv("XOVER_TURN_LEASE", value)
        with pytest.raises(XoverError, match="at most") as refused:
            settings()
        assert "XOVER_TURN_LEASE" in str(refused.value)
    monkeypatch.setenv("XOVER_TURN_LEASE", "floor=86400,initial=86400,factor=1000")
    assert settings().turn_lease == {"floor": 86400, "initial": 86400, "factor": 1000}


def test_the_server_waits_in_select_whatever_its_lease(server):
    s = server("0=0,1", lease={"floor": 1e12, "factor": 1e12, "initial": 1e12})  # straight to the server
    grants = [e for e in _run_jobs(s.path, {0: ([0], 0.002, 0.0), 1: ([0], 0.002, 0.0)}, iterations=3)
              if e[0] == "grant"]  # a turn held: select() waits until its lease ends, ~never
    assert len(grants) == 6 and s.proc.poll() is None
    s.stop()


def test_barrier_opens_when_every_slot_is_ready_not_when_it_connects(server):
    s = server("0=0,1")
    first, second = CrossoverToken(s.path, 0, 0), CrossoverToken(s.path, 0, 1)

    def ready_later():
        time.sleep(0.5)  # slot 1 was still loading its data
        second.acquire()
        second.release()

    thread = threading.Thread(target=ready_later)
    thread.start()
    start = time.perf_counter()
    first.acquire()  # not granted before slot 1 asked for its first turn
    assert time.perf_counter() - start >= 0.45
    first.release()
    thread.join()
    first.close()
    second.close()


def test_barrier_gives_up_on_latecomers(server):
    s = server("0=0,1", join_timeout=1.0)
    token = CrossoverToken(s.path, 0, 0)
    start = time.perf_counter()
    token.acquire()  # slot 1 never joins: the barrier opens after the join timeout
    assert 0.8 < time.perf_counter() - start < 5
    token.release()
    token.close()


def test_groups_of_different_sizes(server):
    s = server("0=0,1", "1=0")  # job 0 on devices 0 and 1, job 1 only on device 0
    _run_jobs(s.path, {0: ([0, 1], 0.002, 0.002), 1: ([0], 0.002, 0.0)}, iterations=4)


def test_withdrawn_slot_opens_the_barrier(server):
    s = server("0=0,1")
    token = CrossoverToken(s.path, 0, 0)
    s.send("W1")  # the launcher saw job 1 exit before it ever joined
    start = time.perf_counter()
    token.acquire()
    assert time.perf_counter() - start < 1.0
    token.close()


def test_stdin_eof_stops_the_server_and_removes_its_files(server, tmp_path):
    s = server("0=0")
    s.proc.stdin.close()  # the launcher (or its ssh) is gone
    s.proc.wait(timeout=5)
    assert not os.path.exists(s.path) and not os.path.exists(s.path + ".yield")


def test_without_server_training_goes_on(server):
    s = server("0=0")
    token = CrossoverToken(s.path, 0, 0)
    token.acquire()
    token.release()
    s.proc.kill()
    s.proc.wait()
    token.acquire()  # the server died: no exception, the job continues uncoordinated
    token.checkpoint()
    token.release()
    token.close()


def test_the_server_runs_ahead_of_the_workers_when_allowed(server):
    from xover.turns.server import SERVER_NICE

    own = os.getpriority(os.PRIO_PROCESS, 0)
    allowed = os.geteuid() == 0  # root (CI, this machine); anyone else keeps the launcher's priority
    assert os.getpriority(os.PRIO_PROCESS, server("0=0,1").proc.pid) == (SERVER_NICE if allowed else own)
    assert os.getpriority(os.PRIO_PROCESS, server("0=0,1", extra=["--nice", "0"]).proc.pid) == own


def test_the_launcher_passes_the_servers_nice_value_to_every_host():
    from xover.turns.service import server_arguments

    assert server_arguments("/s", {0: [0, 1]}, "work-conserving", {}, nice=0)[-2:] == ["--nice", "0"]
    assert "--nice" not in server_arguments("/s", {0: [0, 1]}, "work-conserving", {})


def test_a_gradient_checkpoint_runs_after_the_engine_has_seen_the_gradient():
    # Horovod and DDP start a gradient's all-reduce from a hook of its accumulator node; a yield at
    # the checkpoint before that hook held the all-reduce back for the partner's whole turn
    import gc

    import torch

    from xover.runtime.turn_client import install_checkpoints

    order = []

    class Turn:
        def checkpoint(self):
            order.append("checkpoint")

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    engine_nodes = []
    for parameter in model.parameters():  # as horovod.torch's DistributedOptimizer hooks them
        node = parameter.expand_as(parameter).grad_fn.next_functions[0][0]
        node.register_hook(lambda *_: order.append("engine"))
        engine_nodes.append(node)
    kept = install_checkpoints(model, Turn())
    model(torch.randn(5, 3)).sum().backward()
    assert order[3:] == ["engine", "checkpoint"] * 4, order  # after the three modules' forward checkpoints
    del kept, engine_nodes

    # an engine that holds no node (xover's own, with tensor hooks): the checkpoints live on what
    # install_checkpoints returned, iteration after iteration
    bare = torch.nn.Linear(3, 2)
    kept = install_checkpoints(bare, Turn())
    for _ in range(2):
        gc.collect()
        order.clear()
        bare(torch.randn(5, 3)).sum().backward()
        assert order == ["checkpoint"] * 3, order  # its forward, then its two gradients
    assert kept


def test_a_turn_server_that_dies_leaves_its_error_in_the_events():
    # the jobs go on without turns; what the server said before dying is kept for the store
    from xover.turns.service import TurnServerProcess

    program = ("import sys, time\nprint('ready', flush=True)\n"
               "sys.stderr.write('x' * 200000 + '\\nTraceback: the cause\\n'); sys.stderr.flush(); sys.exit(3)")
    server = TurnServerProcess("localhost", "/nonexistent/turns.sock", [sys.executable, "-c", program])
    server.wait_ready()
    server.process.wait(timeout=30)  # a full stderr pipe would have kept it from exiting
    server.stop()
    [event] = [e for e in server.events if e["kind"] == "server-died"]
    assert event["exit_code"] == 3 and "the cause" in event["stderr"] and len(event["stderr"]) < 3000


STOPPED_WAITER = """
import sys
from xover.runtime.turn_client import CrossoverToken
token = CrossoverToken(sys.argv[1], 0, 1, silence_s=60)
token.acquire()  # granted before slot 0's first turn, or after it: either way it then waits behind slot 0
token.release()
token.acquire()
print("granted", flush=True)
"""


def test_a_stopped_waiter_whose_socket_is_full_loses_its_slot_not_everyones_turns(server, tmp_path):
    """Issue 52, finding 2. Before: grants went out with a blocking sendall; a waiter SIGSTOPped long
    enough for its socket to fill with keep-alives blocked the server in that sendall, so no device
    got a grant again (every worker gave up its turns 30 s later). Now the send does not block: a
    client whose socket is full loses its slot at once (an `unwritable` event) and the turn goes on to
    the next; the others go on, and the stopped worker, resumed, says it lost its turns."""

    s = server("0=0,1", "1=0", extra=("--heartbeat", "0.002"))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    waiter = subprocess.Popen([sys.executable, "-c", STOPPED_WAITER, s.path], stdout=subprocess.PIPE, text=True, env=env)
    device0, device1 = CrossoverToken(s.path, 0, 0, silence_s=20), CrossoverToken(s.path, 1, 0, silence_s=20)
    try:
        device0.acquire()
        time.sleep(1)  # its ask reached the server; it waits behind slot 0
        os.kill(waiter.pid, signal.SIGSTOP)
        time.sleep(4)  # keep-alives every 2 ms that it never reads: its socket is full
        device0.release()  # the grant goes to the stopped waiter
        started = time.monotonic()
        device1.acquire()  # another device of the same server
        assert device1._sock is not None and time.monotonic() - started < 2, "the server stalled"
        device1.release()
        device0.acquire()  # the stopped waiter's slot is taken back
        assert device0._sock is not None and time.monotonic() - started < 2  # at once, not after a grace
        device0.release()
    finally:
        os.kill(waiter.pid, signal.SIGCONT)
    out, _ = waiter.communicate(timeout=30)
    assert '"kind":"turns-lost"' in out and '"device":0' in out and "granted" in out  # it trains on, and says so
    device0.close()
    device1.close()
    events = [json.loads(line[len("event "):]) for line in s.stop() if line.startswith("event ")]
    assert [(e["kind"], e["slot"], e["device"]) for e in events if e["kind"] == "unwritable"] == [("unwritable", 1, 0)]


def test_a_small_send_buffer_takes_the_slot_of_a_stopped_waiter_after_a_few_keep_alives(server, tmp_path):
    """--send-buffer (XOVER_TURN_SEND_BUFFER) sets each worker connection's SO_SNDBUF: at the kernel's
    minimum (asked for 1 byte) 6 unread keep-alives fill it here, 0.3 s at a keep-alive every 50 ms, where
    the default buffer takes 278 (14 s). The stopped waiter then loses its slot at its grant; with the
    default buffer the grant would reach it and the partner would wait for the lease (3 s here)."""
    s = server("0=0,1", lease={"initial": 3, "floor": 3}, extra=("--heartbeat", "0.05", "--send-buffer", "1"))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    waiter = subprocess.Popen([sys.executable, "-c", STOPPED_WAITER, s.path], stdout=subprocess.PIPE, text=True, env=env)
    device0 = CrossoverToken(s.path, 0, 0, silence_s=20)
    try:
        device0.acquire()
        time.sleep(1)  # its ask reached the server; it waits behind slot 0
        os.kill(waiter.pid, signal.SIGSTOP)
        time.sleep(1)  # 20 keep-alives it never reads: more than its socket takes
        device0.release()  # the grant goes to the stopped waiter, whose socket is full
        started = time.monotonic()
        device0.acquire()
        assert time.monotonic() - started < 2, "the grant reached the stopped waiter (its socket was not full)"
        device0.release()
    finally:
        os.kill(waiter.pid, signal.SIGCONT)
    out, _ = waiter.communicate(timeout=30)
    assert '"kind":"turns-lost"' in out and "granted" in out
    device0.close()
    events = [json.loads(line[len("event "):]) for line in s.stop() if line.startswith("event ")]
    assert [(e["kind"], e["slot"], e["reason"]) for e in events if e["kind"] == "unwritable"] == [
        ("unwritable", 1, "its socket is full of messages it has not read")]


ONE_WAIT = """
import sys
from xover.runtime.turn_client import CrossoverToken
CrossoverToken(sys.argv[1], 0, 1, silence_s=60).acquire()
print("granted", flush=True)
"""

OTHER_RANK = """
import sys
from xover.runtime.turn_client import CrossoverToken
token = CrossoverToken(sys.argv[1], 1, 1, silence_s=60)
token.acquire()
token.release()
print("released", flush=True)
sys.stdin.readline()  # its all-reduce, which needs the stopped rank
token.acquire()
print("granted" if token._sock is not None else "without turns", flush=True)
token.release()
"""


@pytest.mark.parametrize("other_rank", ["in-its-all-reduce", "waiting"])
def test_a_stopped_waiter_losing_its_slot_releases_its_jobs_other_ranks_and_their_partners(server, other_rank):
    """When a rank cannot be written to, its job gives up turns on every device of the server and each of
    its other ranks is told so (its connection is closed, a `released` event): that rank trains on
    without turns and says so once (a turns-lost record); it neither waits for ever nor keeps its
    partner waiting. Before (a): its slot was withdrawn on every device, as for a dead client, which
    erased a waiting rank's request while its keep-alives went on: it waited for ever. Before (b), the
    stopped rank lost its own device's turns only: under round robin the partner on the other device
    waited for the job's rank there, which sat in its all-reduce with the stopped rank and asked for
    nothing, until the stopped rank resumed (bench/chaos.py stop-waiter: a stall in every trial)."""
    s = server("0=0,1", "1=0,1", policy="round-robin", extra=("--heartbeat", "0.05", "--send-buffer", "1"))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("XOVER_METRIC_TOKEN", None)
    waiter = subprocess.Popen([sys.executable, "-c", ONE_WAIT, s.path], stdout=subprocess.PIPE, text=True,
                              env=env)  # slot 1 on device 0: waits behind slot 0
    other = subprocess.Popen([sys.executable, "-c", OTHER_RANK, s.path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)  # its job's rank on device 1
    holder0, holder1 = CrossoverToken(s.path, 0, 0, silence_s=20), CrossoverToken(s.path, 1, 0, silence_s=20)
    partner = threading.Event()
    try:
        holder0.acquire()  # round robin: slot 0 first, the waiter then waits behind it
        holder1.acquire()
        holder1.release()  # slot 1's turn on device 1
        assert other.stdout.readline().strip() == "released"
        holder1.acquire()
        if other_rank == "waiting":
            other.stdin.write("\n")  # it asks, behind slot 0
            other.stdin.flush()
        else:
            holder1.release()  # slot 1's turn again, and slot 1 asks for nothing: it is in its all-reduce
            threading.Thread(target=lambda: (holder1.acquire(), partner.set()), daemon=True).start()
        time.sleep(0.5)
        os.kill(waiter.pid, signal.SIGSTOP)
        time.sleep(1)  # 20 keep-alives it never reads: its socket is full
        holder0.release()  # device 0's grant to the stopped rank fails: its job gives up its turns
        started = time.monotonic()
        holder0.acquire()
        assert time.monotonic() - started < 2 and holder0._sock is not None
        holder0.release()
        if other_rank == "waiting":
            holder1.release()
        else:
            assert partner.wait(3), "the partner waits for a job that does not take turns any more"
            assert holder1._sock is not None
            holder1.release()
            other.stdin.write("\n")  # its all-reduce ends
            other.stdin.flush()
        out, _ = other.communicate(timeout=15)  # it does not wait for ever
        assert out.splitlines()[-1] == "without turns" and out.count('"kind":"turns-lost"') == 1, out
        holder1.acquire()  # device 1 is the partner's alone now
        holder1.release()
    finally:
        os.kill(waiter.pid, signal.SIGCONT)
        other.kill()
    out, _ = waiter.communicate(timeout=30)
    assert out.count('"kind":"turns-lost"') == 1 and "granted" in out
    for token in (holder0, holder1):
        token.close()
    events = [json.loads(line[len("event "):]) for line in s.stop() if line.startswith("event ")]
    assert [(e["kind"], e["slot"], e["device"]) for e in events if e["kind"] in ("unwritable", "released")] == [
        ("unwritable", 1, 0), ("released", 1, 1)]


def test_a_lease_taken_back_passes_over_its_jobs_idle_ranks_on_the_other_devices(server):
    """Round robin: a rank hung holding its turn on device 0 loses it at its lease, and its job's rank on
    device 1, which sits in its all-reduce with the hung one and asks for nothing, is passed over there
    until it asks again: the partner on device 1 gets its turns. Before: the lease took the turn back on
    device 0 only, and the partner on device 1 waited for that job's turn for as long as the rank hung
    (bench/chaos.py stop-waiter, where the grant reached the stopped rank before its socket filled)."""
    s = server("0=0,1", "1=0,1", policy="round-robin", lease={"floor": 0.3, "factor": 3, "initial": 1.5})
    other0, partner1 = CrossoverToken(s.path, 1, 0), CrossoverToken(s.path, 1, 1)
    first = threading.Event()
    threading.Thread(target=lambda: (partner1.acquire(), first.set()), daemon=True).start()
    other0.acquire()  # round robin: slot 0 first
    other0.release()  # then into its all-reduce with the rank on device 0
    assert first.wait(5)
    partner1.release()
    again = threading.Event()
    threading.Thread(target=lambda: (partner1.acquire(), again.set()), daemon=True).start()  # slot 0's turn now
    ready = mp.Event()
    hung = mp.Process(target=_hold_forever, args=(s.path, 0, 0, ready))
    hung.start()
    partner0 = CrossoverToken(s.path, 0, 1)
    granted0 = threading.Event()
    threading.Thread(target=lambda: (partner0.acquire(), granted0.set()), daemon=True).start()
    try:
        assert ready.wait(10)  # slot 0 holds device 0 and hangs
        assert granted0.wait(5)  # its lease (1.5 s) ends its turn on device 0
        assert again.wait(2), "the partner on device 1 waits for a job whose rank hangs on device 0"
        partner1.release()
        partner0.release()
        # the turn stays slot 0's while nobody waits: asking again, it takes it, then strict alternation
        back, next1 = threading.Event(), threading.Event()
        threading.Thread(target=lambda: (other0.acquire(), back.set()), daemon=True).start()
        assert back.wait(5) and other0._sock is not None, "a rank passed over and back waits for its partner"
        threading.Thread(target=lambda: (partner1.acquire(), next1.set()), daemon=True).start()
        assert not next1.wait(0.3), "the partner took device 1 while slot 0 held it"
        other0.release()
        assert next1.wait(5)
        partner1.release()
    finally:
        hung.kill()
        hung.join()
    for token in (other0, partner0, partner1):
        token.close()
    events = [json.loads(line.removeprefix("event ")) for line in s.stop() if line.startswith("event ")]
    assert [(e["kind"], e["device"], e["slot"]) for e in events if e["kind"] == "lease-revoked"] == [
        ("lease-revoked", 0, 0)]


def test_holders_that_wait_on_each_others_devices_lose_their_turn_at_the_floor_not_after_ten_minutes(server):
    """Two jobs on two devices, each of whose ranks runs a collective inside its turn (as an elastic
    script's commit did before the shim moved it out): job 1 holds device 0 and job 0 device 1, and each
    job's other rank waits for the device the other job holds. Nothing in that ring will ever release.
    The holders have no history of three holds, which gave them the 600 s lease (`initial`: 30 s here),
    so the run hung for ten minutes; a ring needs no history, and one holder loses its turn at `floor`."""
    s = server("0=0,1", "1=0,1", lease={"floor": 0.5, "factor": 3, "initial": 30})
    tokens = {(device, slot): CrossoverToken(s.path, device, slot) for device in (0, 1) for slot in (0, 1)}

    def once(token):
        token.acquire()
        token.release()

    first_round = [threading.Thread(target=once, args=(token,)) for token in tokens.values()]
    for thread in first_round:  # everyone asks: the start barrier opens, each rank holds once
        thread.start()
    for thread in first_round:
        thread.join(10)
    tokens[0, 1].acquire()  # device 0 is free: job 1 takes it
    tokens[1, 0].acquire()  # device 1 is free: job 0 takes it
    collectives = {0: threading.Barrier(2, timeout=20), 1: threading.Barrier(2, timeout=20)}
    done = []

    def rank(device, slot, holds):
        token = tokens[device, slot]
        if not holds:
            token.acquire()  # waits for the device the other job holds
        collectives[slot].wait()  # the collective inside the turn, with its own rank on the other device
        token.release()
        done.append((device, slot))

    start = time.perf_counter()
    ranks = [threading.Thread(target=rank, args=(device, slot, holds), daemon=True)
             for device, slot, holds in ((0, 1, True), (1, 0, True), (0, 0, False), (1, 1, False))]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(15)
    took = time.perf_counter() - start
    assert len(done) == 4, f"the ring still holds after {took:.1f} s"
    assert 0.4 < took < 10
    for token in tokens.values():
        token.close()
    events = [json.loads(line.removeprefix("event ")) for line in s.stop() if line.startswith("event ")]
    # one holder opens the ring; the other, whose job can finish its collective now, may still lose its turn
    # to the usual lease, which this test's floor makes half a second, just before it releases
    revoked = [e for e in events if e["kind"] == "lease-revoked"]
    assert [e["in_a_ring"] for e in revoked][:1] == [True] and sum(e["in_a_ring"] for e in revoked) == 1, revoked


def test_a_ring_shortens_the_lease_to_the_floor_or_twice_the_longest_hold_never_lengthens_it():
    from xover.turns.server import Lease

    lease = Lease(floor_s=30, factor=20, initial_s=600)
    assert lease.limit([]) == 600 and lease.limit([], in_a_ring=True) == 30
    assert lease.limit([1, 1, 1]) == 30 and lease.limit([1, 1, 1], in_a_ring=True) == 30
    assert lease.limit([100, 100]) == 600 and lease.limit([100, 100], in_a_ring=True) == 200
    assert lease.limit([100, 100, 100]) == 2000 and lease.limit([100, 100, 100], in_a_ring=True) == 200
    assert lease.limit([1, 1, 50], in_a_ring=True) == 30  # the usual lease (20 x the median) is shorter still


def test_holders_that_only_compute_in_a_ring_yield_when_asked_and_keep_their_lease(server):
    """The same ring from an ordinary start: no ranks known, device 0 grants job 0 and device 1 job 1 by who
    asked first, and each holder computes a long phase (a first step: compilation, autotuning) with no
    collective inside, passing layer boundaries. Half-way to the ring's lease each is asked to yield; the first
    to reach a boundary gives the turn up and its partner takes it, which opens the ring: no turn is taken back
    and nothing is blamed on the script (a review's finding: the first version took such a holder's turn at
    the floor and said its collective had made a ring)."""
    s = server("0=0,1", "1=0,1", lease={"floor": 0.6, "factor": 20, "initial": 30})
    tokens = {(device, slot): CrossoverToken(s.path, device, slot) for device in (0, 1) for slot in (0, 1)}
    done = []

    def rank(device, slot, delay):
        time.sleep(delay)
        token = tokens[device, slot]
        token.acquire()
        end = time.monotonic() + 1.5  # longer than the ring's lease: taken back if it did not yield
        while time.monotonic() < end:
            time.sleep(0.002)
            token.checkpoint()
        token.release()
        done.append((device, slot))

    ranks = [threading.Thread(target=rank, args=args, daemon=True)
             for args in ((0, 0, 0.0), (1, 1, 0.0), (0, 1, 0.15), (1, 0, 0.15))]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(20)
    assert len(done) == 4
    for token in tokens.values():
        token.close()
    lines = s.stop()
    events = [json.loads(line.removeprefix("event ")) for line in lines if line.startswith("event ")]
    assert not [e for e in events if e["kind"] == "lease-revoked"], events
    stats = json.loads(next(line.removeprefix("stats ") for line in lines if line.startswith("stats ")))
    assert sum(slot["yields"] for slot in stats["slots"].values()) >= 1, stats  # the ring opened by a yield
