"""A DistributedDataParallel script that communicates through torch's functional collectives
(torch.distributed._functional_collectives, where torch's deprecation warning for torch.distributed.nn's points;
it knows nothing of xover). Its model gathers every rank's features inside forward (all_gather_single_autograd: an
AsyncCollectiveTensor waited for at its first use, in forward; its backward a reduce-scatter waited for in
backward) for a contrastive term of its loss. After each optimizer step the ranks all-reduce the loss (all_reduce,
an AsyncCollectiveTensor again), waited for each step another way a script waits for one (WAITS: its first use in
arithmetic, `.wait()`, `wait_tensor(...)`, `.tolist()`). With --late-ms, rank 1 is that late before the
all-reduce, so rank 0 waits that long for it: time that is communication (the device idles while the ranks meet),
never compute. Rank 0 prints each step's loss and the mean.

    torchrun --standalone --nproc-per-node=2 ddp_functional_collectives.py --steps 12 --late-ms 60
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--late-ms", type=float, default=0.0)
args = parser.parse_args()
# how the all-reduce of the loss is waited for, a step each in turn
WAITS = ("use", "wait", "wait_tensor", "tolist")


class Contrastive(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        features = F.normalize(self.body(x), dim=1)
        everyone = funcol.all_gather_single_autograd(features, 0, dist.group.WORLD)
        return self.head(features), (features @ everyone.t()).logsumexp(1).mean()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(3)
    torch.set_num_threads(1)
    features = torch.randn(64 * world_size, 32)
    labels = (features[:, :4].sum(1) > 0).long()
    model = DistributedDataParallel(Contrastive())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        rows = slice((step * world_size + rank) * 16 % len(features), None)
        x, y = features[rows][:16], labels[rows][:16]
        optimizer.zero_grad()
        logits, spread = model(x)
        loss = F.cross_entropy(logits, y) + 0.1 * spread
        loss.backward()
        optimizer.step()
        if rank == 1 and args.late_ms:
            time.sleep(args.late_ms / 1000)
        total = funcol.all_reduce(loss.detach().reshape(1), "sum", dist.group.WORLD)
        wait = WAITS[step % len(WAITS)]
        if wait == "use":
            mean = (total / world_size).item()
        elif wait == "wait":
            mean = total.wait().item() / world_size
        elif wait == "wait_tensor":
            mean = funcol.wait_tensor(total).item() / world_size
        else:
            mean = total.tolist()[0] / world_size
        if rank == 0:
            print(f"step {step} loss {loss.item():.17g} mean {mean:.17g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
