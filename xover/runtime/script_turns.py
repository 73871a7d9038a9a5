"""The turns of an unmodified training script's job, taken and released around its training steps, and
what it did per optimizer step (the metrics records). The engines' adaptations that drive it are in
script_shim.py (Horovod, and the entry point) and ddp_shim.py (DistributedDataParallel)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import NoReturn

import torch

from ..engines import ENGINES
from ..records import EndRecord, IterationRecord, StartRecord
from ..settings import JOB_VARIABLE, SCRIPT_STEPS_VARIABLE
from .link_priority import LinkPriority
from .metrics import emit
from .thread_policy import CommThreads
from .turn_client import NoTurn, after_gradient, token_from_env
from .worker import peak_memory_gb, place_on_device


class StepCapReached(SystemExit):
    """The script made the optimizer steps its job asked for: a clean exit on every rank."""

    def __init__(self) -> None:
        super().__init__(0)


class Unfollowable(SystemExit):
    """What the shim cannot follow (exit 2, the reason on stderr)."""

    def __init__(self, script: str | None, problem: str) -> None:
        print(f"xover: {script or 'the script'}: {problem}", file=sys.stderr, flush=True)
        super().__init__(2)


def _loss_value(tensors, gradients=None) -> float | None:
    """The loss a backward was called on, as a number: a scalar's value (the script's, where a GradScaler scaled
    it), or the sum of several (`torch.autograd.backward([loss_a, loss_b])` backs through their sum). A tensor of
    many values backed with its own gradient (per-sample losses and their weights: `losses.backward(weights)`)
    backs through the sum of their products, its loss; None for one backed without a gradient of its shape."""
    if isinstance(tensors, torch.Tensor):
        tensors = (tensors,)
    if not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    if gradients is None or isinstance(gradients, torch.Tensor):
        gradients = (gradients,) + (None,) * (len(tensors) - 1)
    if not isinstance(gradients, (list, tuple)) or len(gradients) != len(tensors):
        return None
    values = []
    for tensor, gradient in zip(tensors, gradients):
        tensor = getattr(tensor, "_xover_unscaled", tensor)  # a loss a GradScaler scaled for backward
        if not isinstance(tensor, torch.Tensor):
            return None
        if tensor.numel() == 1:
            values.append(float(tensor.detach()))
        elif isinstance(gradient, torch.Tensor) and gradient.shape == tensor.shape:
            values.append(float((tensor.detach() * gradient).sum()))
        else:
            return None
    return sum(values)


class StepTally:
    """What one optimizer step took, summed over its backward passes."""

    def __init__(self) -> None:
        self.compute_s = self.communication_s = self.wait_s = 0.0
        self.backwards = self.yields = 0
        self.closure_backwards = 0  # of them, run by an optimizer's closure inside its step (LBFGS, Lightning)
        # rank 0's samples: each backward's batch (micro-batches accumulated), its own size (an epoch's last is often
        # smaller), and one for all of a closure's (LBFGS evaluates its closure on the same batch several times a step)
        self.samples = 0
        self.checkpoints = 0  # module entries and gradients: where a turn can be yielded
        self.loss: float | None = None
        self.reduced_bytes = 0
        self.held: list[list[float]] = []
        # the script evaluating its model: from a forward without gradients to the next forward with them
        self.evaluation_s = 0.0
        self.evaluating_since: float | None = None

    def evaluating(self, without_gradients: bool) -> None:
        """A forward of the model: one without gradients begins an evaluation (or goes on with it); one with
        them ends it. The clock is read only where one begins or ends: this runs before every module's forward."""
        if without_gradients:
            if self.evaluating_since is None:
                self.evaluating_since = time.perf_counter()
        elif self.evaluating_since is not None:
            self.evaluation_s += time.perf_counter() - self.evaluating_since
            self.evaluating_since = None


