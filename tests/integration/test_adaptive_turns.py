"""An adaptive group's turn server with real processes on a real Unix socket: the state without turns (granted
at once, never waited for), and switches between it and turns made at one iteration of each job on every device,
however the ranks stand, stranding nobody, under both policies."""

import json
import multiprocessing as mp
import queue
import subprocess
import sys
import threading
import time

import pytest

from xover.runtime.turn_client import CrossoverToken


class Server:
    """A turn server whose stdout is read as it runs (its `counts` answers and `switched` events)."""

    def __init__(self, path, devices, policy="work-conserving", state="turns"):
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xover.turns.server", "--socket", path, "--policy", policy, "--control-stdin",
             "--state", state, *[f"--device={d}" for d in devices]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.lines = queue.Queue()
        self.events = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            kind, _, payload = line.strip().partition(" ")
            if kind == "event":
                self.events.append(json.loads(payload))
            self.lines.put((kind, payload))

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def counts(self, number):
        self.send(f"P{number}")
        while True:
            kind, payload = self.lines.get(timeout=10)
            if kind == "counts":
                answer = json.loads(payload)
                assert answer["switch"] == number
                return {int(slot): count for slot, count in answer["slots"].items()}

    def switch(self, number, state, margin=2):
        counts = self.counts(number)
        self.send(f"S{number} {state} " + ",".join(f"{slot}={count + margin}" for slot, count in counts.items()))
        return {slot: count + margin for slot, count in counts.items()}

    def stop(self):
        if self.proc.poll() is None:
            self.send("Q")
        self.proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path):
    started = []

    def start(*devices, **kw):
        s = Server(str(tmp_path / f"a{len(started)}.sock"), devices, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def test_without_turns_every_ask_is_granted_at_once(server):
    s = server("0=0,1", state="free")
    holder, other = CrossoverToken(s.path, 0, 0), CrossoverToken(s.path, 0, 1)
    holder.acquire()  # slot 0 holds device 0 ...
    waited = other.acquire()  # ... and slot 1 is granted beside it, without waiting for a release
    assert waited < 1.0
    other.release()
    holder.release()
    holder.close()
    other.close()
    s.stop()


def test_under_turns_the_same_ask_waits(server):
    s = server("0=0,1", policy="round-robin", state="turns")  # slot 0's turn first
    granted = threading.Event()

    def ask():
        token = CrossoverToken(s.path, 0, 1)
        token.acquire()
        granted.set()
        token.release()
        token.close()

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    holder = CrossoverToken(s.path, 0, 0)
    holder.acquire()
    assert not granted.wait(0.5)  # slot 1 waits while slot 0 holds the turn
    holder.release()
    assert granted.wait(5)
    thread.join(5)
    holder.close()
    s.stop()


def _rank(path, device, slot, iterations, compute_s, comm_s, barrier, log):
    """One rank of a scripted job: compute, release, an 'all-reduce' with the job's other ranks."""
    token = CrossoverToken(path, device, slot)
    for i in range(iterations):
        token.acquire()
        end = time.monotonic() + compute_s
        while time.monotonic() < end:
            time.sleep(0.001)
            token.checkpoint()
        token.release()
        for start, stop in token.phase.held:  # yields to a job ranked first included
            log.put((device, slot, i + 1, start, stop))
        barrier.wait(timeout=30)
        time.sleep(comm_s)
    token.close()


@pytest.mark.parametrize("policy", ["work-conserving", "round-robin"])
def test_switches_at_one_iteration_of_each_job_on_every_device_and_strand_no_rank(server, policy):
    """Two jobs on two devices each, switched back and forth while they run: every device applies a switch at
    the iteration it was told, for both jobs; under turns no two computes overlap on a device, and every rank
    finishes (none waits for a turn that will not come)."""
    s = server("0=0,1", "1=0,1", policy=policy, state="free")
    iterations = 150  # about 3 s: the five switches, 0.12 s apart, come while the jobs run on a loaded machine
    log = mp.Queue()
    procs = []
    for slot, (compute_s, comm_s) in enumerate([(0.012, 0.004), (0.004, 0.012)]):
        barrier = mp.Barrier(2)
        procs += [mp.Process(target=_rank, args=(s.path, device, slot, iterations, compute_s, comm_s, barrier, log))
                  for device in (0, 1)]
    for p in procs:
        p.start()
    boundaries = {}
    time.sleep(0.3)
    for number, state in enumerate(["turns", "free", "turns", "free", "turns"], start=1):
        boundaries[number] = (state, s.switch(number, state))
        time.sleep(0.12)
    computes = []
    deadline = time.monotonic() + 90
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        try:
            computes.append(log.get(timeout=0.5))
        except queue.Empty:
            pass
    for p in procs:
        p.join(10)
        assert p.exitcode == 0, "a rank did not finish"
    while not log.empty():
        computes.append(log.get())
    s.stop()
    assert {(d, slot, i) for d, slot, i, *_ in computes} == {
        (d, slot, i) for d in (0, 1) for slot in (0, 1) for i in range(1, iterations + 1)}
    switched = [e for e in s.events if e["kind"] == "switched"]
    assert len({e["switch"] for e in switched}) >= 4  # the switches came while the jobs ran
    for number, (state, told) in boundaries.items():
        for slot, iteration in told.items():
            applied = [e for e in switched if e["switch"] == number and e["slot"] == slot]
            if iteration > iterations + 1:
                continue  # past its last acquire: the job ended first
            assert sorted(e["device"] for e in applied) == [0, 1], (number, slot)
            assert {e["iteration"] for e in applied} == {iteration}  # one point on every device
            assert {e["state"] for e in applied} == {state}
    # which state each (slot, iteration) computed in, from the switches
    def state_of(slot, iteration):
        current = "free"
        for number in sorted(boundaries):
            state, told = boundaries[number]
            if iteration >= told.get(slot, 10**9):
                current = state
        return current

    for device in (0, 1):
        spans = sorted((start, end, slot, i) for d, slot, i, start, end in computes if d == device)
        for (_a0, b0, s0, i0), (a1, _b1, s1, i1) in zip(spans, spans[1:]):
            if state_of(s0, i0) == "turns" and state_of(s1, i1) == "turns":
                assert b0 <= a1 + 2e-3, f"device {device}: two computes under turns overlap"


def test_a_slow_switch_command_holds_the_devices_at_the_fence_and_still_lands_at_one_iteration(server):
    """S comes long after P (many iterations of the jobs), with the smallest margin: no device runs past the
    iteration after P's count before it is told, so every device still switches at the iteration it was told;
    an S that names no job (a switch given up) lets the held acquires go on in the state they were in."""
    s = server("0=0,1", "1=0,1", state="free")
    iterations = 80
    log = mp.Queue()
    procs = []
    for slot in (0, 1):
        barrier = mp.Barrier(2)
        procs += [mp.Process(target=_rank, args=(s.path, device, slot, iterations, 0.004, 0.004, barrier, log))
                  for device in (0, 1)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    told = {}
    for number, state in ((1, "turns"), (2, "free")):
        counts = s.counts(number)
        time.sleep(0.25)  # about 30 iterations of these jobs: the command is far slower than they are
        told[number] = {slot: count + 1 for slot, count in counts.items()}
        s.send(f"S{number} {state} " + ",".join(f"{slot}={it}" for slot, it in told[number].items()))
        time.sleep(0.1)
    s.counts(3)
    time.sleep(0.1)
    s.send("S3 free")  # given up: nothing switches, the held go on
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, "a rank did not finish"
    s.stop()
    switched = [e for e in s.events if e["kind"] == "switched"]
    for number in (1, 2):
        for slot, iteration in told[number].items():
            applied = [e for e in switched if e["switch"] == number and e["slot"] == slot]
            assert sorted(e["device"] for e in applied) == [0, 1], (number, slot)
            assert {e["iteration"] for e in applied} == {iteration}, (number, slot, applied)
    assert not [e for e in switched if e["switch"] == 3]
