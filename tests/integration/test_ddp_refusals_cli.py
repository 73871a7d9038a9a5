"""DDP scripts refused through real processes (the shim, `xover run`, exit 2, nothing started), and a finished
rank that leaves without the interpreter's teardown (where Gloo sometimes aborts) losing nothing."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xover.scripts import ScriptRefused, check_ddp_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "recipes/examples/ddp_digits.py"
STEPS = 30
LOSS_LINE = re.compile(r"^(?:step \d+|final) loss \S+$", re.MULTILINE)


def test_a_script_without_ddp_is_refused_before_it_starts(tmp_path):
    with pytest.raises(ScriptRefused, match=r"--script recipes/examples/horovod_digits.py: no DistributedDataParallel"):
        check_ddp_script("recipes/examples/horovod_digits.py")
    # inside torchrun the shim refuses it too, before the script runs (horovod is never imported)
    result = subprocess.run([sys.executable, "-m", "xover.runtime.script_shim", "torch", "recipes/examples/horovod_digits.py"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("xover: --script recipes/examples/horovod_digits.py: no DistributedDataParallel")


def test_xover_refuses_a_script_without_ddp_with_exit_2(isolated_results):
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--engine", "torch", "--script",
                             "recipes/examples/horovod_digits.py", "--mode", "crossover"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 2
    assert "recipes/examples/horovod_digits.py" in result.stderr and "DistributedDataParallel" in result.stderr
    assert not (isolated_results / "results" / "runs").exists() or not any(
        (isolated_results / "results" / "runs").iterdir())  # nothing started


JOIN_SCRIPT = """
import contextlib, sys
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if "--even" in sys.argv:
    joined = contextlib.nullcontext()
else:  # behind an `if`, as a flag would put it: refused at the first forward, not before the start
    joined = Join([model])
with joined:  # uneven inputs
    for _ in range(3 + dist.get_rank()):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
"""


def test_torchs_join_outside_any_if_is_refused_before_the_start_and_another_join_is_not(tmp_path):
    # it was refused at the first forward only (exit 1, its runs started), its reason "the divisor changes"
    script = tmp_path / "joined.py"
    script.write_text(JOIN_SCRIPT.replace('if "--even" in sys.argv:', "if False:").replace("else:  #", "if True:  #")
                      .replace("with joined:", "with Join([model]):"))
    with pytest.raises(ScriptRefused, match=r"joined.py: trains its DDP model inside Join .*DistributedSampler"):
        check_ddp_script(script)
    script.write_text(JOIN_SCRIPT.replace("from torch.distributed.algorithms.join import Join",
                                          "from mylib import Join").replace("joined = Join", "Join"))
    check_ddp_script(script)  # not torch's: left alone
    behind = tmp_path / "behind.py"
    behind.write_text(JOIN_SCRIPT)
    check_ddp_script(behind)  # behind an `if`: the shim refuses it if it is met


def test_a_script_its_shim_refuses_while_running_is_not_started_again(isolated_results, tmp_path):
    """Refused at its first run (its sequential run alone), a script's comparison starts none of its other runs,
    nor its copy's: each would be refused the same way."""
    script = tmp_path / "ddp_join.py"
    script.write_text(JOIN_SCRIPT)
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", str(script), "--script", str(script),
                             "--mode", "all", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode != 0
    jobs = json.loads(result.stdout)["jobs"]
    assert [(job["name"], job["mode"], job["status"]) for job in jobs] == [("ddp_join", "sequential", "failed")]
    assert "trains its DDP model inside Join" in jobs[0]["error"]
    assert "ddp_join: refused (trains its DDP model inside Join" in result.stderr
    assert "4 later runs with it not started" in result.stderr  # its copy alone, concurrent, crossover, adaptive


FAILING_SCRIPT = """
import sys
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(4, 2))
data = open(sys.argv[1]).read()  # a data file that is not there: the script's own failure
"""


