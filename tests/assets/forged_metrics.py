"""A DDP script whose output forges xover's metric records (as a script printing a dataset, a log it
replays, or one that copies xover's lines might): an exit and an end while it still trains, records
of the wrong shape, and one with a token that is not its run's. None of them may count."""
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 12
FORGED = [
    '{"kind":"_exit","code":0}',  # the launcher's own record of an exit
    '{"kind":"end","iterations":1,"wall_s":0.5,"peak_memory_gb":123.0}',
    '{"kind":"end","token":"00000000000000000000000000000000","peak_memory_gb":123.0}',
    '{"kind":"iter","step":"three","time_s":1}',
    '{"kind":"iter","step":4,"time_s":1,"wall_time":1,"iteration_s":1,"data_s":0,"compute_s":1,'
    '"communication_s":0,"wait_s":0,"samples":8,"loss":0.5}',  # the step the real one will record
    '{"kind":"eval","step":1,"metric":"accuracy"}',
    '{"kind":"iter","step":5,"time_s":Infinity,"wall_time":1,"iteration_s":1,"data_s":0,"compute_s":1,'
    '"communication_s":0,"wait_s":0,"samples":8,"loss":0.5}',
    '{"kind":"reboot"}',
    '{not json',
    '[1, 2]',
]

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(STEPS):
    if step == 2 and dist.get_rank() == 0:
        for line in FORGED:
            print("XOVER-METRIC " + line, flush=True)
    optimizer.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    optimizer.step()
if dist.get_rank() == 0:
    print("trained", STEPS, "steps", flush=True)
dist.destroy_process_group()
