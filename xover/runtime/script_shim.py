"""Crossover for unmodified training scripts: Horovod scripts under horovodrun, DDP scripts under torchrun.

    python -m xover.runtime.script_shim horovod train.py ARGS...
    python -m xover.runtime.script_shim torch train.py ARGS...

Before the script runs, the engine's optimizer wrapper (`hvd.DistributedOptimizer`, or
`DistributedDataParallel`, see ddp_shim.py) is adapted so that, without any edit to the script, the
job holds its device's turn from the update (and the next forward) to the end of backward, and waits
for its all-reduces outside the turn:

    optimizer.step():   wait for the all-reduces (no spinning) -> take the turn -> update
    any forward:        take the turn if not held (the first iteration, an evaluation)
    every module/grad:  a checkpoint: yield to a job the policy ranks first, take the turn back
    end of backward():  (GPU: wait for the compute stream) -> release the turn
    a blocking collective of the script's own (hvd.allreduce of a logged loss, dist.barrier(), ...):
                        outside the turn, taken back after

The end of backward is where `torch.autograd.backward` returns, so frozen or unused parameters
change nothing. Metrics come from this timing (the script prints what it likes): one `iter` record
per backward.
"""

from __future__ import annotations

import contextlib
import functools
import os
import runpy
import sys
import time
from typing import Callable

import torch

from .link_priority import LinkPriority
from .metrics import emit
from .thread_policy import CommThreads
from .turn_client import after_gradient, token_from_env
from .worker import exit_without_teardown, peak_memory_gb, place_on_device


class ScriptCoordinator:
    """Takes and releases the turn around an unmodified script's training steps."""

    def __init__(self, local_rank: int, rank: int, world_size: int, engine: str) -> None:
        self.rank, self.world_size, self.engine = rank, world_size, engine
        self.device = place_on_device(local_rank)
        self.turn = token_from_env(local_rank, synchronize=self.synchronize)
        self.wait_for_gradients: Callable[[], None] | None = None  # set when the engine's wrapper is built
        self.step = 0
        self.batch = 0
        self.started = self.previous_end = time.perf_counter()
        self.phases = {"communication_s": 0.0, "wait_s": 0.0}
        self.turn_taken_at = 0.0
        self.watched: set[int] = set()
        self.gradient_hooks: list = []  # the gradients' accumulator nodes: their checkpoint hooks live as long
        self.link = LinkPriority()
        self.comm_threads = CommThreads(crossover=self.turn.crossover, cpu=self.device.type == "cpu")
        torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward)
        original_backward = torch.autograd.backward

        def backward(*args, **kwargs):
            result = original_backward(*args, **kwargs)
            self.end_of_backward()
            return result

        torch.autograd.backward = backward  # Tensor.backward() calls it too

    @property
    def attached(self) -> bool:
        return self.wait_for_gradients is not None

    # -- the turn ------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for the GPU work queued so far on the device the script computes on: the current CUDA
        device when the turn is released (a DDP script picks cuda:LOCAL_RANK itself, whatever xover
        set), so that the partner finds the GPU idle."""
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()

    @contextlib.contextmanager
    def outside_turn(self):
        """Run a collective without holding the turn, and take it back after (counted as yielded). A
        job must never hold a turn while blocked in a collective: its peer ranks may be waiting for
        turns that other jobs hold in the same state, on other devices (a deadlock the work-conserving
        policy can reach). The server hears step-out then step-in, the same phase: a yield that
        re-queued at once could be granted while the collective still waits for a peer rank."""
        if not self.turn.holding:
            yield
            return
        self.synchronize()
        self.turn.step_out()
        try:
            yield
            # an NCCL collective returns once queued: wait for it here, outside the turn, not at the
            # next synchronisation inside it (its kernel waits for the peer ranks)
            self.synchronize()
        finally:
            self.turn.step_in()

    def _take_turn(self) -> None:
        if not self.turn.holding:
            self.phases["wait_s"] += self.turn.acquire()
            self.turn_taken_at = time.perf_counter()

    def _before_forward(self, module, inputs) -> None:
        if not self.attached:
            return
        if self.turn.holding:
            self.turn.checkpoint()
        else:
            self._take_turn()
        if not self.batch and inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() > 0:
            self.batch = inputs[0].shape[0]  # the outermost module sees the batch first

    def end_of_backward(self) -> None:
        """Backward is over (where torch.autograd.backward returns, or an autograd callback): release."""
        if not self.attached or not self.turn.holding:
            return
        self.synchronize()
        end = time.perf_counter()
        phase = self.turn.phase
        self.turn.release()
        if self.rank == 0:
            emit("iter", step=self.step, time_s=end - self.started, wall_time=time.time(),
                 iteration_s=end - self.previous_end, data_s=0.0,
                 compute_s=end - self.turn_taken_at - phase.yielded_s,
                 communication_s=self.phases["communication_s"], wait_s=self.phases["wait_s"] + phase.yielded_s,
                 samples=self.batch * self.world_size, loss=None, yields=phase.yields,
                 held=[[round(a, 6), round(b, 6)] for a, b in phase.held] or None)
        self.link.apply(self.step)
        self.comm_threads.apply(self.step)
        self.step += 1
        self.previous_end = end
        self.phases = {"communication_s": 0.0, "wait_s": 0.0}

    # -- the engine ----------------------------------------------------------------------------
    def attach(self, parameters: list[torch.Tensor], wait_for_gradients: Callable[[], None]) -> None:
        """The script built its distributed optimizer (or model): watch its parameters' gradients."""
        for parameter in parameters:
            if parameter.requires_grad and id(parameter) not in self.watched:
                self.watched.add(id(parameter))
                self.gradient_hooks.append(after_gradient(parameter, self.turn.checkpoint))
        first = not self.attached
        self.wait_for_gradients = wait_for_gradients
        if first:
            self.link.apply()  # the process group is up: its sockets are open
            self.comm_threads.apply()  # and the engine's threads have started
        if first and self.rank == 0:
            emit("start", job=os.environ.get("XOVER_JOB", "script"), iterations=None, world_size=self.world_size,
                 engine=self.engine, device=str(self.device), parameters=sum(p.numel() for p in parameters),
                 gradient_bytes=sum(p.numel() * p.element_size() for p in parameters if p.requires_grad),
                 wall_time=time.time(), **self.link.start_fields(), **self.comm_threads.start_fields())

    def before_step(self) -> None:
        """optimizer.step(): the all-reduces end outside the turn, then the update takes it."""
        start = time.perf_counter()
        if self.wait_for_gradients is not None:
            self.wait_for_gradients()
        self.phases["communication_s"] += time.perf_counter() - start
        self._take_turn()

    def finish(self) -> None:
        if self.turn.holding:
            self.synchronize()  # the last update's kernels run in this turn, not the partner's
        self.turn.release()
        self.turn.close()
        if self.attached and self.rank == 0:
            emit("end", iterations=self.step, wall_s=time.perf_counter() - self.started,
                 peak_memory_gb=peak_memory_gb(self.device))