def test_a_script_that_fails_alone_is_not_started_again(isolated_results, tmp_path):
    """A script's own error in its sequential run (alone, before any run of it finished) ends its comparison
    there: its copy alone and each co-located mode would fail the same way, with a partner waiting beside it."""
    script = tmp_path / "needs_data.py"
    script.write_text(FAILING_SCRIPT)
    missing = tmp_path / "missing.csv"
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", str(script), "--script", str(script),
                             "--mode", "all", "--json", "--", str(missing)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode != 0
    jobs = json.loads(result.stdout)["jobs"]
    assert [(job["name"], job["mode"], job["status"]) for job in jobs] == [("needs_data", "sequential", "failed")]
    assert "FileNotFoundError" in jobs[0]["error"]
    said = (rf"needs_data: failed alone \(rank [01]: FileNotFoundError: \[Errno 2\] No such file or directory: "
            rf"'{re.escape(str(missing))}'\); 4 later runs with it not started")
    assert re.search(said, result.stderr), result.stderr
    # the report says which runs were not started, and why (it showed the one failed row, and no reason)
    reported = subprocess.run([sys.executable, "-m", "xover", "report", "--format", "json"], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
    assert reported.returncode == 0, reported.stderr
    not_started = json.loads(reported.stdout)["not_started"]
    assert [(unit["mode"], unit["jobs"]) for unit in not_started] == [
        ("sequential", ["needs_data#2"]), ("concurrent", ["needs_data", "needs_data#2"]),
        ("crossover", ["needs_data", "needs_data#2"]), ("adaptive", ["needs_data", "needs_data#2"])]
    assert {unit["group"] for unit in not_started} == {0}
    assert all(re.match(r"needs_data: failed alone \(rank [01]: FileNotFoundError", unit["why"]) for unit in not_started)
    assert json.loads(result.stdout)["not_started"] == not_started  # `xover run --json` says them as the report does


SPAWN_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel


    def train(rank, world):
        open(os.path.join(sys.argv[1], f"started-{rank}"), "w").close()


    if __name__ == "__main__":
        mp.spawn(train, args=(2,), nprocs=2)
""")


def test_a_script_that_spawns_its_own_ranks_is_refused_before_any_starts(tmp_path):
    """The PyTorch tutorial's DDP starts its ranks with mp.spawn and its own MASTER_PORT: under torchrun each
    rank's spawned world waited on that port for ranks of another's, for ever (seen 2026-11-30)."""
    script = tmp_path / "ddp_spawn.py"
    script.write_text(SPAWN_SCRIPT)
    result = subprocess.run([sys.executable, "-m", "xover.runtime.script_shim", "torch", str(script), str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "starts its own training processes (torch.multiprocessing.spawn) where torchrun has started them" in line
    assert not list(tmp_path.glob("started-*"))


def test_a_finished_rank_leaves_without_the_interpreters_teardown_and_loses_nothing():
    """What Python does at exit still happens (threads joined, atexit handlers, streams flushed), then
    the process ends before the teardown where Gloo sometimes aborts."""
    program = textwrap.dedent("""
        import atexit, sys, threading, time
        from xover.runtime.worker import exit_without_teardown
        atexit.register(lambda: print("atexit ran", flush=False))
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
        sys.stdout.write("unflushed")
        exit_without_teardown()
        print("never")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["unflushedthread finished", "atexit ran"]


FSDP_SCRIPT = textwrap.dedent("""
    import sys
    import torch, torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 1)
    if "--shard" in sys.argv:
        model = FSDP(model, device_id=torch.device("cpu"))
    else:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        loss = model(torch.ones(2, 8)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""")


def test_a_model_sharded_with_fsdp_is_refused_by_name_before_and_where_it_is_built_behind_a_flag(
        isolated_results, tmp_path):
    """FSDP's all-gathers and reduce-scatters run inside forward and backward: refused before anything starts
    where the script always builds it, and at its first step where a flag builds it (the step without DDP said
    only 'optimizer.step() before any DistributedDataParallel model was built')."""
    script = tmp_path / "train_fsdp.py"
    script.write_text(FSDP_SCRIPT)
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", str(script), "--script", str(script),
                             "--mode", "all", "--json", "--", "--shard"], capture_output=True, text=True, timeout=300,
                            cwd=ROOT)
    assert result.returncode != 0
    jobs = json.loads(result.stdout)["jobs"]
    assert [(job["name"], job["mode"], job["status"]) for job in jobs] == [("train_fsdp", "sequential", "failed")]
    assert "shards its model with FSDP (FullyShardedDataParallel)" in jobs[0]["error"], jobs[0]["error"]
    assert "wrap the model in DistributedDataParallel" in jobs[0]["error"]
    # built unconditionally: refused by its name, exit 2, one line, nothing started
    always = FSDP_SCRIPT.replace('if "--shard" in sys.argv:\n    model = FSDP', "model = FSDP").replace(
        "else:\n    model = DistributedDataParallel(model)\n", "")
    assert "\nmodel = FSDP(model" in always and "else" not in always
    script.write_text(always)
    refused = subprocess.run([sys.executable, "-m", "xover", "run", "--script", str(script), "--mode", "crossover"],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (f"error: --script {script}: shards its model with FSDP (FullyShardedDataParallel), "
                                      f"whose all-gathers and reduce-scatters run inside forward and backward and would "
                                      f"hold the turn through communication; crossover takes turns around DDP's gradient "
                                      f"all-reduces: wrap the model in DistributedDataParallel to run it under xover")
