"""runtime/worker.py's place_on_device on a CPU: a rank computes on the threads it has under plain torchrun or
horovodrun (the user's OMP_NUM_THREADS, which torch read at its start), unless XOVER_THREADS_PER_RANK is given."""

from __future__ import annotations

import pytest
import torch

from xover.runtime.worker import place_on_device


@pytest.fixture
def cpu_rank(monkeypatch):
    """A CPU rank's settings (no pinning, so this process keeps its cores); torch's threads restored after."""
    before, cores = torch.get_num_threads(), __import__("os").sched_getaffinity(0)
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")
    monkeypatch.setenv("XOVER_PIN_CORES", "0")
    monkeypatch.delenv("XOVER_DEVICES", raising=False)
    monkeypatch.delenv("XOVER_THREADS_PER_RANK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(before)
    __import__("os").sched_setaffinity(0, cores)


def _placed_threads(started_with: int) -> int:
    torch.set_num_threads(started_with)  # what torch made of OMP_NUM_THREADS (or its default) at its start
    assert place_on_device(0).type == "cpu"
    return torch.get_num_threads()


def test_one_thread_when_nothing_says_otherwise(cpu_rank):
    assert _placed_threads(started_with=3) == 1


def test_the_users_omp_num_threads_is_left_as_torch_read_it(cpu_rank, monkeypatch):
    """Before: set back to 1 (XOVER_THREADS_PER_RANK's default), and the sums of a CPU job differed from plain
    torchrun's with OMP_NUM_THREADS=2."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _placed_threads(started_with=2) == 2


def test_xover_threads_per_rank_given_wins_over_omp_num_threads(cpu_rank, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("XOVER_THREADS_PER_RANK", "3")
    assert _placed_threads(started_with=2) == 3


def test_an_omp_num_threads_openmp_refuses_is_one_thread(cpu_rank, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "0")
    assert _placed_threads(started_with=2) == 1
