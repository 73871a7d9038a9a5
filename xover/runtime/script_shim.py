"""Crossover for unmodified Horovod training scripts.

    python -m xover.runtime.script_shim train.py ARGS...     (under horovodrun)

Before the script runs, `hvd.DistributedOptimizer` is wrapped so that, without any edit to the
script, the job holds its device's turn from the update (and the next forward) until backward has
produced every gradient, and waits for its all-reduces outside the turn:

    optimizer.step():  wait for the all-reduces (no spinning) -> take the turn -> update
    any forward:       take the turn if not held (the first iteration, evaluation)
    last gradient:     (GPU: wait for the compute stream) -> release the turn

Metrics come from this timing (the script prints what it likes): one `iter` record per step.
"""

from __future__ import annotations

import os
import runpy
import sys
import time

import torch

from .engines import wait_without_spinning
from .metrics import emit
from .turns import token_from_env
from .worker import peak_memory_gb, place_on_device, synchronize_device


class ScriptCoordinator:
    def __init__(self, hvd, local_rank: int) -> None:
        self.hvd = hvd
        self.device = place_on_device(local_rank)
        self.turn = token_from_env(local_rank)
        self.holding = False
        self.optimizer = None
        self.expected = 0
        self.produced = 0
        self.step = 0
        self.batch = 0
        self.started = self.previous_end = time.perf_counter()
        self.phases = {"communication_s": 0.0, "wait_s": 0.0}
        self.turn_taken_at = 0.0
        torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward)

    # -- the turn ------------------------------------------------------------------------------
    def _take_turn(self) -> None:
        if not self.holding:
            self.phases["wait_s"] += self.turn.acquire()
            self.holding = True
            self.turn_taken_at = time.perf_counter()

    def _before_forward(self, module, inputs) -> None:
        if not self.holding and self.optimizer is not None:
            self._take_turn()
        if not self.batch and inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() > 0:
            self.batch = inputs[0].shape[0]  # the outermost module sees the batch first

    def _on_gradient(self, parameter) -> None:
        self.produced += 1
        if self.produced == self.expected:  # backward has produced every gradient
            synchronize_device(self.device)
            end = time.perf_counter()
            self.turn.release()
            self.holding = False
            self.produced = 0
            self._report(end)

    # -- the optimizer -------------------------------------------------------------------------
    def attach(self, optimizer) -> None:
        self.optimizer = optimizer
        parameters = list(optimizer._requires_update)
        self.expected = len(parameters)
        for parameter in parameters:
            parameter.register_post_accumulate_grad_hook(self._on_gradient)
        original_step = optimizer.step

        def step(closure=None):
            start = time.perf_counter()
            for handle, _ in list(optimizer._handles.values()):
                if handle is not None and not callable(handle):
                    wait_without_spinning(lambda h=handle: self.hvd.poll(h))
            self.phases["communication_s"] += time.perf_counter() - start
            self._take_turn()
            return original_step(closure)

        optimizer.step = step
        if self.hvd.rank() == 0:
            emit("start", job=os.environ.get("XOVER_JOB", "script"), iterations=None, world_size=self.hvd.size(),
                 engine="horovod", device=str(self.device), parameters=sum(p.numel() for p in parameters),
                 gradient_bytes=sum(p.numel() * p.element_size() for p in parameters), wall_time=time.time())

    def _report(self, end: float) -> None:
        if self.hvd.rank() == 0:
            emit("iter", step=self.step, time_s=end - self.started, wall_time=time.time(),
                 iteration_s=end - self.previous_end, data_s=0.0, compute_s=end - self.turn_taken_at,
                 communication_s=self.phases["communication_s"], wait_s=self.phases["wait_s"],
                 samples=self.batch * self.hvd.size(), loss=None)
        self.step += 1
        self.previous_end = end
        self.phases = {"communication_s": 0.0, "wait_s": 0.0}

    def finish(self) -> None:
        if self.holding:
            self.turn.release()
            self.holding = False
        self.turn.close()
        if self.optimizer is not None and self.hvd.rank() == 0:
            emit("end", iterations=self.step, wall_s=time.perf_counter() - self.started,
                 peak_memory_gb=peak_memory_gb(self.device))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m xover.runtime.script_shim SCRIPT [ARGS...]")
    script, args = sys.argv[1], sys.argv[2:]
    import horovod.torch as hvd

    coordinator = ScriptCoordinator(hvd, int(os.environ.get("HOROVOD_LOCAL_RANK", "0")))
    wrapped = hvd.DistributedOptimizer

    def DistributedOptimizer(optimizer, *a, **kw):  # noqa: N802 - stands in for Horovod's factory
        distributed = wrapped(optimizer, *a, **kw)
        coordinator.attach(distributed)
        return distributed

    hvd.DistributedOptimizer = DistributedOptimizer
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        coordinator.finish()


if __name__ == "__main__":
    main()
