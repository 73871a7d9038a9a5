"""A small Horovod script whose step and backward run collectives of Horovod's own (it knows nothing of xover):
--aux-every K uses an auxiliary head on every K-th step only, so that on the others its parameters have no
gradient and DistributedOptimizer's step all-reduces zeros for them; --center-by-allreduce centres the hidden
features on their mean over every rank's batch, an hvd.allreduce the loss is differentiated through (its
gradient's all-reduce runs in backward). --fp16-allreduce compresses the gradients (hvd.Compression.fp16);
--process-set adds a process set of rank 0 (hvd.add_process_set, with HOROVOD_DYNAMIC_PROCESS_SETS=1) and
all-reduces each step's loss over it (not with --center-by-allreduce: Horovod 0.28.1 then hangs under plain
horovodrun too). --clip clips the gradients as Horovod's documentation does: optimizer.synchronize(), then
clip_grad_norm_, then the step under optimizer.skip_synchronize(). Every rank prints each step's loss."""

import argparse

import horovod.torch as hvd
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.aux = nn.Linear(32, 4)

    def forward(self, x, use_aux=False, center=False):
        hidden = self.body(x)
        if center:
            hidden = hidden - hvd.allreduce(hidden.mean(dim=0), name="center")
        return self.head(hidden), (self.aux(hidden) if use_aux else None)


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--aux-every", type=int, default=1)
parser.add_argument("--center-by-allreduce", action="store_true")
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--process-set", action="store_true")
parser.add_argument("--clip", action="store_true")
args = parser.parse_args()

hvd.init()
first = hvd.add_process_set([0]) if args.process_set else None
torch.set_num_threads(1)
torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
generator = torch.Generator().manual_seed(7 + hvd.rank())
for step in range(args.steps):
    x, y = torch.randn(16, 16, generator=generator), torch.randint(0, 4, (16,), generator=generator)
    out, aux = model(x, use_aux=step % args.aux_every == 0, center=args.center_by_allreduce)
    loss = nn.functional.cross_entropy(out, y)
    if aux is not None:
        loss = loss + 0.3 * nn.functional.cross_entropy(aux, y)
    optimizer.zero_grad()
    loss.backward()
    if args.clip:
        optimizer.synchronize()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with optimizer.skip_synchronize():
            optimizer.step()
    else:
        optimizer.step()
    print(f"rank {hvd.rank()} step {step} loss {loss.item():.10f}", flush=True)
    if first is not None and first.included():
        print(f"rank 0's set: loss {hvd.allreduce(loss.detach(), process_set=first, name='first').item():.10f}",
              flush=True)
if first is not None:
    hvd.barrier()  # rank 1 ending first shuts Horovod down under rank 0's last all-reduce over its set
