"""A DistributedDataParallel script that keeps its training loop quiet, as scripts do to hide a
library's chatter or under a live display: `--silence python` wraps the loop in
`contextlib.redirect_stdout(io.StringIO())`, `--silence fd` points file descriptor 1 at /dev/null.
It knows nothing of xover; its iterations must be recorded all the same (issue 58).

    torchrun --standalone --nproc-per-node=2 tests/assets/quiet_stdout.py --steps 8 --silence fd
"""

import argparse
import contextlib
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--silence", choices=("python", "fd"), default="python")
args = parser.parse_args()


@contextlib.contextmanager
def silenced(how: str):
    if how == "python":
        with contextlib.redirect_stdout(io.StringIO()):
            yield
        return
    sys.stdout.flush()
    saved, quiet = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(3)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(dist.get_rank())
    with silenced(args.silence):
        for step in range(args.steps):
            x = torch.randn(32, 16, generator=generator)
            y = torch.randint(0, 4, (32,), generator=generator)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"step {step} loss {loss.item()!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