def install_horovod() -> ScriptCoordinator:
    """Wrap hvd.DistributedOptimizer: its step waits for the all-reduces outside the turn."""
    import horovod.torch as hvd

    from .gradient_wait import wait_without_spinning

    # horovodrun tells each rank who it is; the script calls hvd.init() itself
    coordinator = ScriptCoordinator(int(os.environ.get("HOROVOD_LOCAL_RANK", "0")),
                                    int(os.environ.get("HOROVOD_RANK", "0")),
                                    int(os.environ.get("HOROVOD_SIZE", "1")), "horovod")
    wrapped = hvd.DistributedOptimizer

    def DistributedOptimizer(optimizer, *args, **kwargs):  # noqa: N802 - stands in for Horovod's factory
        distributed = wrapped(optimizer, *args, **kwargs)

        def wait_for_gradients() -> None:
            for handle, _ in list(distributed._handles.values()):
                if handle is not None and not callable(handle):
                    wait_without_spinning(lambda h=handle: hvd.poll(h))

        coordinator.attach(list(distributed._requires_update), wait_for_gradients)
        original_step = distributed.step

        def step(closure=None):
            coordinator.before_step()
            return original_step(closure)

        distributed.step = step
        return distributed

    hvd.DistributedOptimizer = DistributedOptimizer
    for name in HOROVOD_BLOCKING_COLLECTIVES:  # a script's own, e.g. an all-reduce of its logged loss
        original = getattr(hvd, name, None)
        if original is not None:
            setattr(hvd, name, _outside_turn(coordinator, original))
    return coordinator


# horovod.torch's calls that block until every rank has joined; the *_async ones return at once (and
# `synchronize` on their handle blocks). DistributedOptimizer's own waits are not these: it imports them.
HOROVOD_BLOCKING_COLLECTIVES = (
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather", "grouped_allgather",
    "broadcast", "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "synchronize", "broadcast_object", "allgather_object", "broadcast_parameters", "broadcast_optimizer_state")


def _outside_turn(coordinator: ScriptCoordinator, collective: Callable) -> Callable:
    @functools.wraps(collective)
    def call(*args, **kwargs):
        if not coordinator.turn.holding:
            return collective(*args, **kwargs)
        with coordinator.outside_turn():
            return collective(*args, **kwargs)

    return call


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("horovod", "torch"):
        sys.exit("usage: python -m xover.runtime.script_shim horovod|torch SCRIPT [ARGS...]")
    engine, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if engine == "horovod":
        coordinator = install_horovod()
    else:
        from .ddp_shim import install_ddp

        coordinator = install_ddp(script)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    finally:
        coordinator.finish()
    exit_without_teardown()


if __name__ == "__main__":
    main()
