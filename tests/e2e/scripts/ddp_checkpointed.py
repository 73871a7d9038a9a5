"""A multi-task DDP script with activation checkpointing as the transformers library does it: each block through
`torch.utils.checkpoint(..., use_reentrant=True)`, whose backward recomputes the block and backs through it from
inside the script's backward; two heads, two losses and one backward through `torch.autograd.backward([a, b])`, the
second per sample with its weights as its gradient (`backward([a, errors], [None, weights])`).
Rank 0 prints each step's two losses and their sum, and the weights' sum at the end."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(32, 64)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(3))
        self.classes, self.value = nn.Linear(64, 4), nn.Linear(64, 1)

    def forward(self, x):
        hidden = self.stem(x)
        for block in self.blocks:
            hidden = checkpoint(block, hidden, use_reentrant=True)
        return self.classes(hidden), self.value(hidden).squeeze(1)


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(TwoHeads())
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(args.steps):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 32, generator=generator)
    labels = torch.randint(0, 4, (16,), generator=generator)
    optimizer.zero_grad()
    logits, value = model(x)
    classes_loss = nn.functional.cross_entropy(logits, labels)
    value_errors = (value - x[:, 0]) ** 2
    weights = torch.full_like(value_errors, 1.0 / len(value_errors))
    value_loss = (value_errors * weights).sum()
    torch.autograd.backward([classes_loss, value_errors], [None, weights])
    optimizer.step()
    if rank == 0:
        print(f"step {step} loss {classes_loss.item()!r} {value_loss.item()!r} "
              f"sum {classes_loss.item() + value_loss.item()!r}", flush=True)
if rank == 0:
    print(f"final weights {sum(p.detach().double().sum().item() for p in model.parameters())!r}", flush=True)
