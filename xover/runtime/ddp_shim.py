"""DistributedDataParallel scripts in a crossover group, without a line of them changed.

    torchrun ... -m xover.runtime.script_shim torch train.py ARGS...

DDP starts each bucket's all-reduce as soon as backward has filled it, but waits for all of them at
the end of backward, so the job would hold its turn through its communication. Before the script
runs, DDP is adapted (`install_ddp`):

  DDP(model, ...)     gradient_as_bucket_view=True: every .grad is a view of its bucket, so a bucket
                      reduced in place is the averaged gradient. A communication hook scales the
                      bucket as DDP's own reduction does (a dense one by 1 / world size, a sparse
                      gradient divided by it), starts its all-reduce without waiting, and returns a
                      future already complete on the same buffer: DDP's end of backward finds nothing
                      to wait for.
  end of backward     the turn is released (script_shim), then the reductions are waited for without
                      spinning, outside the turn, where DDP alone waits for them: the script's code
                      after backward (a norm it logs, its own clipping, an update by hand) reads
                      reduced gradients. Where the script did not ask for gradient_as_bucket_view,
                      each reduced .grad then becomes a tensor of its own, as plain DDP leaves it (a
                      .grad kept by reference across a backward is not the next one's): the bucket
                      copied into the tensor DDP found as .grad, or a new one - a copy of each
                      gradient per reducing backward, which DDP without views makes too (and its
                      memory beside the buckets). Where DDP still waits at the end of backward
                      (find_unused_parameters: the all-reduce of the used-parameter map; a static
                      graph's first iteration), the release is queued ahead of that wait - by
                      DDP's output (_DDPSink), or where the loss did not come through it (a
                      model that keeps its loss, Lightning's manual optimization) by the first
                      gradient the backward accumulates, before DDP's reducer sees it.
  optimizer.step()    torch.optim's global pre-hook - and clip_grad_*, get_total_norm and
                      GradScaler.unscale_, which read gradients before the step - take the turn (the
                      bucket rebuild DDP makes once is made before it, outside the turn). An
                      optimizer stepped inside another's step (ZeroRedundancyOptimizer's local one,
                      a wrapper's base optimizer) is the same iteration; ZeroRedundancyOptimizer's
                      broadcast of the updated shards runs outside the turn.

A job must never hold a turn while blocked in a collective: its peer ranks may be waiting for turns
that other jobs hold in the same state, on other devices (a deadlock the work-conserving policy can
reach). So the collectives DDP makes in forward are moved out of the turn: the one-time bucket
rebuild is done in the wait before the update, where DDP would do it at the next forward, and the
buffer broadcast (BatchNorm statistics, from rank 0) at that forward, before it takes the turn - not
earlier: between a step and the next forward a rank's buffers are its own, as under plain torchrun.
It is made at every forward where DDP would make it (a buffer changed through `.data` moves no version
counter: skipped where none had moved, a rank's EMA codebook drifted from rank 0's). Any other synchronous
collective met while holding the turn - DDP's first broadcast, a script's dist.all_reduce of its loss
or dist.barrier() - steps out of the turn and back in (the turn server hears a step out and a step in:
the same phase, so work-conserving turns let a waiting partner compute meanwhile, while strict round
robin keeps the turn's place and the device idles through the collective). Without stepping out, two
copies all-reducing their logged loss every step deadlocked until the server's lease broke each
(docs/measurements.md, *Figures behind the design*: *Collectives outside the turn*).

Parity: DDP's default reduction multiplies each dense gradient by 1 / world size (a double scalar,
applied in the gradient's dtype) as it copies it into its bucket, divides a sparse gradient (its own
bucket) by the world size, and all-reduces by sum; the hook makes the same operations on the same
buckets, and DDP copies the reduced bucket back into the gradients as the shim does after its wait, so
the losses are bit for bit those of DDP alone (tested with np=2, and the hook and wait against DDP's own
reduction with np=3). Where the script itself asked for gradient_as_bucket_view=True, a gradient already a
view of its bucket (kept between backwards) is divided by the world size, as DDP does, not multiplied
(`_scale_dense`); without views, a parameter no rank used in a reducing backward keeps the gradient it had,
as DDP leaves it (DDP's map of used parameters, summed over the ranks).

no_sync() is supported: a backward inside no_sync() reduces nothing and ends a compute phase like any
other (the turn is released, one `iter` record); the backward that reduces starts the all-reduces. Where
DDP would wait for them at that backward's end, the shim waits before the gradients are next written (a
backward, a zero_grad) when no step read them first (`finish_reductions`).

Frameworks that build DDP themselves (PyTorch Lightning, Hugging Face Accelerate, the transformers
Trainer) need nothing more: the constructor is adapted whoever calls it. A copy of a DDP model
(copy.deepcopy: torch.optim.swa_utils.AveragedModel, an EMA teacher) is adopted as DDP rebuilds it. Lightning's
`optimizer.step(closure)` runs forward and backward inside the step: the step's pre-hook takes the turn,
backward's end releases it, and the closure's return waits for the all-reduces before the update takes
it again. Accelerate's accumulation runs the micro-batches before its boundary under no_sync and steps
only at the boundary (its wrapper's step is not torch's until then): one iteration per real step.

Refused before the script starts (exit 2, one line, `check_ddp_script`): a Horovod script (no
DistributedDataParallel, nor a framework that builds it, in the script or the modules next to it that
it imports); its own communication hook (the hook is how the all-reduce leaves the turn); SyncBatchNorm
and FSDP (collectives inside forward and backward). Refused when met: an optimizer step (or a read of the
gradients) before any DDP model was built, naming the FSDP model built instead (behind a flag, or by a
framework) or the framework found; DDP's mixed_precision, delay_all_reduce_named_params and the compiled
python reducer (each brings its own reduction), and a model trained inside Join (its collectives: one in
every forward, and a finished rank's shadows of its peers' all-reduces outside forward and backward); Join
outside any `if` is refused before the script starts.
A Work of the script's own asynchronous collective is waited for out of the turn (`Work.wait`), and so is a
Future it takes of one (`work.get_future().wait()`), one chained after such a Future (`.then(...)`) and one
that collects them (`torch.futures.wait_all`, `torch.futures.collect_all(...).wait()`). torch's functional
collectives (`torch.distributed._functional_collectives`: all_reduce, all_gather_single(_autograd),
reduce_scatter_tensor, all_to_all_single, ...) start at once and return an AsyncCollectiveTensor: its wait - at
its first use, its `.wait()`, `wait_tensor(...)`, and in their backwards - is out of the turn too
(`_adapt_functional_collectives`). Inside a torch.compile'd region the wait is the compiled graph's, in the turn,
and a direct call of the op (`torch.ops._c10d_functional.wait_tensor`) is not followed.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import sys
import threading
import weakref
from types import FrameType
from typing import NoReturn

from ..engines import TORCH_FRAMEWORKS, under_module
from ..scripts import (
    DDP_UNSUPPORTED_NAMES,
    DDP_UNSUPPORTED_TORCH,
    FRAMEWORK_COMM_HOOKS,
    FRAMEWORK_HINTS,
    ScriptRefused,
    check_ddp_script,
    script_framework,
    script_names,
)
from .gradient_wait import wait_without_spinning
from .script_turns import ScriptCoordinator

JOIN_REFUSED = DDP_UNSUPPORTED_TORCH[("torch.distributed.algorithms", "Join")]

# DDP options that bring their own reduction
UNSUPPORTED_OPTIONS = {
    "mixed_precision": "installs its own communication hook: not supported under xover, in any mode",
    "delay_all_reduce_named_params": "reduces those parameters outside DDP's communication hook: not supported "
    "under xover, in any mode",
}

# torch.distributed calls that block until every rank has joined them
BLOCKING_COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "reduce",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "send",
    "recv",
)

GRADIENT_READERS = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_")


def _script_from_argv() -> str | None:
    # `python -m xover.runtime.script_shim torch SCRIPT ARGS`: install_ddp runs before argv is rewritten
    return sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "torch" else None


def _refuse(script: str | None, problem: str) -> NoReturn:
    print(f"xover: {script or 'the script'}: {problem}", file=sys.stderr, flush=True)
    raise SystemExit(ScriptRefused.exit_code)


def _sharded_model_kind() -> str | None:
    """The name of the FSDP wrapper a model of this process was built with (FullyShardedDataParallel, or FSDP2's
    fully_shard), None without one. Looked for only on the way to a refusal: importing FSDP in every rank to watch
    its constructor would cost each of them most of a second."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return None
    # FSDP2 makes a model's class an FSDPModule
    classes = {"FullyShardedDataParallel": "FullyShardedDataParallel", "fully_shard": "FSDPModule"}
    kinds: dict[str, type] = {
        name: kind for name, attribute in classes.items() if isinstance(kind := getattr(fsdp, attribute, None), type)
    }
    for found in gc.get_objects():
        for name, kind in kinds.items():
            if isinstance(found, kind):
                return name
    return None


