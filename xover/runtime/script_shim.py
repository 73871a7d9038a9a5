"""Crossover for unmodified training scripts: Horovod scripts under horovodrun, DDP scripts under torchrun.

    python -m xover.runtime.script_shim horovod train.py ARGS...
    python -m xover.runtime.script_shim torch train.py ARGS...

Before the script runs, the engine's optimizer wrapper (`hvd.DistributedOptimizer`, or
`DistributedDataParallel`, see ddp_shim.py) is adapted so that, without any edit to the script, the
job holds its device's turn from the update (and the next forward) to the end of backward, and waits
for its all-reduces outside the turn:

    optimizer.step():   wait for the all-reduces (no spinning) -> take the turn -> update
    the model's forward: take the turn if not held (the first iteration, an evaluation)
    its modules/grads:  a checkpoint: yield to a job the policy ranks first, take the turn back
    end of backward():  (GPU: wait for the compute stream) -> release the turn
    a blocking collective of the script's own (hvd.allreduce of a logged loss, dist.barrier(), ...):
                        outside the turn, taken back after

The end of backward is where `torch.autograd.backward` returns, so frozen or unused parameters
change nothing. The model is what the engine wraps (its parameters, and every module inside one that
holds one): a transform or loss module the script calls elsewhere is not followed, and nothing is in a
process forked from the rank (a DataLoader worker; script_turns.py).

Metrics come from this timing (the script prints what it likes): an iteration is an optimizer step,
one `iter` record each, with the time the turns were held (every backward of the step: gradient
accumulation counts whole), the wait for the all-reduces, the turn waits, and the loss the step's
backward calls saw (summed over them; rank 0's). The bytes the engine all-reduced per step are counted
where it starts each all-reduce (a Horovod optimizer's, DDP's hook), so accumulation,
`backward_passes_per_step`, frozen and unused parameters count as they are sent.

XOVER_SCRIPT_STEPS=N (a job file's `iterations`) ends the script after N optimizer steps, on every
rank at the same point, as a clean exit: where the next iteration begins (its first forward with gradients,
the model in training mode, or an optimizer step), so the last step's own work after `optimizer.step()` (an
LR schedule, a log line, a checkpoint, an evaluation rank 0 makes alone) is done. What the shim cannot
follow ends the job with exit 2 and one line naming it, never a silent run without turns: no optimizer step,
training without the engine's wrapper (gradients all-reduced by hand), a second process group, the other
engine's calls.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import io
import os
import runpy
import sys
import types
import warnings
import weakref
from collections.abc import Callable
from typing import NoReturn

from ..records import rank_left_line
from ..scripts import HOROVOD_UNSUPPORTED_NAMES
from ..settings import JOB_DIR_PLACEHOLDER, JOB_DIR_VARIABLE
from .ddp_shim import install_ddp
from .gradient_wait import meet_without_spinning, wait_without_spinning
from .script_turns import ScriptCoordinator, StepCapReached, Unfollowable
from .worker import exit_without_teardown


def install_horovod(script: str | None = None) -> ScriptCoordinator:
    """Wrap hvd.DistributedOptimizer: its step waits for the all-reduces outside the turn."""
    import horovod.torch as hvd
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    # horovodrun tells each rank who it is; the script calls hvd.init() itself
    coordinator = ScriptCoordinator(
        int(os.environ.get("HOROVOD_LOCAL_RANK", "0")),
        int(os.environ.get("HOROVOD_RANK", "0")),
        int(os.environ.get("HOROVOD_SIZE", "1")),
        "horovod",
        script,
    )
    wrapped = hvd.DistributedOptimizer
    # every DistributedOptimizer the script made (two on disjoint parameters step on one backward): a step
    # waits for all of their all-reduces, outside the turn, not only the last-made one's (weakly held: a
    # script that makes one an epoch drops the earlier ones)
    distributed_optimizers: weakref.WeakSet = weakref.WeakSet()

    def wait_for_gradients() -> None:
        for distributed in distributed_optimizers:
            for handle, _ in list(distributed._handles.values()):
                if handle is not None and not callable(handle):
                    wait_without_spinning(functools.partial(hvd.poll, handle))

    def DistributedOptimizer(optimizer, *args, **kwargs):  # noqa: N802 - stands in for Horovod's factory
        if inspect.signature(wrapped).bind(optimizer, *args, **kwargs).arguments.get("op") is hvd.Adasum:
            raise coordinator.refuse(
                "hvd.DistributedOptimizer(op=hvd.Adasum) all-reduces the update inside the optimizer's step, "
                "which crossover cannot take turns around: not supported under xover, in any mode"
            )
        distributed = wrapped(optimizer, *args, **kwargs)
        distributed_optimizers.add(distributed)
        _count_all_reduces(coordinator, distributed)
        coordinator.attach(_parameters_to_update(distributed), wait_for_gradients)
        original_step = distributed.step
        original_synchronize = distributed.synchronize

        def synchronize(self):
            # the script's own (Horovod's way to clip: synchronize, clip, then step under skip_synchronize): what
            # it waits for is the iteration's communication, outside the turn, and the clipping after it compute,
            # in the turn, as a DDP script's gradient readers (before, the wait was counted as the job's data
            # time, and a plan saw a job that does not communicate)
            if not coordinator.active:
                return original_synchronize()
            coordinator.before_step(collectives=original_synchronize)
            return None

        def step(self, closure=None):
            # Horovod's step synchronises first: it all-reduces zeros for each parameter that got no gradient
            # this step (a head used on some steps only), and the gradients of a step taken before the last
            # of backward_passes_per_step, then waits; collectives, made here outside the turn (in it, the job
            # held its device blocked on peers until the lease took the turn back), the step then skipping them
            synchronizes = closure is None and getattr(self, "_should_synchronize", False)
            coordinator.before_step(
                closure=callable(closure), collectives=original_synchronize if synchronizes else None
            )
            with self.skip_synchronize() if synchronizes else contextlib.nullcontext():
                result = original_step(closure)
            coordinator.after_step()
            return result

        # a method of this optimizer, as its own step is: an LR scheduler made on it afterwards wraps its step
        # through __func__ and __self__
        distributed.step = types.MethodType(step, distributed)
        distributed.synchronize = types.MethodType(synchronize, distributed)
        return distributed

    hvd.DistributedOptimizer = DistributedOptimizer
    _gradients_of_collectives_outside_turn(coordinator)
    broadcast_parameters = hvd.broadcast_parameters

    @functools.wraps(broadcast_parameters)
    def meet_then_broadcast_parameters(*args, **kwargs):  # where a script's ranks first wait for each other
        meet_without_spinning(hvd)
        return broadcast_parameters(*args, **kwargs)

    hvd.broadcast_parameters = meet_then_broadcast_parameters
    for name in HOROVOD_BLOCKING_COLLECTIVES:  # a script's own, e.g. an all-reduce of its logged loss
        original = getattr(hvd, name, None)
        if original is not None:
            setattr(hvd, name, _outside_turn(coordinator, original))

    initialising = []  # inside hvd.broadcast_optimizer_state, which steps a plain optimizer once to make its state
    broadcast_state = hvd.broadcast_optimizer_state

    @functools.wraps(broadcast_state)
    def broadcast_optimizer_state(*args, **kwargs):
        initialising.append(True)
        try:
            return broadcast_state(*args, **kwargs)
        finally:
            initialising.pop()

    hvd.broadcast_optimizer_state = broadcast_optimizer_state
    _elastic_state_collectives_outside_turn(hvd)
    _stop_peers_waiting_in_join(coordinator, hvd)

    def before_any_step(optimizer, args, kwargs):  # the inner step of a DistributedOptimizer passes
        if coordinator.active and not coordinator.attached and not initialising:
            raise coordinator.refuse(coordinator.unwrapped_step())

    register_optimizer_step_pre_hook(before_any_step)
    _refuse_other_process_groups(coordinator, hvd)
    _refuse_sync_batch_norm(coordinator, hvd)
    return coordinator


def _elastic_state_collectives_outside_turn(hvd) -> None:
    """Horovod's elastic state (TorchState: `commit`, `check_host_updates`, its sync) broadcasts through the
    functions horovod.torch.elastic.state imported before the shim wrapped them: called after a step, as a script
    commits, they ran holding the turn, blocked on the peer ranks, and two copies in crossover waited on each
    other's turns (a run hung 10 minutes, 2026-12-05). It now calls the shim's, outside the turn."""
    from horovod.torch.elastic import state

    for name in ("allgather_object", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters"):
        if hasattr(state, name):
            setattr(state, name, getattr(hvd, name))


def _stop_peers_waiting_in_join(coordinator: ScriptCoordinator, hvd) -> None:
    """With a step cap, a rank that made its steps leaves through hvd.join(), and every return from the script's
    own hvd.join() asks whether a rank is leaving so: the peers that joined after fewer steps of uneven data
    then stop there too. Before, the rank ended at the cap while they waited for it to join, and they failed
    with "Horovod has been shut down". Without a cap nothing is added to the script's collectives."""
    import torch

    if coordinator.step_cap is None:
        return
    join = hvd.join  # outside the turn already (HOROVOD_BLOCKING_COLLECTIVES)
    allreduce = hvd.allreduce

    def any_rank_leaving(leaving: bool) -> bool:
        flags = allreduce(torch.tensor(int(leaving)), op=hvd.Max, name="xover.leaving_at_step_cap")
        return bool(flags.item())

    stopped_in_join = []  # this rank stopped with a leaving peer: it has joined, and leaves without a word more

    @functools.wraps(join)
    def join_or_stop(*args, **kwargs):
        last = join(*args, **kwargs)
        if coordinator.active and any_rank_leaving(False):
            stopped_in_join.append(True)
            raise StepCapReached()
        return last

    def leave() -> None:
        if stopped_in_join:
            return
        with coordinator.outside_turn():
            join()
            any_rank_leaving(True)

    hvd.join = join_or_stop
    coordinator.leave_at_step_cap = leave


