"""`xover cluster up` without root: one line, exit 2, nothing built (the cluster itself: tests/e2e/test_cluster.py)."""

import os
import sys

import pytest

from xover.emulation import cluster
from xover.errors import Interrupted

CLUSTER_CLI = [sys.executable, "-m", "xover", "cluster"]
TWO_HOSTS = "xo-h1:1,xo-h2:1"

ALL_REDUCE = """
import socket, sys, time
import torch
import horovod.torch as hvd

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
print(f"RESULT host={socket.gethostname()} rank={hvd.rank()} sum={total}", flush=True)
size_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if size_bytes:
    tensor = torch.ones(size_bytes // 4)
    hvd.allreduce(tensor, op=hvd.Sum)  # warm-up: connections, buffers
    times = []
    for _ in range(5):
        start = time.perf_counter()
        hvd.allreduce(tensor, op=hvd.Sum)
        times.append(time.perf_counter() - start)
    print(f"TIMING rank={hvd.rank()} median_ms={sorted(times)[2] * 1000:.1f}", flush=True)
"""

TORCH_ALL_REDUCE = """
import socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(f"RESULT host={socket.gethostname()} rank={dist.get_rank()} sum={value.item()}", flush=True)
dist.destroy_process_group()
"""


def test_up_without_root_fails_with_exit_2(monkeypatch):
    # the interpreter here lives in root's home, so no other user can run it: the check sees another user instead
    from typer.testing import CliRunner

    from xover.cli_cluster import cluster_app

    # what was up before (a user's own cluster, `make demo`'s) stays as it was; nothing new is built
    before = cluster.live_namespaces()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(cluster_app, ["up", "--hosts", "2"])
    assert result.exit_code == 2, result.output
    assert "needs root" in result.output and isinstance(result.exception, SystemExit)
    assert cluster.live_namespaces() == before


@pytest.mark.parametrize("args, said", [
    (["--devices-per-host", "99999999999"], "--devices-per-host 99999999999: give a whole number from 1 to 65536"),
    (["--devices-per-host", "0"], "--devices-per-host 0: give a whole number from 1 to 65536"),
    (["--hosts", "0"], "--hosts 0: give between 1 and 200 hosts"),
])
def test_up_refuses_a_count_out_of_range_before_it_builds_anything(monkeypatch, args, said):
    """`cluster up --devices-per-host 99999999999` counted the devices of each host one by one (hours, as root, with
    nothing said) for an -H spec that every command then refuses (more than 65536 slots)."""
    from typer.testing import CliRunner

    from xover.cli_cluster import cluster_app

    def nothing_checked():
        raise AssertionError("the requirements were looked at before the counts were checked")

    monkeypatch.setattr(cluster, "missing_requirements", nothing_checked)
    result = CliRunner().invoke(cluster_app, ["up", *args])
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith(f"error: {said}") and len(result.output.strip().splitlines()) == 1, (
        result.output)


@pytest.mark.parametrize("command, function, left", [
    ("up", "cluster_up", "what was built of the cluster was removed (`xover cluster status` to see)"),
    ("status", "cluster_status", "the cluster was left as it was"),
    ("down", "cluster_down", "the cluster may be half removed: run `xover cluster down` again"),
])
@pytest.mark.parametrize("stop", [Interrupted(), KeyboardInterrupt()], ids=["interrupted", "ctrl-c"])
def test_each_cluster_command_ends_as_it_did_on_an_interrupt_and_an_error(monkeypatch, command, function, left, stop):
    """`xover cluster` had a copy of its own of the command line's user_errors; it uses that one now (cli_common),
    each command's words and exit codes as they were: an interrupt says what it left, exit 130; a cluster's error
    is one line, exit 2."""
    from typer.testing import CliRunner

    from xover.cli_cluster import cluster_app

    def stopped(*args):
        raise stop

    monkeypatch.setattr(cluster, function, stopped)
    result = CliRunner().invoke(cluster_app, [command])
    assert (result.exit_code, result.output.strip()) == (130, f"interrupted: {left}")

    def refused(*args):
        raise cluster.ClusterError("no such thing")

    monkeypatch.setattr(cluster, function, refused)
    result = CliRunner().invoke(cluster_app, [command])
    assert (result.exit_code, result.output.strip()) == (2, "error: no such thing")
