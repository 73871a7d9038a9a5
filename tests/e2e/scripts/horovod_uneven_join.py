"""A Horovod script with uneven data, as users write one: rank 0 has 10 batches an epoch, the others 6, and every
rank calls hvd.join() at the end of each epoch (a joined rank's gradients count as zeros in the all-reduces of the
steps it no longer makes). Every rank prints each step's loss."""

import horovod.torch as hvd
import torch
from torch import nn

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
generator = torch.Generator().manual_seed(7 + hvd.rank())
batches = 10 if hvd.rank() == 0 else 6
for epoch in range(2):
    for batch in range(batches):
        x, y = torch.randn(16, 16, generator=generator), torch.randint(0, 4, (16,), generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"rank {hvd.rank()} epoch {epoch} batch {batch} loss {loss.item():.10f}", flush=True)
    hvd.join()