def _refuse_sync_batch_norm(coordinator: ScriptCoordinator, hvd) -> None:
    """hvd.SyncBatchNorm, built where reading the script could not tell it would be (behind an `if`, in a
    function of an imported module), is refused when built: its collectives inside forward and backward block
    in Horovod's own `synchronize` while the job holds its turn (torch's SyncBatchNorm under DDP is refused
    the same way)."""

    def refuse(*_args, **_kwargs):
        raise coordinator.refuse(HOROVOD_UNSUPPORTED_NAMES["SyncBatchNorm"])

    hvd.SyncBatchNorm.__init__ = refuse


def _gradients_of_collectives_outside_turn(coordinator: ScriptCoordinator) -> None:
    """A collective a script differentiates through (`hvd.allreduce` in its loss: a mean over every rank's
    batch) runs its gradient's collective in backward, where the job holds the turn: outside it (before, the
    job held its device blocked on its peers until the lease took the turn back)."""
    import torch
    from horovod.torch import mpi_ops

    for name in dir(mpi_ops):
        function = getattr(mpi_ops, name)
        if name.startswith("Horovod") and isinstance(function, type) and issubclass(function, torch.autograd.Function):
            backward = function.backward
            if not getattr(backward, "_xover_outside_turn", False):
                outside = _outside_turn(coordinator, backward)
                setattr(outside, "_xover_outside_turn", True)  # noqa: B010 - marks it adapted already
                function.backward = staticmethod(outside)  # type: ignore[method-assign]


