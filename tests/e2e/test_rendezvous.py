"""torchrun's rendezvous store on the socket xover holds for it (issue 52, finding 1), with real torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from xover.run.external import torchrun

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import os, psutil, torch, torch.distributed as dist
port = int(os.environ["XOVER_TEST_PORT"])
listening = sorted({c.laddr.ip for c in psutil.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr.port == port})
dist.init_process_group("gloo")
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
# a file per rank: two ranks' prints on one pipe were once seen run together ("3.0RESULT")
with open(os.path.join(os.environ["XOVER_TEST_OUT"], f"rank{dist.get_rank()}"), "w") as out:
    out.write(f"RESULT listening={','.join(listening)} sum={total.item()}")
dist.destroy_process_group()
"""


def test_node_zero_serves_the_rendezvous_on_the_socket_held_for_it(tmp_path):
    """The holder listens on the job's address (here 127.0.0.1, not every interface) and node 0's
    torchrun serves the c10d store on that very socket: the rendezvous completes, the workers run."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    held = torchrun.reserve_rendezvous("localhost", "127.0.0.1", "", [])
    kept = torchrun.keep_here({"PET_RDZV_ID": "0" * 32, "PET_RDZV_ENDPOINT": held.endpoint,
                                "PET_RDZV_CONF": "is_host=1", torchrun.HANDOFF_VARIABLE: held.handoff})
    env = {**os.environ, "XOVER_TEST_PORT": str(held.port), "XOVER_TEST_OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    ran = subprocess.run([sys.executable, "-c", torchrun._SERVE, kept, "--nnodes=1", "--nproc-per-node=2",
                          "--rdzv-backend=c10d", str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    printed = [(tmp_path / f"rank{rank}").read_text() for rank in (0, 1)]
    assert [re.fullmatch(r"RESULT listening=(\S*) sum=(\S+)", text).groups() for text in printed] == [
        ("127.0.0.1", "3.0")] * 2, printed
    assert not os.path.exists(kept) and not os.path.exists(held.handoff)