# ------------------------------------------------------------------------------ inside the job


def install_ddp(script: str | None = None) -> ScriptCoordinator:
    """Check the script, then adapt DistributedDataParallel and torch.optim so that the script's DDP
    model takes crossover turns; rank, local rank and world size come from torchrun's environment."""
    script = script or _script_from_argv()
    if script is not None:
        try:
            check_ddp_script(script)
        except ScriptRefused as error:
            print(f"xover: {error}", file=sys.stderr, flush=True)
            raise SystemExit(error.exit_code) from None
    coordinator = ScriptCoordinator(
        int(os.environ.get("LOCAL_RANK", "0")),
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        "torch",
        script,
    )
    DDPCrossover(coordinator, script).install()
    return coordinator


def _framework_calling() -> str | None:
    """The framework (TORCH_FRAMEWORKS) whose code called into this one, the nearest on the stack; None where none."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        for prefix, framework in TORCH_FRAMEWORKS.items():
            if under_module(module, prefix):
                return framework
        frame = frame.f_back
    return None


def _gradients_given_back(parameters, run):
    """Run `run` (DDP's construction or bucket rebuild, which makes every .grad a view of a bucket) and give each
    parameter back the .grad it had before: the same values, which DDP copied into the view."""
    grads = [(parameter, parameter.grad) for parameter in parameters]
    try:
        return run()
    finally:
        for parameter, grad in grads:
            if grad is not None and parameter.grad is not grad:
                parameter.grad = grad


class _Reduction:
    """The communication hook's state for one DDP model."""

    def __init__(self, process_group, world_size: int, own_gradients: bool = False) -> None:
        self.process_group = process_group
        self.world_size = world_size  # DDP divides a sparse gradient by it
        self.scale = 1.0 / world_size  # DDP's own factor for a dense one: a double, applied in the gradient's dtype
        # the script left gradient_as_bucket_view off: after the all-reduces each .grad is a tensor of its own again
        self.own_gradients = own_gradients
        self.parameters: list = []  # the parameters DDP reduces (those that take a gradient)
        # each parameter's place in DDP's reducer, whose map of used parameters tells one unused on every rank
        self.variable_index: dict = {}
        # the model, weakly: its reducer holds this state (the hook's), and a reference back to the reducer kept
        # both alive to the end, with the process group and its store (a file:// rendezvous was never removed)
        self.model: weakref.ReferenceType | None = None
        # at the backward that runs now: DDP reads which parameters no rank used (find_unused_parameters, a static
        # graph's first iteration) and, without views, leaves their gradients as they were
        self.unused_kept = False
        self.reduced = False  # a backward has reduced at least once (DDP then records its bucket order)
        self.buffers_broadcast = False  # at this forward, before it took the turn: DDP's own is not needed


class DDPCrossover:
    """The adaptations of DDP, torch.optim and torch.distributed for one job's process."""

    def __init__(self, coordinator: ScriptCoordinator, script: str | None) -> None:
        self.coordinator = coordinator
        self.script = script
        # DDP models the script built (and their copies), in the order it built them: the same on every rank,
        # so settle()'s bucket rebuilds for several models come in one order everywhere (a WeakSet's order
        # follows the objects' addresses, which differ between ranks)
        self.models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.pending: list = []  # all-reduces started and not waited for yet
        # of the models whose script left gradient_as_bucket_view off: the dense buckets the pending all-reduces
        # reduce (their parameters, their buffer), and each parameter's .grad as DDP's reducer found it - after
        # the backward accumulated into it (a post-accumulate hook, which runs before the reducer's) or, for one
        # the backward left unused, at its start - which DDP without views copies the reduced bucket into
        self.reduced_buckets: list = []
        self.accumulated: dict = {}
        self.found_before_backward: dict = {}
        # the backward that runs now ends in DDP's wait for its map of used parameters, and the turn's release
        # has been queued ahead of it
        self.release_due = self.release_queued = False
        # the optimizer whose step() runs now: one that another steps inside it (ZeroRedundancyOptimizer's
        # local optimizer, a wrapper's base optimizer) is the same iteration, not one more
        self.stepping: object | None = None

    def bind(self) -> None:
        """What the hook, the waits and the release call, taken as torch has them before install() adapts any."""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.torch, self.dist = torch, dist
        self.all_reduce = dist.distributed_c10d.all_reduce
        self.queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        self._register_comm_hook = DistributedDataParallel.register_comm_hook  # DDP's own, not the refusing stand-in

    def install(self) -> None:
        """Adapt DDP, the optimizers' steps and torch.distributed's collectives for crossover; what the shim
        cannot follow (a comm hook, another process group) is refused when the script uses it."""
        import torch
        from torch.nn.parallel import distributed as ddp_module
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.bind()  # before anything below is wrapped
        ddp_class = ddp_module.DistributedDataParallel
        self._adapt_constructor(ddp_class)
        self._adapt_copies(ddp_class)
        self._adapt_forward(ddp_class)
        self._adapt_sink(ddp_module._DDPSink)
        for name in ("register_comm_hook", "_register_builtin_comm_hook"):
            setattr(ddp_class, name, self._comm_hook_refusal(DDP_UNSUPPORTED_NAMES[name]))
        self.coordinator.before_backward.append(self.finish_reductions)
        self.coordinator.before_backward.append(self._remember_gradients)
        self.coordinator.after_backward.append(self.finish_reductions)
        self.coordinator.before_turn_in_forward.append(self.broadcast_buffers_before_turn)
        self._adapt_gradient_clearing(torch)
        register_optimizer_step_pre_hook(self._before_optimizer_step)
        register_optimizer_step_post_hook(self._after_optimizer_step)
        self._adapt_gradient_readers()
        self._adapt_collectives()
        self._adapt_waits()
        self._adapt_functional_collectives()  # after _adapt_collectives: see there
        self._adapt_sharded_optimizer()
        self._refuse_other_groups()
        self._refuse_own_processes(torch.multiprocessing)

    # -- the turn ------------------------------------------------------------------------------
    def outside_turn(self):
        """Run a collective without holding the turn (`ScriptCoordinator.outside_turn`)."""
        return self.coordinator.outside_turn()

    def settle(self) -> None:
        """Before anything reads the gradients: wait for the all-reduces, then rebuild the buckets where DDP
        would at the next forward (a broadcast of their order from rank 0) - outside the turn."""
        due = [model for model in list(self.models) if self._rebuild_due(model)]
        if not self.pending and not due:
            return
        with self.outside_turn():
            self._wait_for_pending()
            for model in due:
                if self._keeping_gradients(model, model.reducer._rebuild_buckets):
                    model._has_rebuilt_buckets = True

    def broadcast_buffers_before_turn(self, module) -> None:
        """Before a forward of a DDP model takes the turn: the buffer broadcast DDP makes as that forward
        begins, made here, where no turn is held (DDP's own then finds the buffers in sync). At that
        forward, as DDP makes it: made earlier (once the all-reduces ended), a rank's buffers were rank
        0's from the step on, and a script evaluating model.module with BatchNorm there printed other
        figures than under plain torchrun."""
        model = getattr(module, "_orig_mod", module)  # torch.compile's wrapper: its model's forward is traced
        if model in self.models and self._buffers_due(model):
            self._broadcast_buffers(model)
            model._xover_reduction.buffers_broadcast = True

    def finish_reductions(self) -> None:
        """Where a backward ends (its turn released), as DDP alone waits, and before the gradients are
        written again (a backward accumulates into them, zero_grad clears them): the all-reduces still
        running on them end first, outside the turn. The hook returns at once: without the wait before a
        write, a backward with no step after it - a micro-batch under no_sync that reduces after all (a
        forward with gradients and no backward left DDP expecting one), a pass whose step the script skipped -
        left them running while the next backward added into the same buckets: a race, and losses that
        changed from run to run."""
        if self.pending and self.coordinator.active:  # a forked child's copies are the rank's, not its own
            with self.outside_turn():
                self._wait_for_pending()
        elif not self.pending:
            self._forget_gradients()  # a backward that reduced nothing (under no_sync): nothing to own again

    def _wait_for_pending(self) -> None:
        for work in self.pending:
            wait_without_spinning(work.is_completed)
            work.wait()  # raises if the all-reduce failed (a peer rank died)
        self.pending.clear()
        self._own_reduced_gradients()

    # -- gradients of their own (the script left gradient_as_bucket_view off) ----------------------
    def _own_reduced_gradients(self) -> None:
        """The all-reduces ended: where the script left gradient_as_bucket_view off, each reduced .grad (a view
        of its bucket, how the bucket is reduced in place outside the turn) becomes a tensor of its own, as DDP
        without views leaves it: the reduced bucket copied into the tensor that DDP found as .grad (the one the
        backward accumulated into, a kept reference's), or into a new one where there was none. Once a
        reduction, here, before the script can read it; DDP's reducer copies such a .grad into its bucket at the
        next backward, as it does without views. A view that stayed (a script kept its .grad by reference across
        a backward) held the next backward's gradient: a PCGrad-style script measured another dot product."""
        if self.reduced_buckets:
            used_maps: dict = {}
            with self.torch.no_grad():
                for parameters, buffer, state in self.reduced_buckets:
                    if state.unused_kept and state not in used_maps:
                        used_maps[state] = state.model().reducer._get_local_used_map().tolist()  # over the ranks
                    bucket = buffer.untyped_storage().data_ptr()
                    for parameter in parameters:
                        grad = parameter.grad
                        if grad is None or grad.untyped_storage().data_ptr() != bucket:
                            continue  # left alone by DDP (unused everywhere, no gradient) or replaced by the script
                        own = self.accumulated.get(parameter)
                        if own is None:
                            own = self.found_before_backward.get(parameter)
                        if own is None or own.untyped_storage().data_ptr() == bucket:
                            parameter.grad = grad.clone()  # the view's strides: the parameter's, as DDP lays it out
                        elif state.unused_kept and not used_maps[state][state.variable_index[parameter]]:
                            parameter.grad = own  # unused on every rank: DDP leaves it as it was, not averaged
                        else:
                            own.copy_(grad)
                            parameter.grad = own
        self._forget_gradients()

    def _forget_gradients(self) -> None:
        self.reduced_buckets.clear()
        self.accumulated.clear()
        self.found_before_backward.clear()

    def _gradient_accumulated(self, parameter) -> None:
        """A post-accumulate hook, which runs before DDP's reducer makes the bucket view the .grad - and before
        the reducer queues its finalisation, which a backward's first gradient can queue the turn's release ahead
        of (a loss that did not come through DDP's output: `_adapt_sink`)."""
        self.accumulated[parameter] = parameter.grad
        if self.release_due and not self.release_queued and self.coordinator.backward_depth == 1:
            self.release_queued = True  # once a backward, and not from inside a backward that it runs
            self.queue_callback(self.coordinator.end_of_backward)

    def _remember_gradients(self) -> None:
        """As a backward begins: the .grad of each parameter it may leave unused (find_unused_parameters, a static
        graph), which DDP without views copies the reduced bucket into where another rank used it, and leaves as
        it was where no rank did; with views, the .grad DDP divides or multiplies (`_scale_dense`)."""
        self._forget_gradients()
        self.release_due = self.release_queued = False
        for model in list(self.models):
            reduction = model._xover_reduction
            reduction.unused_kept = bool(model.find_unused_parameters or (model.static_graph and not reduction.reduced))
            # DDP waits for its map of used parameters at this backward's end (find_unused_parameters; a static
            # graph's first iteration, where it also reduces every bucket there), in the turn unless released first
            self.release_due |= reduction.unused_kept and model.require_backward_grad_sync
            if model.find_unused_parameters or model.static_graph:
                for parameter in reduction.parameters:
                    if parameter.grad is not None:
                        self.found_before_backward[parameter] = parameter.grad

    def _keeping_gradients(self, model, rebuild):
        """Run `rebuild` (DDP's one bucket rebuild, which makes every .grad a view of the new buckets) and give each
        parameter back the .grad it had, where the script left gradient_as_bucket_view off: the same values, as
        DDP copied them into the view."""
        reduction = getattr(model, "_xover_reduction", None)
        if reduction is None or not reduction.own_gradients:
            return rebuild()
        return _gradients_given_back(reduction.parameters, rebuild)

    # -- DDP ----------------------------------------------------------------------------------
    def _adapt_constructor(self, ddp_class) -> None:
        original = ddp_class.__init__
        signature = inspect.signature(original)

        @functools.wraps(original)
        def __init__(model, *args, **kwargs):  # noqa: N807 - stands in for DDP's constructor
            bound = signature.bind(model, *args, **kwargs)
            for option, problem in UNSUPPORTED_OPTIONS.items():
                if bound.arguments.get(option) is not None:
                    _refuse(self.script, f"DDP({option}=...) {problem}")
            # every .grad a view of its bucket, so that a bucket reduced in place (outside the turn) is the
            # gradient; where the script left it off, the gradients are its own again once reduced
            asked = bool(bound.arguments.get("gradient_as_bucket_view", False))
            bound.arguments["gradient_as_bucket_view"] = True
            module = bound.arguments.get("module")
            # DDP makes a gradient the model had a view of its bucket: given back where the script left views off
            parameters = [] if asked or module is None else list(module.parameters())
            with self.outside_turn():  # construction broadcasts the parameters from rank 0
                _gradients_given_back(parameters, functools.partial(original, *bound.args, **bound.kwargs))
            model._xover_views_asked = asked
            self._adopt(model)

        ddp_class.__init__ = __init__

    def _adapt_copies(self, ddp_class) -> None:
        """A copy of a DDP model (copy.deepcopy, as torch.optim.swa_utils.AveragedModel and EMA teachers make
        one; pickle) is adopted as the model it copies was: DDP's own state leaves out what the shim hung on
        the model (its hook is bound to this process's shim, which holds the gradients' accumulator nodes:
        the copy failed with "cannot pickle 'AccumulateGrad' object"), and the copy, whose reducer DDP
        builds anew, gets a hook and a reduction of its own."""
        original_getstate, original_setstate = ddp_class.__getstate__, ddp_class.__setstate__

        @functools.wraps(original_getstate)
        def __getstate__(model):  # noqa: N807 - stands in for DDP's
            state = original_getstate(model)
            if state.pop("_xover_reduction", None) is not None:
                state["_comm_hooks"] = [
                    (hook, hook_state)
                    for hook, hook_state in state.get("_comm_hooks", [])
                    if not isinstance(hook_state, _Reduction)
                ]
            return state

        @functools.wraps(original_setstate)
        def __setstate__(model, state):  # noqa: N807 - stands in for DDP's
            original_setstate(model, state)
            self._adopt(model)

        ddp_class.__getstate__, ddp_class.__setstate__ = __getstate__, __setstate__

    def _adopt(self, model) -> None:
        torch = self.torch
        if model._use_python_reducer:
            _refuse(
                self.script,
                "DDP runs the compiled python reducer (torch._dynamo optimize_ddp='python_reducer'), "
                "which reduces without DDP's communication hook: not supported under xover, in any mode",
            )
        if any(isinstance(module, torch.nn.SyncBatchNorm) for module in model.module.modules()):
            _refuse(self.script, DDP_UNSUPPORTED_NAMES["SyncBatchNorm"])
        own_gradients = not getattr(model, "_xover_views_asked", False)
        reduction = _Reduction(model.process_group, model.process_group.size(), own_gradients)
        reduction.parameters = [parameter for parameter in model.module.parameters() if parameter.requires_grad]
        reduction.variable_index = {
            parameter: index for index, parameter in enumerate(model._build_params_for_reducer()[0])
        }
        reduction.model = weakref.ref(model)
        for parameter in reduction.parameters:  # what the backward left as .grad, before DDP's reducer sees it
            parameter.register_post_accumulate_grad_hook(self._gradient_accumulated)
        model._xover_reduction = reduction
        self._register_comm_hook(model, reduction, self._start_all_reduce)  # DDP's own, not the stand-in
        self.models[model] = None
        self.coordinator.attach(list(model.module.parameters()), self.settle)

    def _start_all_reduce(self, state, bucket):  # no annotations: DDP checks them against its own types
        """DDP's communication hook: scale as DDP does, all-reduce by sum without waiting, done already."""
        buffer = bucket.buffer()
        self.coordinator.all_reduced(buffer.numel() * buffer.element_size())
        if buffer.is_sparse:
            buffer.div_(state.world_size)  # DDP's own for a sparse gradient (the bucket is the gradient itself)
        else:
            self._scale_dense(state, bucket, buffer)
            if state.own_gradients:
                self.reduced_buckets.append((bucket.parameters(), buffer, state))
        self.pending.append(self.all_reduce(buffer, group=state.process_group, async_op=True))
        state.reduced = True
        future = self.torch.futures.Future(devices=[buffer.device]) if buffer.is_cuda else self.torch.futures.Future()
        future.set_result(buffer)
        return future

    def _scale_dense(self, state, bucket, buffer) -> None:
        """DDP's own scaling of a dense bucket: it multiplies a gradient by 1 / world size as it copies it into the
        bucket, and divides one that is a view of the bucket already by the world size (a script that asked for
        gradient_as_bucket_view and kept its gradients between backwards: zero_grad(set_to_none=False), two
        backwards a step). The two part in the last bit at world sizes that are not powers of two."""
        views = [] if state.own_gradients else self._views_of(bucket, buffer)
        if not any(views):
            buffer.mul_(state.scale)
            return
        for view, gradient in zip(views, bucket.gradients(), strict=True):
            if view:
                gradient.div_(state.world_size)
            else:
                gradient.mul_(state.scale)

    def _views_of(self, bucket, buffer) -> list[bool]:
        """Of each parameter of the bucket: whether the .grad DDP's reducer found (after the backward accumulated
        into it, or from before a backward that left it unused) was a view of this bucket."""
        storage = buffer.untyped_storage().data_ptr()
        views = []
        for parameter in bucket.parameters():
            found = self.accumulated.get(parameter)
            if found is None:
                found = self.found_before_backward.get(parameter)
            views.append(found is not None and not found.is_sparse and found.untyped_storage().data_ptr() == storage)
        return views

    def _adapt_forward(self, ddp_class) -> None:
        original_pre_forward, original_sync_buffers = ddp_class._pre_forward, ddp_class._sync_buffers
        self._broadcast_buffers = original_sync_buffers  # DDP's own, for broadcast_buffers_before_turn()

        @functools.wraps(original_pre_forward)
        def _pre_forward(model, *inputs, **kwargs):
            try:
                if model in self.models:
                    if model._join_config.enable:
                        _refuse(self.script, JOIN_REFUSED)
                    if self.torch.is_grad_enabled() and self._rebuild_due(model):
                        with self.outside_turn():  # the bucket rebuild broadcasts from rank 0
                            return self._keeping_gradients(
                                model, functools.partial(original_pre_forward, model, *inputs, **kwargs)
                            )
                return original_pre_forward(model, *inputs, **kwargs)
            finally:
                reduction = getattr(model, "_xover_reduction", None)
                if reduction is not None:
                    reduction.buffers_broadcast = False  # this forward's only

        @functools.wraps(original_sync_buffers)
        def _sync_buffers(model):
            reduction = getattr(model, "_xover_reduction", None)
            if reduction is not None and reduction.buffers_broadcast and not hasattr(model, "buffer_hook"):
                return  # broadcast as this forward began, before it took the turn
            with self.outside_turn():
                original_sync_buffers(model)

        ddp_class._pre_forward, ddp_class._sync_buffers = _pre_forward, _sync_buffers

    def _adapt_sink(self, sink_class) -> None:
        """DDP puts its output through _DDPSink when it will wait at the end of backward (unused-parameter map, a
        static graph's first iteration): its backward runs first and queues the turn's release ahead of DDP's
        finalisation, so that wait happens outside the turn. A backward of a loss that did not come through DDP's
        output (a model that keeps its loss and prepares the reducer with it, as Lightning's manual optimization
        does) misses the sink: its first accumulated gradient queues the release (`_gradient_accumulated`)."""
        original_backward = sink_class.backward

        def backward(ctx, *grad_outputs):
            model = ctx.ddp_weakref()
            if model is not None and model in self.models:
                self.release_queued = True
                self.queue_callback(self.coordinator.end_of_backward)
            return original_backward(ctx, *grad_outputs)

        sink_class.backward = staticmethod(backward)

    def _rebuild_due(self, model) -> bool:
        """DDP rebuilds its buckets once, in the order the first backward produced the gradients."""
        return (
            not model._has_rebuilt_buckets
            and model._xover_reduction.reduced
            and (model.static_graph or not model.find_unused_parameters)
        )

    def _buffers_due(self, model) -> bool:
        """DDP broadcasts the buffers as this forward begins: at every forward it would, as DDP alone does. (Not
        only where their version counters moved: a change made through `.data`, as EMA codebooks and older
        running statistics are written, moves none, and a rank's buffers drifted from rank 0's.)"""
        return not hasattr(model, "buffer_hook") and not model._join_config.enable and model._check_sync_bufs_pre_fwd()

    def _refusal(self, problem: str):
        def refuse(*_args, **_kwargs):
            _refuse(self.script, problem)

        return refuse

    def _comm_hook_refusal(self, problem: str):
        """A communication hook refused: where a framework registered it, from a setting the script gave it
        (Accelerate's DistributedDataParallelKwargs, Lightning's DDPStrategy), the refusal names that setting,
        not a call the script does not make."""

        def refuse(*_args, **_kwargs):
            framework = _framework_calling()
            setting = FRAMEWORK_COMM_HOOKS.get(framework or "")
            if setting is None:
                _refuse(self.script, problem)
            _refuse(
                self.script,
                f"asks {framework} for a DDP communication hook ({setting}); crossover needs that hook to start "
                "each bucket's all-reduce without waiting: leave that setting out to run the script under xover",
            )

        return refuse

    # -- torch.optim and what reads gradients -------------------------------------------------
    def _require_ddp(self, what: str) -> None:
        """Refuse `what` (an optimizer step, a read of the gradients) when no DDP model was built: nothing
        of the script is reduced, so nothing of it can take turns; the line names the framework found."""
        if self.models:
            return
        sharded = _sharded_model_kind()
        if sharded is not None:  # built behind a flag, or by a framework (Lightning's or Accelerate's FSDP)
            _refuse(self.script, DDP_UNSUPPORTED_NAMES[sharded])
        framework = script_framework(script_names(self.script).dotted) if self.script else None
        hint = ""
        if framework is not None:
            hint = f" ({framework[0]}, found from {framework[1]}, did not build it"
            hint += f": {FRAMEWORK_HINTS[framework[0]]})" if framework[0] in FRAMEWORK_HINTS else ")"
        _refuse(
            self.script,
            f"{what} before any DistributedDataParallel model was built{hint}: the script does not "
            f"train through DDP, which --engine torch crosses over",
        )

    def _before_optimizer_step(self, optimizer, args, kwargs):
        if self.stepping is not None and self.stepping is not optimizer:
            return None  # inside another optimizer's step: its turn and its iteration
        self._require_ddp("optimizer.step()")
        if not self._steps_a_model(optimizer):
            return None  # an optimizer of none of the DDP models' parameters (a probe fitted beside): no iteration
        self.stepping = optimizer  # (the same one again: its last step raised, and this is a new one)
        # the hook's `args` begin with the optimizer itself: a closure given by position is the second
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        self.coordinator.before_step(closure=callable(closure))
        if not callable(closure):
            return None

        def closure_then_settle():  # LBFGS and friends read the gradients inside step()
            loss = closure()
            self.coordinator.before_step()
            return loss

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_settle}
        return (args[0], closure_then_settle, *args[2:]), kwargs

    def _steps_a_model(self, optimizer) -> bool:
        """Whether the optimizer updates a parameter of a DDP model (its own, or one a sharded optimizer wraps)."""
        model_parameters = self.coordinator.model_parameters
        return any(
            id(parameter) in model_parameters for group in optimizer.param_groups for parameter in group["params"]
        )

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        if optimizer is self.stepping:
            self.stepping = None
            self.coordinator.after_step()

    def _adapt_sharded_optimizer(self) -> None:
        """ZeroRedundancyOptimizer's step updates this rank's shard, then broadcasts every rank's (started
        together, then waited for): the update is compute, in the turn; the broadcasts are outside it.
        Waited for in the turn, a rank held its device while its peer waited for a turn the other job held,
        until the lease broke it (30 s). Imported here, in every rank, though few scripts use it: imported only
        after the script's init_process_group, what it imports kept a `file://` rendezvous's store alive through
        the rank's exit without teardown, and its file stayed (docs/measurements.md, *A tenth round of probes*)."""
        try:
            from torch.distributed.optim import ZeroRedundancyOptimizer
        except ImportError:
            return
        sync = getattr(ZeroRedundancyOptimizer, "_sync_params", None)
        if sync is None or hasattr(sync, "_xover_outside_turn"):
            return

        @functools.wraps(sync)
        def sync_outside_turn(*args, **kwargs):
            with self.outside_turn():
                return sync(*args, **kwargs)

        setattr(sync_outside_turn, "_xover_outside_turn", True)  # noqa: B010 - marks it adapted already
        setattr(ZeroRedundancyOptimizer, "_sync_params", sync_outside_turn)  # noqa: B010 - a private method

    def _adapt_gradient_readers(self) -> None:
        import torch.nn.utils
        from torch.amp.grad_scaler import GradScaler
        from torch.nn.utils import clip_grad

        for module in (clip_grad, torch.nn.utils):
            for name in GRADIENT_READERS:
                original = getattr(module, name, None)
                if original is not None and not hasattr(original, "_xover_settles"):
                    setattr(module, name, self._settling(original))
        # patched on purpose, as the readers above (mypy's method-assign)
        GradScaler.unscale_ = self._settling(GradScaler.unscale_)  # type: ignore[method-assign]

    def _adapt_gradient_clearing(self, torch) -> None:
        """zero_grad (an optimizer's, a module's) clears the gradients in place or drops them: after the
        all-reduces still running on them, as under DDP alone."""
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            original = owner.zero_grad

            def zero_grad(*args, _original=original, **kwargs):
                self.finish_reductions()
                return _original(*args, **kwargs)

            functools.update_wrapper(zero_grad, original)
            owner.zero_grad = zero_grad

    def _settling(self, reader):
        @functools.wraps(reader)
        def read_reduced_gradients(*args, **kwargs):
            self._require_ddp(f"{reader.__name__}()")
            self.coordinator.before_step()  # the gradients are final, and this is compute: in the turn
            return reader(*args, **kwargs)

        setattr(read_reduced_gradients, "_xover_settles", True)  # noqa: B010 - marks it adapted already
        return read_reduced_gradients

    # -- torch.distributed --------------------------------------------------------------------
    def _adapt_collectives(self) -> None:
        dist, c10d = self.dist, self.dist.distributed_c10d
        for name in BLOCKING_COLLECTIVES:
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapped = self._outside_turn_when_blocking(original)
            setattr(c10d, name, wrapped)  # calls inside torch.distributed (the *_object ones) too
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapped)

    def _adapt_waits(self) -> None:
        """An asynchronous collective's wait (`dist.all_reduce(t, async_op=True).wait()`) is where its time goes: out
        of the turn, as a blocking collective's. Waited in the turn, a rank held its device while its peer waited for
        the turn on another, which the partner held waiting the same way: both waited until the turn was taken
        back (30 s, a probe of 2026-12-06). A Work already completed is waited for in the turn: nothing to wait;
        another thread's too. So is the Future a script takes of one (`work.get_future().wait()`, which waited in
        the turn before); other futures (RPC's, the shim's own hook's) are not a collective's."""
        work_class = getattr(self.dist, "Work", None)
        original = getattr(work_class, "wait", None)
        if original is None or hasattr(original, "_xover_outside_turn"):
            return

        @functools.wraps(original)
        def wait(work, *args, **kwargs):
            # another thread's wait (a checkpoint written in the background) is not the turn's: the main thread
            # may be computing in it
            if work.is_completed() or threading.current_thread() is not threading.main_thread():
                return original(work, *args, **kwargs)
            with self.outside_turn():  # held or not: timed as communication
                return original(work, *args, **kwargs)

        setattr(wait, "_xover_outside_turn", True)  # noqa: B010 - marks it adapted already
        setattr(work_class, "wait", wait)  # noqa: B010 - a class of torch's C++ bindings
        self._adapt_futures_of_works(work_class)

    def _adapt_futures_of_works(self, work_class) -> None:
        """`Work.get_future()`'s Future, waited for (`wait`; torch.futures.Future's calls it), out of the turn
        as the Work's own wait. Futures are known as a Work's by identity (weakly held: a script that takes one a
        step drops the earlier ones); the class's wait is wrapped, as no attribute can be set on its instances.
        A Future made from one is known the same way, so its wait is that one wait too: chained after it
        (`.then`, its callback run as torch runs it) or collecting it with others (`torch._C._collect_all`, what
        torch.futures.collect_all and wait_all call; wait_all then waits for each, done by then: in the turn).
        Their waits held the turn through the collective before (2026-12-07). `value()` needs nothing: it never
        waits (torch refuses it on a Future not yet completed)."""
        get_future = getattr(work_class, "get_future", None)
        future_class = getattr(self.torch, "Future", None)  # torch._C.Future, what get_future returns
        original_wait = getattr(future_class, "wait", None)
        if get_future is None or original_wait is None:
            return
        futures_of_works: weakref.WeakSet = weakref.WeakSet()

        def of_works(made, sources):
            """`made`, known as a Work's where one of `sources` is: the same Future, untouched."""
            if any(source in futures_of_works for source in sources):
                futures_of_works.add(made)
            return made

        @functools.wraps(get_future)
        def get_future_of_work(work, *args, **kwargs):
            future = get_future(work, *args, **kwargs)
            futures_of_works.add(future)
            return future

        original_then = getattr(future_class, "then", None)
        if original_then is not None:

            @functools.wraps(original_then)
            def then(future, *args, **kwargs):
                return of_works(original_then(future, *args, **kwargs), [future])

            setattr(future_class, "then", then)  # noqa: B010 - a class of torch's C++ bindings
        collect_all = getattr(self.torch._C, "_collect_all", None)
        if collect_all is not None:

            @functools.wraps(collect_all)
            def collect_all_of_works(futures, *args, **kwargs):
                collected = collect_all(futures, *args, **kwargs)
                # a list (what torch's own callers pass): anything else may be an iterator, which it consumed
                return of_works(collected, futures if isinstance(futures, (list, tuple)) else [])

            setattr(self.torch._C, "_collect_all", collect_all_of_works)  # noqa: B010 - torch's C++ bindings

        @functools.wraps(original_wait)
        def wait(future, *args, **kwargs):
            if (
                future.done()
                or future not in futures_of_works
                or threading.current_thread() is not threading.main_thread()
            ):
                return original_wait(future, *args, **kwargs)
            with self.outside_turn():
                return original_wait(future, *args, **kwargs)

        setattr(work_class, "get_future", get_future_of_work)  # noqa: B010 - a class of torch's C++ bindings
        setattr(future_class, "wait", wait)  # noqa: B010 - a class of torch's C++ bindings

    def _adapt_functional_collectives(self) -> None:
        """torch's functional collectives (torch.distributed._functional_collectives: all_reduce,
        all_gather_tensor(_autograd), reduce_scatter_tensor, all_to_all_single, ...) start at once and return an
        AsyncCollectiveTensor, waited for at its first use (an operation on it, `.tolist()`, `.numpy()`), by its
        `.wait()` or by `wait_tensor(...)`; their autograd backwards wait the same way. Every one of those waits is
        the module's `wait_tensor`, called by name: that one is waited for out of the turn, as a Work's wait, and
        timed as communication. Waited in the turn, two such jobs in crossover held each other's devices until
        the lease took the turns back (30 s), and a late peer's wait read as compute (a probe, 2026-12-07).
        Nothing in flight (a tensor waited for already: its views, a second `.wait()`): waited in the turn. While
        traced (torch.compile), the wait is the graph's: left to torch. Another thread's, not the autograd
        engine's (CUDA runs backward there, while the main thread waits for it), is not the turn's.
        Imported here, after the collectives are wrapped: the module keeps `torch.distributed`'s collectives as
        it finds them (its map of those torch.compile rewrites into functional ones), as when the script
        imports it."""
        try:
            import torch.distributed._functional_collectives as funcol
        except ImportError:
            return
        original = getattr(funcol, "wait_tensor", None)
        c10d_bindings = getattr(self.torch._C, "_distributed_c10d", None)
        in_flight = getattr(c10d_bindings, "_get_work_registry_size", None)
        tracing = getattr(funcol, "_are_we_tracing", None)
        if original is None or in_flight is None or tracing is None or hasattr(original, "_xover_outside_turn"):
            return
        graph_task = getattr(self.torch._C, "_current_graph_task_id", lambda: -1)

        @functools.wraps(original)
        def wait_tensor(*args, **kwargs):
            if tracing() or not in_flight():
                return original(*args, **kwargs)
            if threading.current_thread() is not threading.main_thread() and graph_task() == -1:
                return original(*args, **kwargs)
            with self.outside_turn():  # held or not: timed as communication
                return original(*args, **kwargs)

        setattr(wait_tensor, "_xover_outside_turn", True)  # noqa: B010 - marks it adapted already
        funcol.wait_tensor = wait_tensor

    def _refuse_other_groups(self) -> None:
        """A second process group's collectives are not followed: refused when made, with why."""
        problem = (
            "creates a second process group (torch.distributed.{}): crossover follows the default group's "
            "collectives and DDP's only"
        )
        for name in ("new_group", "new_subgroups", "new_subgroups_by_enumeration"):
            if getattr(self.dist, name, None) is not None:
                setattr(self.dist, name, self._refusal(problem.format(name)))

    def _refuse_own_processes(self, multiprocessing) -> None:
        """A rank that starts training processes of its own (the tutorial's `mp.spawn(train, nprocs=...)`,
        its own MASTER_PORT) before any process group: under torchrun every rank already is one, and the
        spawned worlds would wait for each other's ranks on one port forever. Spawning after the rank joined
        its group (a helper process) goes on."""
        for name in ("spawn", "start_processes"):
            original = getattr(multiprocessing, name, None)
            if original is None:
                continue

            def guarded(*args, _original=original, _name=name, **kwargs):
                if not self.dist.is_initialized():
                    _refuse(
                        self.script,
                        f"starts its own training processes (torch.multiprocessing.{_name}) where torchrun has "
                        f"started them: each of the job's ranks is one already; call the function it spawns "
                        f"once in each rank instead (its rank from RANK, LOCAL_RANK and WORLD_SIZE)",
                    )
                return _original(*args, **kwargs)

            setattr(multiprocessing, name, functools.wraps(original)(guarded))

    def _outside_turn_when_blocking(self, collective):
        signature = inspect.signature(collective)
        takes_async = "async_op" in signature.parameters

        def asynchronous(args, kwargs) -> bool:
            try:
                return takes_async and bool(signature.bind_partial(*args, **kwargs).arguments.get("async_op"))
            except TypeError:
                return True  # wrong arguments: the collective itself says what is wrong

        @functools.wraps(collective)
        def call(*args, **kwargs):
            if asynchronous(args, kwargs):  # returns at once; its wait() is where the time goes
                return collective(*args, **kwargs)
            with self.outside_turn():  # held or not: timed as communication
                return collective(*args, **kwargs)

        return call
