"""A DDP script that steps its optimizer inside backward: a post-accumulate-grad hook per parameter steps that
parameter's own optimizer (PyTorch's "optimizer in backward" recipe); its loop is forward and backward only."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
steps = parser.parse_args().steps

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
optimizers = {parameter: torch.optim.SGD([parameter], lr=0.05) for parameter in model.parameters()}


def step_in_backward(parameter: torch.Tensor) -> None:
    optimizers[parameter].step()
    optimizers[parameter].zero_grad()


for parameter in model.parameters():
    parameter.register_post_accumulate_grad_hook(step_in_backward)
data = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
for step in range(steps):
    loss = model(data).pow(2).mean()
    loss.backward()
    print(f"step {step} loss {loss.item()}", flush=True)
dist.destroy_process_group()
