"""A Horovod elastic script run with a fixed -np, as users also run one: @hvd.elastic.run, a TorchState of the
model, optimizer, epoch and batch, state.commit() every third batch and state.check_host_updates() on the others
(each a broadcast among the ranks, made after the step), a reset callback. Every rank prints each step's loss."""

import horovod.torch as hvd
import torch
from torch import nn

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     named_parameters=model.named_parameters())
generator = torch.Generator().manual_seed(7 + hvd.rank())
data, labels = torch.randn(8 * 16, 16, generator=generator), torch.randint(0, 4, (8 * 16,), generator=generator)


def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = 0.1


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, 2):  # noqa: B020 - the elastic examples' way: the state keeps its place
        for state.batch in range(state.batch, 8):  # noqa: B020
            x, y = data[state.batch * 16:(state.batch + 1) * 16], labels[state.batch * 16:(state.batch + 1) * 16]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"rank {hvd.rank()} epoch {state.epoch} batch {state.batch} loss {loss.item():.10f}", flush=True)
            if state.batch % 3 == 0:
                state.commit()
            else:
                state.check_host_updates()
        state.batch = 0


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])
train(state)