def _parameters_to_update(distributed) -> list:
    """The parameters whose gradients a Horovod optimizer all-reduces: those of its groups that require a
    gradient. Horovod lists them itself (`_requires_update`) only where it hooks their gradients, with more than
    one rank (or elastic); with one it lists none, and the shim, told of no parameter, found neither the model
    (no turn in its forward, no batch: 0 samples) nor its size. Read from the groups, they are the same at any
    size."""
    return [parameter for group in distributed.param_groups for parameter in group["params"] if parameter.requires_grad]


def _count_all_reduces(coordinator: ScriptCoordinator, distributed) -> None:
    """Count the gradient bytes a Horovod optimizer sends, where it starts each all-reduce: each gradient as its
    compression hands it over (`hvd.Compression.fp16` sends a float32 gradient in half its bytes; counted as the
    gradient, the planner saw twice the traffic), a zero gradient Horovod sends for a parameter that got none too,
    and a sparse gradient allgathered as such (not `sparse_as_dense`) as its values and indices."""
    distributed._compression = _CountedCompression(distributed._compression, coordinator.all_reduced)
    sparse = distributed._sparse_allreduce_grad_async

    def sparse_allreduce_grad_async(p, name):
        values, indices = p.grad._values(), p.grad._indices()
        coordinator.all_reduced(values.numel() * values.element_size() + indices.numel() * indices.element_size())
        return sparse(p, name)

    distributed._sparse_allreduce_grad_async = sparse_allreduce_grad_async


class _CountedCompression:
    """A DistributedOptimizer's compression, counting the bytes of each tensor it hands to an all-reduce."""

    def __init__(self, compression, count: Callable[[int], None]) -> None:
        self.compression, self.count = compression, count

    def compress(self, tensor):
        compressed, context = self.compression.compress(tensor)
        self.count(compressed.numel() * compressed.element_size())
        return compressed, context

    def decompress(self, tensor, context):
        return self.compression.decompress(tensor, context)


