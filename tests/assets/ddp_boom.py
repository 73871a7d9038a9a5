"""A DistributedDataParallel script that fails before its first step: `xover run` prints the reason
(RuntimeError: boom) and the job's log folder under its table."""
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel  # noqa: F401 - what makes it a DDP script

if dist.is_available():
    raise RuntimeError("boom")
