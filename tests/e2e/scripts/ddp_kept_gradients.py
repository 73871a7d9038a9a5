"""A DDP script that keeps gradients by reference (no clone), as under plain torchrun it may: each backward after a
zero_grad() makes new tensors, and DDP copies the reduced bucket into them (gradient_as_bucket_view is off unless
the script asks). `--case pcgrad`: two backwards a step, one per task, the first task's .grad kept between them and
projected against the second's (gradient surgery); `--case previous`: last step's .grad kept, the LR scaled by the
cosine with this step's. `--set-to-none-false`: zero_grad(set_to_none=False), the same tensors kept and zeroed."""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--case", choices=("pcgrad", "previous"), default="pcgrad")
parser.add_argument("--set-to-none-false", action="store_true")
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)


class TwoTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.Tanh())
        self.a, self.b = nn.Linear(32, 1), nn.Linear(32, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.a(h).squeeze(1), self.b(h).squeeze(1)


model = DDP(TwoTask(), find_unused_parameters=True)  # each task's backward leaves the other head unused
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05)
gen = torch.Generator().manual_seed(3 + rank)
set_to_none = not args.set_to_none_false
previous = None


def flat(grads):
    return torch.cat([g.flatten() for g in grads])


for step in range(args.steps):
    x, ya, yb = (torch.randn(16, 16, generator=gen), torch.randn(16, generator=gen), torch.randn(16, generator=gen))
    if args.case == "pcgrad":
        kept, losses = [], []
        for task in (0, 1):
            opt.zero_grad(set_to_none=set_to_none)
            loss = F.mse_loss(model(x)[task], (ya, yb)[task])
            loss.backward()
            kept.append([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])
            losses.append(loss.item())
        g1, g2 = flat(kept[0]), flat(kept[1])
        measure = torch.dot(g1, g2).item()
        if measure < 0:
            g1 = g1 - measure / g2.dot(g2) * g2
        total, offset = g1 + g2, 0
        for p in params:
            p.grad = total[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
    else:
        opt.zero_grad(set_to_none=set_to_none)
        out_a, out_b = model(x)
        loss = F.mse_loss(out_a, ya) + F.mse_loss(out_b, yb)
        loss.backward()
        losses = [loss.item()]
        grads = [p.grad for p in params]
        measure = 1.0 if previous is None else F.cosine_similarity(flat(grads), flat(previous), dim=0).item()
        for group in opt.param_groups:
            group["lr"] = 0.05 * (1.0 + measure) / 2
        previous = grads
    opt.step()
    if rank == 0:
        print(f"step {step} loss {' '.join(v.hex() for v in losses)} measure {measure.hex()}", flush=True)
dist.destroy_process_group()