def _refuse_other_process_groups(coordinator: ScriptCoordinator, hvd) -> None:
    """Under horovodrun: torch.distributed (a DDP script named horovod) is refused when called, with what to do.
    Horovod's process sets are not: a collective of the script's own on one runs outside the turn as any other,
    and a DistributedOptimizer reducing over one is waited for as over the global set (the same losses as alone,
    in every mode, 2026-12-05)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def refusal(what: str):
        def refuse(*_args, **_kwargs):
            raise coordinator.refuse(what)

        return refuse

    torch_script = (
        "uses torch.distributed ({}) but runs under engine horovod (horovodrun): a DistributedDataParallel "
        "script runs with engine torch (torchrun)"
    )
    dist.init_process_group = refusal(torch_script.format("init_process_group"))
    # patched on purpose (mypy's method-assign): the script must not build one
    DistributedDataParallel.__init__ = refusal(torch_script.format("DistributedDataParallel"))  # type: ignore[method-assign]


# horovod.torch's calls that block until every rank has joined; the *_async ones return at once (and
# `synchronize` on their handle blocks). DistributedOptimizer's own waits are not these: it imports them.
HOROVOD_BLOCKING_COLLECTIVES = (
    "allreduce",
    "allreduce_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "allgather",
    "grouped_allgather",
    "broadcast",
    "broadcast_",
    "alltoall",
    "reducescatter",
    "grouped_reducescatter",
    "barrier",
    "join",
    "synchronize",
    "broadcast_object",
    "allgather_object",
    "broadcast_parameters",
    "broadcast_optimizer_state",
)


def _outside_turn(coordinator: ScriptCoordinator, collective: Callable) -> Callable:
    @functools.wraps(collective)
    def call(*args, **kwargs):
        with coordinator.outside_turn():  # held or not: timed as communication
            return collective(*args, **kwargs)

    return call


# the shim of each engine's worker side, by `Engine.runtime_name` (xover/engines.py)
SHIMS: dict[str, Callable[[str | None], ScriptCoordinator]] = {"horovod": install_horovod, "torch": install_ddp}


def with_job_dir(args: list[str], job_dir: str | None) -> list[str]:
    """The script's arguments with `{job_dir}` replaced by this run's own folder (made here: on other hosts
    too), so that an output or checkpoint folder given as an argument is never another run's."""
    if not job_dir:
        return args
    os.makedirs(job_dir, exist_ok=True)
    return [arg.replace(JOB_DIR_PLACEHOLDER, job_dir) for arg in args]


def _standard_error() -> int | None:
    """A descriptor of this process's standard error as the launcher gave it (None: fd 2 closed)."""
    try:
        return os.dup(2)
    except OSError:
        return None


# taken before the script runs, as metrics.STANDARD_OUTPUT: the rank's log gets the line whatever the script
# did to sys.stderr or fd 2
STANDARD_ERROR = _standard_error()


def _say_on_standard_error(line: str) -> None:
    if STANDARD_ERROR is None:
        return
    with contextlib.suppress(OSError):
        data = memoryview((line + "\n").encode())
        while data:
            data = data[os.write(STANDARD_ERROR, data) :]


def main() -> None:
    """The shim's entry point: adapt the engine, run the user's script as __main__, and tell the coordinator
    whether it ended cleanly."""
    if len(sys.argv) < 3 or sys.argv[1] not in SHIMS:
        sys.exit(f"usage: python -m xover.runtime.script_shim {'|'.join(SHIMS)} SCRIPT [ARGS...]")
    runtime, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    args = with_job_dir(args, os.environ.get(JOB_DIR_VARIABLE))
    coordinator = SHIMS[runtime](script)
    sys.argv = [script, *args]
    # `python -m` put the working folder first on sys.path, where `python SCRIPT` (what torchrun and horovodrun run)
    # puts the script's folder: a module of the working folder's (xover's checkout's bench/ where xover runs from
    # there) must not stand in for one of the user's. Under -P (PYTHONSAFEPATH) neither is put there.
    if not getattr(sys.flags, "safe_path", False):  # Python 3.11 on
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    coordinator.end_at_step_cap = functools.partial(_end_where_the_stop_was_caught, coordinator)
    clean = by_itself = False
    try:
        runpy.run_path(script, run_name="__main__")
        clean = by_itself = True
    except Unfollowable:
        raise
    except StepCapReached:
        clean = True
        if coordinator.leave_at_step_cap is not None:
            coordinator.leave_at_step_cap()
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
        clean = by_itself = True
    finally:
        # the script's module is garbage now (runpy's, not sys.modules'), and so in cycles with its functions are
        # the files it left open: a collection would close them in no order, a raw file before its buffer's data
        gc.disable()
        coordinator.finish(clean)
    if by_itself:  # not at the step cap, where every rank stops at once: its peers may still expect it
        _say_on_standard_error(rank_left_line(coordinator.rank, coordinator.step))
    exit_without_teardown(finalize=finalize_what_the_script_left, at_the_cap=not by_itself)


