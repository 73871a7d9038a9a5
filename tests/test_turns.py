"""The turn server with real processes on a real Unix socket: order, barrier, departures, deaths."""

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

from xover.runtime.turns import CrossoverToken, DeviceTurns, parse_devices


def test_device_turns_strict_order_and_skips():
    turns = DeviceTurns(order=[0, 1, 2], ready={0, 1, 2}, open=True)
    turns.requested = {1, 2}
    assert turns.next_grant() is None  # slot 0's turn: a later slot never jumps the queue
    turns.requested.add(0)
    assert turns.next_grant() == 0
    turns.holder = 0
    turns.requested.discard(0)
    turns.pass_turn()
    turns.gone.add(1)  # slot 1 left: its turns are skipped
    assert turns.next_grant() == 2


def test_parse_devices():
    assert parse_devices(["0=0,1", "1=1"]) == {0: [0, 1], 1: [1]}


@pytest.fixture
def server(tmp_path):
    started = []

    def start(*devices, join_timeout=30):
        path = str(tmp_path / "t.sock")
        proc = subprocess.Popen([sys.executable, "-m", "xover.runtime.turns", "--socket", path,
                                 *[f"--device={d}" for d in devices], "--join-timeout", str(join_timeout)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        started.append(proc)
        return path

    yield start
    for proc in started:
        proc.terminate()
        proc.wait()


def _worker(path, device, slot, rounds, log, hold_s):
    token = CrossoverToken(path, device, slot)
    for i in range(rounds):
        token.acquire()
        entered = time.monotonic()
        time.sleep(hold_s)
        log.put((device, slot, i, entered, time.monotonic()))
        token.release()
    token.close()


def test_round_robin_same_order_on_every_device(server):
    path = server("0=0,1", "1=0,1")
    log = mp.Queue()
    procs = [mp.Process(target=_worker, args=(path, d, s, 5, log, 0.01)) for d in (0, 1) for s in (1, 0)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    events = sorted((log.get() for _ in range(20)), key=lambda e: e[3])
    for device in (0, 1):
        turns = [e for e in events if e[0] == device]
        assert [(slot, i) for _, slot, i, _, _ in turns] == [(i % 2, i // 2) for i in range(10)]  # 0,1,0,1...
        for before, after in zip(turns, turns[1:]):
            assert before[4] <= after[3]  # never two holders on one device at a time


def test_job_that_finishes_early_is_skipped(server):
    path = server("0=0,1")
    log = mp.Queue()
    short = mp.Process(target=_worker, args=(path, 0, 0, 2, log, 0.0))
    long = mp.Process(target=_worker, args=(path, 0, 1, 10, log, 0.0))
    for p in (short, long):
        p.start()
    for p in (short, long):
        p.join(20)
        assert p.exitcode == 0


def _hold_forever(path, device, slot, ready):
    token = CrossoverToken(path, device, slot)
    token.acquire()
    ready.set()
    time.sleep(600)


def test_killed_holder_releases_within_a_second(server):
    import threading

    path = server("0=0,1")
    ready = mp.Event()
    holder = mp.Process(target=_hold_forever, args=(path, 0, 0, ready))
    holder.start()
    other = CrossoverToken(path, 0, 1)
    granted = threading.Event()
    waiting = threading.Thread(target=lambda: (other.acquire(), granted.set()))
    waiting.start()  # slot 1 asks for its turn: the barrier opens, slot 0 goes first
    assert ready.wait(10)
    time.sleep(0.2)
    assert not granted.is_set()  # slot 0 holds the turn
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


def test_barrier_opens_when_every_slot_is_ready_not_when_it_connects(server):
    import threading

    path = server("0=0,1")
    first, second = CrossoverToken(path, 0, 0), CrossoverToken(path, 0, 1)  # both connected

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


def test_barrier_waits_for_every_slot_then_gives_up_on_latecomers(server):
    path = server("0=0,1", join_timeout=1.0)
    token = CrossoverToken(path, 0, 0)
    start = time.perf_counter()
    token.acquire()  # slot 1 never joins: the barrier opens after the join timeout
    waited = time.perf_counter() - start
    assert 0.8 < waited < 5
    token.release()
    token.close()


def test_groups_of_different_sizes(server):
    # job 0 has ranks on devices 0 and 1, job 1 only on device 0
    path = server("0=0,1", "1=0")
    log = mp.Queue()
    procs = [mp.Process(target=_worker, args=(path, d, s, 4, log, 0.0)) for d, s in ((0, 0), (1, 0), (0, 1))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
        assert p.exitcode == 0


def test_withdrawn_slot_opens_the_barrier(server):
    from xover.runtime.turns import withdraw_slot

    path = server("0=0,1")
    token = CrossoverToken(path, 0, 0)
    withdraw_slot(path, 1)  # the launcher saw job 1 exit before it ever joined
    start = time.perf_counter()
    token.acquire()
    assert time.perf_counter() - start < 1.0
    token.close()


def test_without_server_training_goes_on(tmp_path):
    path = str(tmp_path / "s.sock")
    proc = subprocess.Popen([sys.executable, "-m", "xover.runtime.turns", "--socket", path, "--device=0=0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    token = CrossoverToken(path, 0, 0)
    token.acquire()
    token.release()
    proc.kill()
    proc.wait()
    token.acquire()  # the server died: no exception, the job continues uncoordinated
    token.release()
    token.close()
