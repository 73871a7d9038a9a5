"""A DDP script whose model keeps its loss on itself and returns nothing through DDP's output, with
find_unused_parameters (a head no forward uses): before each backward the script prepares DDP's reducer with that
loss, as PyTorch Lightning's DDP strategy does in manual optimization (a GAN's two manual_backward calls a step).
DDP waits for its all-reduce of the used-parameter map at the end of every such backward; with --late-ms, rank 1
is that late after each step, so rank 0 waits that long there. Rank 0 prints each step's loss.

    torchrun --standalone --nproc-per-node=2 ddp_loss_kept_on_the_module.py --steps 12 --late-ms 60
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--late-ms", type=float, default=0.0)
args = parser.parse_args()


class KeepsItsLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 64)
        self.head = nn.Linear(64, 2)
        self.unused = nn.Linear(4, 4)
        self.loss: torch.Tensor | None = None

    def forward(self, x, y) -> None:
        self.loss = F.cross_entropy(self.head(torch.relu(self.body(x))), y)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    module = KeepsItsLoss()
    model = DistributedDataParallel(module, find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(32, 16, generator=generator)
        y = (x[:, :3].sum(1) > 0).long()
        model(x, y)
        loss = module.loss
        optimizer.zero_grad()
        model.reducer.prepare_for_backward([loss])  # Lightning's DDPStrategy.pre_backward, in manual optimization
        loss.backward()
        optimizer.step()
        if rank == 1 and args.late_ms:
            time.sleep(args.late_ms / 1000)
        if rank == 0:
            print(f"step {step} loss {loss.item():.17g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
