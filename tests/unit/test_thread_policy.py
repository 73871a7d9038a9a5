"""runtime/thread_policy.py on real threads of this process: under crossover the engine's threads
stop preempting a partner's compute (SCHED_BATCH); the main thread keeps the default."""

import os
import threading

import pytest

from xover.errors import XoverError
from xover.runtime.thread_policy import CommThreads
from xover.settings import COMM_THREADS_VARIABLE as POLICY_ENV
from xover.settings import settings


@pytest.fixture
def engine_thread():
    """A thread standing for the engine's communication loop, and its native id once it runs; torch
    computes on one thread per rank, as xover's ranks do by default."""
    import torch

    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    started, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (started.set(), stop.wait()), daemon=True)
    thread.start()
    started.wait()
    yield thread.native_id
    stop.set()
    thread.join()
    torch.set_num_threads(threads_before)


def test_under_crossover_other_threads_run_as_batch_and_main_keeps_the_default(engine_thread, monkeypatch):
    monkeypatch.delenv(POLICY_ENV, raising=False)
    threads = CommThreads(crossover=True, cpu=True)
    threads.apply()
    assert threads.threads >= 1 and threads.start_fields() == {"comm_threads": "batch"}
    assert os.sched_getscheduler(engine_thread) == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # it computes, and a grant must run at once


def test_threads_started_later_are_caught_after_the_first_iterations_only(engine_thread, monkeypatch):
    monkeypatch.delenv(POLICY_ENV, raising=False)
    threads = CommThreads(crossover=True, cpu=True)
    threads.apply(iteration=1)
    assert os.sched_getscheduler(engine_thread) == os.SCHED_BATCH
    os.sched_setscheduler(engine_thread, os.SCHED_OTHER, os.sched_param(0))
    threads.apply(iteration=5)  # no more scanning of /proc once the engine is up
    assert os.sched_getscheduler(engine_thread) == os.SCHED_OTHER


@pytest.mark.parametrize("crossover, cpu, env", [(False, True, None), (True, True, "normal"), (True, False, None),
                                                  (False, False, "always")])
def test_off_without_crossover_or_when_asked(engine_thread, monkeypatch, crossover, cpu, env):
    if env is None:
        monkeypatch.delenv(POLICY_ENV, raising=False)
    else:
        monkeypatch.setenv(POLICY_ENV, env)
    threads = CommThreads(crossover=crossover, cpu=cpu)
    threads.apply()
    assert os.sched_getscheduler(engine_thread) == os.SCHED_OTHER
    assert threads.start_fields() == {"comm_threads": "normal"}


def test_always_applies_it_alone_too(engine_thread, monkeypatch):
    monkeypatch.setenv(POLICY_ENV, "always")
    threads = CommThreads(crossover=False, cpu=True)
    threads.apply()
    assert os.sched_getscheduler(engine_thread) == os.SCHED_BATCH
    assert threads.start_fields() == {"comm_threads": "batch"}


def test_a_misspelt_policy_is_refused(monkeypatch):
    monkeypatch.setenv(POLICY_ENV, "idle")
    with pytest.raises(XoverError, match=f"{POLICY_ENV}='idle'.*batch, normal, always"):
        settings()


def test_not_applied_when_torch_computes_on_several_threads(engine_thread, monkeypatch):
    import torch

    monkeypatch.delenv(POLICY_ENV, raising=False)
    torch.set_num_threads(2)  # its compute threads would be demoted with the engine's
    threads = CommThreads(crossover=True, cpu=True)
    threads.apply()
    assert threads.start_fields() == {"comm_threads": "normal"}
    assert os.sched_getscheduler(engine_thread) == os.SCHED_OTHER