class ScriptCoordinator:
    """Takes and releases the turn around an unmodified script's training steps.

    Only the training step is followed: the forward of the model the engine wraps (DDP's module, or the
    modules holding a distributed optimizer's parameters, and every module inside them), its backward and
    its optimizer step, in the rank's own process. A module the script calls elsewhere - a transform that
    is an `nn.Module` (torchvision's are) in a Dataset's `__getitem__`, a loss module - takes no turn,
    counts as no checkpoint and gives no batch size. A process forked from the rank (a DataLoader worker)
    inherits the coordinator with its turn socket: there every hook does nothing, so that a worker never
    speaks on the rank's connection, never synchronises a device it cannot use, and never ends at the
    step cap (which the rank's next forward reaches)."""

    def __init__(self, local_rank: int, rank: int, world_size: int, engine: str, script: str | None = None) -> None:
        self.rank, self.world_size, self.engine, self.script = rank, world_size, engine, script
        self.active = True  # False in a process forked from the rank (a DataLoader worker)
        os.register_at_fork(after_in_child=self._forked)
        self.device = place_on_device(local_rank)
        self.turn = token_from_env(local_rank, synchronize=self.synchronize)
        self.wait_for_gradients: Callable[[], None] | None = None  # set when the engine's wrapper is built
        self.step = 0  # optimizer steps made
        self.backwards = 0  # backward passes through the engine's model
        self.untracked_backwards = 0  # backward passes before any engine wrapper was built
        self.gradients = 0  # the model's parameters whose gradient a backward has accumulated, so far
        self.step_cap = int(os.environ.get(SCRIPT_STEPS_VARIABLE) or 0) or None
        self.stop_due = False  # the steps asked for are made: stop where the next iteration begins
        # what a rank that stopped at the step cap does on its way out, outside the turn (the engine's shim sets
        # it: a Horovod rank joins, for its peers waiting in hvd.join() after fewer steps of uneven data)
        self.leave_at_step_cap: Callable[[], None] | None = None
        # StepCapReached raised once: met again, the script caught it (a bare `except:`) and went on. The shim's
        # end of the rank where it stands then
        self.stop_raised = False
        self.end_at_step_cap: Callable[[], NoReturn] | None = None
        self.in_closure_step = False  # inside an optimizer step given a closure (its backwards re-read one batch)
        # the script's backwards under way: 1 inside one (autograd's threads see it too), more inside a backward
        # that backward runs (reentrant checkpointing)
        self.backward_depth = 0
        self.stepped_in_backward = False  # an optimizer stepped inside the backward now running (after_step)
        self.batch = 0  # the first batch seen: the size of a backward's whose forward showed none
        # the batch of the first forward with gradients since the last backward, the model in training mode where
        # one was: the one that backward trains on (a validation forward in eval() without no_grad trains nothing)
        self.forward_batch: int | None = None
        self.forward_batch_training = False  # whether it came from a forward in training mode
        self.started = self.previous_end = time.perf_counter()
        self.tally = StepTally()
        self.bytes_per_step: list[int] = []
        self.checkpoints_per_step: list[int] = []
        self.turn_taken_at = 0.0
        # seconds in collectives outside the turn: all along (a timed wait takes its share out, not to count it
        # twice), and within the turn held now (not its compute); how deep such collectives are nested
        self.outside_s = self.held_outside_s = 0.0
        self.outside_depth = 0
        self.watched: set[int] = set()
        self.model_parameters: set[int] = set()  # every parameter of what the engine wraps (frozen ones too)
        self.is_model: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
        self.gradient_hooks: list = []  # the gradients' accumulator nodes: their checkpoint hooks live as long
        self.link = LinkPriority()
        self.comm_threads = CommThreads(crossover=self.turn.crossover, cpu=self.device.type == "cpu")
        # what must happen before a backward writes the gradients (the DDP shim's unfinished all-reduces)
        self.before_backward: list[Callable[[], None]] = []
        # what a backward's end waits for once the turn is released (the DDP shim's all-reduces, which DDP
        # alone waits for there: a script that reads .grad before its step reads them reduced)
        self.after_backward: list[Callable[[], None]] = []
        # what a forward of the model does first that must not hold the turn (the DDP shim's buffer broadcast)
        self.before_turn_in_forward: list[Callable[[torch.nn.Module], None]] = []
        torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward)
        self._follow_modules_compiled_in_place()
        original_backward = torch.autograd.backward

        def backward(*args, **kwargs):
            if not self.active:
                return original_backward(*args, **kwargs)
            if self.backward_depth:
                # a backward inside the script's backward (reentrant activation checkpointing recomputes a
                # segment and backs through it from its backward): part of the outer one, which keeps the turn
                # to its end and counts once
                self.backward_depth += 1
                try:
                    return original_backward(*args, **kwargs)
                finally:
                    self.backward_depth -= 1
            for prepare in self.before_backward:
                prepare()
            gradients = self.gradients
            self.backward_depth += 1
            try:
                result = original_backward(*args, **kwargs)
            finally:
                self.backward_depth -= 1
            self.end_of_backward()
            if self.gradients > gradients or not self.attached or not self.watched:
                grad_tensors = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
                self._count_backward(args[0] if args else kwargs.get("tensors"), grad_tensors)
            # else a backward that reached none of the model's parameters (a probe fitted on its own beside
            # it): no backward of the model's iteration, nor its loss. Where none is watched (the engine's
            # wrapper holds no parameter that takes a gradient), every backward counts
            self._after_backward()
            if self.stepped_in_backward:  # the optimizer stepped inside it: the iteration ends with it
                self.stepped_in_backward = False
                self.after_step()
            return result

        torch.autograd.backward = backward  # Tensor.backward() calls it too
        scale = torch.amp.GradScaler.scale  # torch.cuda.amp's, Lightning's and Accelerate's scalers are this one

        def scale_and_remember(scaler, outputs):
            scaled = scale(scaler, outputs)
            if isinstance(outputs, torch.Tensor) and scaled is not outputs:
                with contextlib.suppress(AttributeError, RuntimeError):  # a tensor subclass without a __dict__
                    scaled._xover_unscaled = outputs  # the loss the step records: the script's, not times the scale
            return scaled

        torch.amp.GradScaler.scale = scale_and_remember  # type: ignore[method-assign]
        scaler_step = torch.amp.GradScaler.step

        def step_or_skip(scaler, optimizer, *args, **kwargs):
            steps = self.step
            result = scaler_step(scaler, optimizer, *args, **kwargs)
            if self.active and self.step == steps and self.tally.backwards:
                # gradients with an inf or NaN: the scaler skipped optimizer.step(); the iteration ran all the
                # same (forward, backward, all-reduces), and the next must not take its backward and loss
                self.after_step()
            return result

        torch.amp.GradScaler.step = step_or_skip  # type: ignore[method-assign,assignment]

    @property
    def attached(self) -> bool:
        """Whether the engine's wrapper has been built (its gradients can be waited for), in the rank itself."""
        return self.wait_for_gradients is not None and self.active

    def _forked(self) -> None:
        """In a process forked from the rank: follow nothing. The inherited socket is the rank's connection
        to its turn server; the child drops its copy of the descriptor without a word on it."""
        self.active = False
        turn, self.turn = self.turn, NoTurn()
        forget = getattr(turn, "forget", None)
        if forget is not None:
            forget()

    def _of_the_model(self, module: torch.nn.Module) -> bool:
        """Whether `module` is (inside) the model the engine wraps: it holds one of the model's parameters,
        or lies inside a module that does. The outermost module is called first, so its verdict is given to
        everything inside it; a module found outside is asked again once another model is attached."""
        verdict = self.is_model.get(module)
        if verdict is None:
            verdict = any(id(parameter) in self.model_parameters for parameter in module.parameters())
            if verdict:
                for inner in module.modules():
                    self.is_model[inner] = True
            else:
                self.is_model[module] = False
        return verdict

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
        re-queued at once could be granted while the collective still waits for a peer rank.
        Its time is the iteration's communication, held or not: a script's own all_gather_object of its
        metrics, a barrier or a broadcast waits on the peer ranks (and on the gradients' all-reduces queued
        before it) with the device idle. Counted as compute, a job that gathered its loss after each step
        showed 0.2 ms of communication where the same job without the gather showed 4 ms (2026-12-06)."""
        if self.outside_depth:  # a collective inside one (a step's synchronisation made of them): timed once
            yield
            return
        holding = self.turn.holding
        if holding:
            self.synchronize()
            self.turn.step_out()
        self.outside_depth += 1
        start = time.perf_counter()
        try:
            yield
            if holding:
                # an NCCL collective returns once queued: wait for it here, outside the turn, not at the
                # next synchronisation inside it (its kernel waits for the peer ranks)
                self.synchronize()
        finally:
            outside = time.perf_counter() - start
            self.outside_depth -= 1
            self.outside_s += outside
            self.tally.communication_s += outside
            if holding:
                self.held_outside_s += outside
                self.turn.step_in()

    @contextlib.contextmanager
    def _communication(self) -> Iterator[None]:
        """A wait outside the turn timed as the iteration's communication, less what outside_turn counted of it
        already (a collective inside it)."""
        start, outside = time.perf_counter(), self.outside_s
        yield
        self.tally.communication_s += time.perf_counter() - start - (self.outside_s - outside)

    def _take_turn(self) -> None:
        if not self.turn.holding:
            self.tally.wait_s += self.turn.acquire()
            self.turn_taken_at = time.perf_counter()
            self.held_outside_s = 0.0

    def _follow_modules_compiled_in_place(self) -> None:
        """`module.compile()` makes the module's whole call, its forward hooks included, one traced function:
        the hook then only ever runs inside the trace, where it does nothing, and the batch went unseen.
        Such a module's call runs the hook first, outside the trace, as a module compiled by
        `torch.compile(module)` does (its wrapper is a module of its own)."""
        compile_in_place = getattr(torch.nn.Module, "compile", None)
        if compile_in_place is None:
            return
        coordinator = self

        @functools.wraps(compile_in_place)
        def compile(module, *args, **kwargs):
            result = compile_in_place(module, *args, **kwargs)
            compiled = getattr(module, "_compiled_call_impl", None)
            if callable(compiled):

                def call(*inputs, **named):
                    coordinator._before_forward(module, inputs)
                    return compiled(*inputs, **named)

                module._compiled_call_impl = call
            return result

        torch.nn.Module.compile = compile  # type: ignore[method-assign,assignment]

    def _before_forward(self, module, inputs) -> None:
        if torch.compiler.is_compiling():
            # traced by torch.compile (this hook is global): the compiled module's own call, outside the trace,
            # took the turn; a hook torch.compile traced into would fail its trace (and its side effects vanish)
            return
        if not self.attached or not self._of_the_model(module):
            return
        if self.stop_due and torch.is_grad_enabled() and module.training:
            # the next iteration begins: the last step's own work (a checkpoint) is done. Not at an evaluation's
            # forward (no gradients, or the model in eval mode), which rank 0 may make alone while its peers wait
            # at a barrier after it: stopped there, it left them waiting for a rank that had ended
            self._stop_at_step_cap()
        self.tally.checkpoints += 1
        self.tally.evaluating(not torch.is_grad_enabled())
        if self.turn.holding:
            self.turn.checkpoint()
        else:
            for prepare in self.before_turn_in_forward:
                prepare(module)
            self._take_turn()
        if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() > 0:
            # the model's outermost module sees the batch first
            if not self.batch:
                self.batch = inputs[0].shape[0]
            if torch.is_grad_enabled() and (
                self.forward_batch is None or (module.training and not self.forward_batch_training)
            ):
                # a model trained in eval() (BatchNorm frozen) has no forward in training mode: its first counts
                self.forward_batch, self.forward_batch_training = inputs[0].shape[0], module.training

    def end_of_backward(self) -> None:
        """Backward is over (where torch.autograd.backward returns, or an autograd callback): release."""
        if not self.attached or not self.turn.holding:
            return
        self.synchronize()
        end = time.perf_counter()
        phase = self.turn.phase
        self.turn.release()
        tally = self.tally
        tally.compute_s += end - self.turn_taken_at - phase.yielded_s - self.held_outside_s
        self.held_outside_s = 0.0
        tally.wait_s += phase.yielded_s
        tally.yields += phase.yields
        tally.held += [[round(a, 6), round(b, 6)] for a, b in phase.held]
        self.link.apply(self.backwards)
        self.comm_threads.apply(self.backwards)

    def _after_backward(self) -> None:
        """The waits a backward ends with, outside the turn: timed as the iteration's communication."""
        if not self.after_backward:
            return
        with self._communication() if self.attached else contextlib.nullcontext():
            for finish in self.after_backward:
                finish()

    def _count_backward(self, loss, gradients=None) -> None:
        """A backward the script called: counted, and its loss (a scalar's value, rank 0) added to the step's."""
        if not self.attached:
            self.untracked_backwards += 1
            return
        self.backwards += 1
        self.tally.backwards += 1
        if self.in_closure_step:
            self.tally.closure_backwards += 1
        if self.tally.closure_backwards <= 1 or not self.in_closure_step:  # a closure's batch once a step (LBFGS)
            self.tally.samples += self.batch if self.forward_batch is None else self.forward_batch
        self.forward_batch, self.forward_batch_training = None, False
        # a closure evaluated several times a step (LBFGS) is one loss, its first, as the step returns it
        repeated = self.in_closure_step and self.tally.closure_backwards > 1
        value = _loss_value(loss, gradients) if self.rank == 0 and not repeated else None
        if value is not None:
            self.tally.loss = value if self.tally.loss is None else self.tally.loss + value

    def all_reduced(self, nbytes: int) -> None:
        """The engine started an all-reduce of `nbytes` of gradients."""
        self.tally.reduced_bytes += nbytes

    def after_step(self) -> None:
        """optimizer.step() is done: the iteration ends; the script ends here when its steps are made. A step
        with no backward since the last one is not an iteration: a second optimizer updating other parameters
        from the same backward (AdamW for the matrices, another for the rest) is part of the iteration the
        first one ended (its update's time counts in the next one's), and a step before any backward trains
        nothing."""
        self.in_closure_step = False
        if self.active and self.backward_depth:
            # stepped inside a backward (a post-accumulate-grad hook per parameter, "the optimizer in backward"):
            # before the backward is counted; the iteration ends where that backward returns
            self.stepped_in_backward = True
            return
        if not self.active or not self.tally.backwards:
            return
        end = time.perf_counter()
        tally, self.tally = self.tally, StepTally()
        tally.evaluating(without_gradients=False)
        if tally.reduced_bytes:
            self.bytes_per_step.append(tally.reduced_bytes)
        self.checkpoints_per_step.append(tally.checkpoints)
        if self.rank == 0:
            iteration_s = end - self.previous_end
            other_s = iteration_s - tally.compute_s - tally.communication_s - tally.wait_s
            emit(
                IterationRecord(
                    step=self.step,
                    time_s=end - self.started,
                    wall_time=time.time(),
                    iteration_s=iteration_s,
                    data_s=max(0.0, other_s),
                    compute_s=tally.compute_s,
                    communication_s=tally.communication_s,
                    wait_s=tally.wait_s,
                    samples=tally.samples * self.world_size,
                    loss=tally.loss,
                    yields=tally.yields,
                    held=tally.held or None,
                    evaluation_s=round(tally.evaluation_s, 6) or None,
                )
            )
        self.step += 1
        self.previous_end = end
        self.stop_due = self.step_cap is not None and self.step >= self.step_cap

    # -- the engine ----------------------------------------------------------------------------
    def attach(self, parameters: list[torch.Tensor], wait_for_gradients: Callable[[], None]) -> None:
        """The script built its distributed optimizer (or model): watch its parameters' gradients."""
        self.model_parameters.update(id(parameter) for parameter in parameters)
        self.is_model = weakref.WeakKeyDictionary(
            {module: True for module, verdict in self.is_model.items() if verdict}
        )  # a module found outside may hold the new model's parameters
        for parameter in parameters:
            if parameter.requires_grad and id(parameter) not in self.watched:
                self.watched.add(id(parameter))
                self.gradient_hooks.append(after_gradient(parameter, self._gradient_checkpoint))
        first = not self.attached
        self.wait_for_gradients = wait_for_gradients
        if first:
            self.link.apply()  # the process group is up: its sockets are open
            self.comm_threads.apply()  # and the engine's threads have started
        if first and self.rank == 0:
            emit(
                StartRecord(
                    job=os.environ.get(JOB_VARIABLE, "script"),
                    iterations=self.step_cap,
                    world_size=self.world_size,
                    engine=self.engine,
                    device=str(self.device),
                    parameters=sum(p.numel() for p in parameters),
                    gradient_bytes=sum(p.numel() * p.element_size() for p in parameters if p.requires_grad),
                    wall_time=time.time(),
                    **self.link.start_fields(),
                    **self.comm_threads.start_fields(),
                )
            )

    def _gradient_checkpoint(self) -> None:
        self.gradients += 1
        self.tally.checkpoints += 1
        self.turn.checkpoint()

    def _stop_at_step_cap(self) -> NoReturn:
        """Unwind the script (StepCapReached, through its own `finally`s) where the next iteration begins. Met a
        second time, the stop was caught (a bare `except:` around a batch, as scripts that skip bad batches have)
        and the script went on to its next batch, and would to its own count (a probe, 2026-12-07: a "failed,
        going on" line a batch): the rank ends where it stands."""
        if self.stop_raised and self.end_at_step_cap is not None:
            self.end_at_step_cap()
        self.stop_raised = True
        raise StepCapReached()

    def before_step(self, closure: bool | None = None, collectives: Callable[[], None] | None = None) -> None:
        """optimizer.step() (or a read of the reduced gradients before it): the all-reduces end outside
        the turn, then the update takes it. `closure`: given where the step itself begins (None where the
        gradients are read), whether it was given a closure to run forward and backward in it."""
        if not self.active:
            return
        if not self.attached:
            raise self.refuse(self.unwrapped_step())
        if self.stop_due and self.tally.backwards:
            # a step with no backward since the last is a second optimizer's on that iteration's backward: it
            # runs; a closure's step stops at the closure's forward (the next iteration's)
            self._stop_at_step_cap()
        if closure is not None:
            self.in_closure_step = closure
        assert self.wait_for_gradients is not None  # self.attached, checked above
        with self._communication():
            self.wait_for_gradients()
            if collectives is not None:  # what the step itself would all-reduce (the engine's synchronisation)
                with self.outside_turn():
                    collectives()
        self._take_turn()

    def unwrapped_step(self) -> str:
        """Why a step on an optimizer the engine's wrapper does not drive cannot run in a crossover group."""
        engine = ENGINES[self.engine]
        wrapper = engine.wrapper
        hint = f" ({engine.other_hint})" if engine.other_hint and engine.other_in_use() else ""
        return (
            f"optimizer.step() on an optimizer that {wrapper} does not drive (gradients all-reduced by hand, or "
            f"not at all): crossover takes turns around {wrapper}'s all-reduces; train through it to run it "
            f"under xover{hint}"
        )

    def refuse(self, problem: str) -> Unfollowable:
        """The refusal of `problem` in this script."""
        return Unfollowable(self.script, problem)

    def finish(self, clean: bool) -> None:
        """The script ended (`clean`: by itself or at its step cap, not by an error of its own)."""
        if self.turn.holding:
            self.synchronize()  # the last update's kernels run in this turn, not the partner's
        self.turn.release()
        self.turn.close()
        if self.attached and self.rank == 0:
            measured, checkpoints = sorted(self.bytes_per_step), sorted(self.checkpoints_per_step)
            # the planner's yield latency is compute / checkpoints (plan/model.py): a script's count
            # is known only once it has run, where a recipe's is known at start
            emit(
                EndRecord(
                    iterations=self.step,
                    wall_s=time.perf_counter() - self.started,
                    peak_memory_gb=peak_memory_gb(self.device),
                    gradient_bytes=measured[len(measured) // 2] if measured else None,
                    checkpoints=checkpoints[len(checkpoints) // 2] if checkpoints else None,
                )
            )
        if clean and not self.step:
            wrapper = ENGINES[self.engine].wrapper
            if self.backwards:
                raise self.refuse(
                    f"{self.backwards} backward passes and no optimizer.step(): xover counts an "
                    f"iteration at each optimizer step, and has none to count"
                )
            if self.untracked_backwards:
                raise self.refuse(
                    f"{self.untracked_backwards} backward passes without {wrapper} (and no "
                    f"optimizer step through it): nothing of it can take turns"
                )
            raise self.refuse(
                f"ended without a training step through {wrapper}: nothing of it can take turns "
                f"(does it train? is its engine {self.engine}?)"
            )