def _end_where_the_stop_was_caught(coordinator: ScriptCoordinator) -> NoReturn:
    """The rank's end at its job's length where the script caught the stop and went on to its next batch: as
    main()'s after a stop that unwound the script, from inside the script's frames."""
    _say_on_standard_error(
        "xover: the script caught the stop at its job's length (a bare `except:` or `except BaseException:` "
        "around its step?) and went on: the rank ends at the next batch instead"
    )
    if coordinator.leave_at_step_cap is not None:
        coordinator.leave_at_step_cap()
    gc.disable()  # as main()'s end: finalize_what_the_script_left collects in the order Python's exit does
    coordinator.finish(True)
    exit_without_teardown(finalize=finalize_what_the_script_left, at_the_cap=True)


def finalize_what_the_script_left() -> None:
    """What Python's own exit does for a script after its atexit handlers, and the rank's exit without teardown
    skips, in its order. The garbage is collected first, with the process group alive and the files the script
    left open still open: a finalizer in a reference cycle writes its summary to its log, or meets its peers at a
    barrier (a probe, 2026-12-07: both failed where the files were closed and the group destroyed first). Those
    files are held here through the collection, which would otherwise finalize them among the garbage in no
    order, a raw file before its buffer or the finalizer that writes to it; and their buffers are written out
    before it. Then the default process group is destroyed (torch's FileStore then removes a `file://`
    rendezvous's file, as under plain torchrun; left, it was the next run's stale rendezvous), each file still
    open is closed, its buffer written out (a log it never closed was empty under xover), a wrapper before what
    it wraps (a GzipFile's trailer before its file), and the garbage collected again: a model in a cycle held
    the process group, and its store. Files are found among the collector's objects, collected or not (main()
    stopped the collector)."""
    held = _files_left_open()
    for file in _wrappers_first(held):
        with contextlib.suppress(Exception):
            file.flush()
    gc.collect()
    distributed = sys.modules.get("torch.distributed")
    with contextlib.suppress(Exception):
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            distributed.destroy_process_group()
    for file in _wrappers_first(_files_left_open()):
        with contextlib.suppress(Exception):
            file.close()
    del held
    gc.collect()


def _files_left_open() -> list:
    """The files the script left open (not xover's standard streams), found among the collector's objects."""
    left_open = []
    for file in _files_among(gc.get_objects()):
        with contextlib.suppress(Exception):
            if not file.closed and not _on_a_standard_descriptor(file):  # sys.stdout and its kin among them
                left_open.append(file)
    return left_open


def _files_among(things: list) -> list:
    """The files (io.IOBase) among `things`, by their type, asked once a type: millions of objects in a rank
    with a dataset in memory, and no object's `__class__` read (a proxy's, a lazy module's)."""
    is_file: dict[type, bool] = {}
    files = []
    with warnings.catch_warnings():  # a class whose check warns (torch.distributed.reduce_op's)
        warnings.simplefilter("ignore")
        for thing in things:
            kind = type(thing)
            found = is_file.get(kind)
            if found is None:
                try:
                    found = issubclass(kind, io.IOBase)
                except Exception:
                    found = False
                is_file[kind] = found
            if found:
                files.append(thing)
    return files


def _on_a_standard_descriptor(file) -> bool:
    """Whether `file` is on descriptor 0, 1 or 2 (sys.stdout, its buffer, `open(1, "w")`): xover's to flush, not
    to close."""
    try:
        return file.fileno() in (0, 1, 2)
    except Exception:  # in memory (BytesIO), or closed
        return False


def _wrappers_first(files: list) -> list:
    """`files` ordered so that each comes before the files it wraps (its buffer, its raw file, a GzipFile's own)."""
    by_id = {id(file): file for file in files}
    wrapped_by: dict[int, set[int]] = {key: set() for key in by_id}
    for file in files:
        for referent in gc.get_referents(file):
            for inner in referent.values() if isinstance(referent, dict) else (referent,):
                if id(inner) in by_id and inner is not file:
                    wrapped_by[id(inner)].add(id(file))
    depth: dict[int, int] = {}

    def depth_of(key: int, seen: frozenset = frozenset()) -> int:
        if key not in depth:
            outer = wrapped_by[key] - seen
            depth[key] = 1 + max((depth_of(o, seen | {key}) for o in outer), default=-1)
        return depth[key]

    return sorted(files, key=lambda file: depth_of(id(file)))


if __name__ == "__main__":
    main()
