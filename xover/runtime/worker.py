"""The training loop of one rank, with crossover turns around the compute phase.

Each iteration:  wait for the previous step's all-reduce (outside the turn, no spinning)
                 -> take the turn -> apply the update, load data, forward, backward
                 -> (GPU: wait for the compute stream) -> release the turn.
Backward hooks start the all-reduce of every gradient, so communication overlaps with the
partner jobs' compute. Every module and gradient is a checkpoint where the turn can be yielded to a
job the policy ranks first (and taken back). The math is exactly that of the job alone: only the
timing changes.

Run as:  python -m xover.runtime.worker SPEC.json   (under horovodrun)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import torch
import torch.nn.functional as F

from .. import workloads
from ..devices import devices_per_gpu, gpu_of_device
from ..engines import DEFAULT_ENGINE
from ..records import EndRecord, EvaluationRecord, IterationRecord, StartRecord
from ..settings import CUDA_BY_LOCAL_RANK_VARIABLE, OMP_THREADS_VARIABLE, omp_threads, settings, threads_per_rank_given
from ..sharing import MPS
from .engines import adapter_for
from .link_priority import LinkPriority
from .metrics import emit
from .thread_policy import CommThreads
from .turn_client import device_of, install_checkpoints, token_from_env


def place_on_device(local_rank: int) -> torch.device:
    """Rank i uses device i of its host (XOVER_DEVICES may say otherwise): a GPU, or one CPU core with
    torch on XOVER_THREADS_PER_RANK threads when given, else on OMP_NUM_THREADS's when set (as under plain
    torchrun or horovodrun: the thread count changes a CPU's sums), else on one. With several devices per GPU
    (devices.py), ranks share a GPU."""
    device_index = device_of(local_rank)
    current = settings()
    if torch.cuda.is_available() and not current.cpu_only:
        if os.environ.get(CUDA_BY_LOCAL_RANK_VARIABLE) == "1":  # a script job: CUDA shows its devices in rank order
            gpu = local_rank
        else:
            gpu = gpu_of_device(device_index, torch.cuda.device_count())
        torch.cuda.set_device(gpu)
        return torch.device("cuda", gpu)
    if threads_per_rank_given() or omp_threads(os.environ.get(OMP_THREADS_VARIABLE, "")) is None:
        torch.set_num_threads(current.threads_per_rank)
    # else OMP_NUM_THREADS (the user's, or a job file's; torchrun's 1 where it was unset) gave torch its threads
    # as it does alone: left so (settings.threads_per_rank is that count, for the profiles' key)
    cores = sorted(os.sched_getaffinity(0))
    if current.pin_cores and cores:
        os.sched_setaffinity(0, {cores[device_index % len(cores)]})
    return torch.device("cpu")


def use_deterministic_kernels() -> bool:
    """XOVER_DETERMINISTIC=1: deterministic kernels only (an operation without one fails loudly), so
    that a job's losses on a GPU are bit-identical alone and shared. Call before the first CUDA work."""
    if not settings().deterministic:
        return False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic workspace
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    return True


def gpu_sharing(device: torch.device) -> str | None:
    """How this GPU is shared with other processes: 'mps' when a CUDA MPS control daemon serves this
    process's pipe folder (kernels of processes run side by side), else 'time-slicing'."""
    if device.type != "cuda":
        return None
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    return MPS.name if os.path.exists(os.path.join(pipes, "control")) else "time-slicing"


def build_optimizer(recipe: dict[str, Any], parameters) -> torch.optim.Optimizer:
    """The recipe's optimizer (sgd, adam, else adamw) over `parameters`."""
    name, lr = recipe["optimizer"], recipe["lr"]
    if name == "sgd":
        return eager(torch.optim.SGD)(
            parameters, lr=lr, momentum=recipe["momentum"], weight_decay=recipe["weight_decay"]
        )
    if name == "adam":
        return eager(torch.optim.Adam)(parameters, lr=lr, weight_decay=recipe["weight_decay"])
    return eager(torch.optim.AdamW)(parameters, lr=lr, weight_decay=recipe["weight_decay"])


# torch wraps these so that torch.compile leaves them alone, and the wrappers import torch._dynamo on
# their first call: about as long as importing torch itself, in every rank (docs/measurements.md, *make
# test's time*). The built-in recipes never compile, so the worker calls what is wrapped: the same
# math, bit for bit (tests/unit/test_eager_optimizer.py).
_COMPILE_GUARDED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


_Optimizer = TypeVar("_Optimizer", bound=torch.optim.Optimizer)


def eager(optimizer: type[_Optimizer]) -> type[_Optimizer]:
    """`optimizer` without its torch.compile guards (a torch without them: as it is)."""
    methods: dict[str, Any] = {
        name: getattr(optimizer, name).__wrapped__
        for name in _COMPILE_GUARDED
        if hasattr(getattr(optimizer, name), "__wrapped__")
    }
    unguarded_step = getattr(optimizer.step, "__wrapped__", None)
    if unguarded_step is not None:

        @torch.no_grad()  # what the guard did besides: no autograd for the update (non-differentiable)
        def step(self, closure=None):
            return unguarded_step(self, closure)

        methods["step"] = step
    return cast(type[_Optimizer], type(optimizer.__name__, (optimizer,), methods))  # a subclass of `optimizer`


def set_precision(precision: str, device: torch.device):
    """The recipe's precision: a context for the forward pass and the loss (bf16: autocast to
    bfloat16; the backward runs in the dtypes autocast chose), after setting TF32 for `tf32`. fp32
    keeps torch's defaults. Gradients stay fp32 (the parameters are), so the all-reduce is unchanged."""
    if precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def to_memory_format(tensor: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """The tensor in the layout the model computes in."""
    # images (4-D) in NHWC where the recipe asks for it; other inputs as they are
    return tensor.contiguous(memory_format=torch.channels_last) if channels_last and tensor.dim() == 4 else tensor


def loss_of(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the last dimension: per image, or per token of a sequence."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


@torch.no_grad()
def evaluate(model: torch.nn.Module, dataset, device: torch.device) -> dict[str, float]:
    """Test accuracy and loss over the dataset's test split (token accuracy for a language model);
    empty without one. The model is back in training mode after."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for inputs, targets in dataset.test_batches():
        inputs, targets = inputs.to(device), targets.to(device)
        outputs = model(inputs)
        total_loss += float(loss_of(outputs, targets)) * targets.numel()
        correct += int((outputs.argmax(-1) == targets).sum())
        count += targets.numel()
    model.train()
    if count == 0:
        return {}
    key = "test_accuracy" if dataset.task == "classification" else "test_token_accuracy"
    return {key: correct / count, "test_loss": total_loss / count}


def synchronize_device(device: torch.device) -> None:
    """Block until the device's queued kernels are done (a CPU's work is done already)."""
    # Release the turn only once the device has really finished: kernels are merely queued otherwise.
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def peak_memory_gb(device: torch.device) -> float:
    """The most memory this process held: on a GPU what the driver charges it (the CUDA context,
    the caching allocator's reserve, NCCL's buffers), not only what tensors took."""
    if device.type == "cuda":
        reserved = torch.cuda.max_memory_reserved(device)
        return (reserved + max(0, process_gpu_memory(device) - torch.cuda.memory_reserved(device))) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


# What a process holds on a GPU beyond the allocator when NVML cannot tell (CUDA context, libraries).
CUDA_CONTEXT_BYTES = 600 * 2**20


def process_gpu_memory(device: torch.device) -> int:
    """Bytes NVML charges this process on its GPU now; the allocator's reserve plus a context's worth
    where NVML does not tell (no permission, a container's other pid namespace)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(_device_uuid(device))
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == os.getpid() and process.usedGpuMemory:
                    return int(process.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    return torch.cuda.memory_reserved(device) + CUDA_CONTEXT_BYTES


def _device_uuid(device: torch.device) -> str:
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def train(spec: dict[str, Any]) -> None:
    """Train one rank of a job as its spec says, taking the device's turns, and emit its metric records
    (rank 0 only)."""
    recipe = spec["recipe"]
    deterministic = use_deterministic_kernels()
    engine = adapter_for(spec.get("runtime") or spec.get("engine", DEFAULT_ENGINE))()
    device = place_on_device(engine.local_rank)
    # join the group early: the server sees us die from here on
    turn = token_from_env(engine.local_rank, synchronize=lambda: synchronize_device(device))
    is_reporter = engine.rank == 0
    torch.manual_seed(recipe["seed"])
    dataset = workloads.build_dataset(
        recipe["dataset"],
        batch_size=recipe["batch_size"],
        rank=engine.rank,
        world_size=engine.size,
        seed=recipe["seed"],
        options=recipe["dataset_options"],
    )
    model = workloads.build_model(recipe["model"], dataset, recipe["model_options"]).to(device)
    # channels-last inputs only: convolutions then run NHWC and give NHWC activations, while the weights
    # and so their gradients stay contiguous, as Horovod's all-reduce requires ("Tensor is required to be
    # contiguous") and DDP's buckets expect
    channels_last = bool(recipe.get("channels_last"))
    autocast = set_precision(recipe.get("precision", "fp32"), device)
    engine.prepare(model, build_optimizer(recipe, model.parameters()))
    checkpoints = install_checkpoints(model, turn)  # noqa: F841 - kept: the gradient hooks live on these nodes
    link = LinkPriority()  # the job's band on the shared link, when the launcher gave it one
    link.apply()
    comm_threads = CommThreads(crossover=turn.crossover, cpu=device.type == "cpu")
    comm_threads.apply()
    iterations = recipe["iterations"] or recipe["epochs"] * dataset.steps_per_epoch
    eval_interval = recipe["eval_interval"]
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    if is_reporter:
        emit(
            StartRecord(
                job=spec["job"],
                iterations=iterations,
                world_size=engine.size,
                engine=engine.name,
                device=str(device),
                backend=engine.backend,
                deterministic=deterministic,
                devices_per_gpu=devices_per_gpu() if device.type == "cuda" else None,
                gpu_sharing=gpu_sharing(device),
                parameters=sum(p.numel() for p in model.parameters()),
                gradient_bytes=gradient_bytes,
                wall_time=time.time(),
                **link.start_fields(),
                **comm_threads.start_fields(),
                checkpoints=len(list(model.modules())) + sum(1 for p in model.parameters() if p.requires_grad),
            )
        )

    def report_evaluation(step: int) -> None:
        if is_reporter and dataset.test is not None:
            for metric, value in evaluate(model, dataset, device).items():
                emit(EvaluationRecord(step=step, metric=metric, value=value))

    started = previous_end = time.perf_counter()
    for step in range(iterations):
        t0 = time.perf_counter()
        # CPU of every thread but this one: the engine's communication (Gloo, Horovod), which on a
        # CPU takes cycles from whatever computes on the cores.
        cpu0, own0 = time.process_time(), time.thread_time()
        if step > 0:
            engine.wait_gradients()
        t1 = time.perf_counter()
        waited = turn.acquire()
        t2 = time.perf_counter()
        evaluation_s = None
        if step > 0:
            engine.apply_update()
            if eval_interval and step % eval_interval == 0:
                evaluating = time.perf_counter()
                report_evaluation(step)
                evaluation_s = time.perf_counter() - evaluating
        t_updated = time.perf_counter()
        engine.zero_grad()
        inputs, targets = dataset.batch(step)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        inputs = to_memory_format(inputs, channels_last)
        t3 = time.perf_counter()
        with autocast():
            loss = loss_of(model(inputs), targets)
        loss.backward()
        synchronize_device(device)
        t4 = time.perf_counter()
        turn.release()
        if is_reporter:
            phase = turn.phase
            emit(
                IterationRecord(
                    step=step,
                    time_s=t4 - started,
                    wall_time=time.time(),
                    iteration_s=t4 - previous_end,
                    data_s=t3 - t_updated,
                    compute_s=(t_updated - t2) + (t4 - t3) - phase.yielded_s,
                    communication_s=t1 - t0,
                    wait_s=waited + phase.yielded_s,
                    samples=recipe["batch_size"] * engine.size,
                    loss=float(loss),
                    yields=phase.yields,
                    link_s=engine.link_s if step > 0 else None,
                    comm_cpu_s=(time.process_time() - cpu0) - (time.thread_time() - own0),
                    held=[[round(a, 6), round(b, 6)] for a, b in phase.held] or None,
                    evaluation_s=evaluation_s,
                )
            )
        previous_end = t4
        link.apply(step)
        comm_threads.apply(step)

    # The last step's gradients: wait, then apply the final update in a last turn.
    engine.wait_gradients()
    turn.acquire()
    engine.apply_update()
    report_evaluation(iterations)
    synchronize_device(device)
    turn.release()
    turn.close()
    if is_reporter:
        emit(
            EndRecord(
                iterations=iterations, wall_s=time.perf_counter() - started, peak_memory_gb=peak_memory_gb(device)
            )
        )
    engine.shutdown()


# At the job's length a script's loop is left where it stands: the code after it that stops the script's own threads
# (a writer's queue closed, its thread joined) never runs, and waiting for them as Python would never ends
THREADS_WAITED_AT_THE_CAP_S = 10.0


def exit_without_teardown(finalize: Callable[[], None] | None = None, at_the_cap: bool = False) -> NoReturn:
    """End a rank that has finished its work, skipping the interpreter's teardown.

    torch's Gloo backend now and then aborts a process at exit, after Python has finalised
    ("terminate called without an active exception", SIGABRT, no Python frame left), under xover or
    not, and never with this exit (docs/measurements.md, *Figures behind the design*: *A rank's end*).
    torchrun then reports a job that finished as failed and kills its other ranks. What Python would still
    do at exit (wait for non-daemon threads, atexit handlers, flush the streams) is done here, then the
    process ends; `finalize`, after the atexit handlers, does what else a script's objects would be finalised for
    (script_shim.finalize_what_the_script_left). `at_the_cap`: the script was stopped at its job's length, and its
    threads are waited for THREADS_WAITED_AT_THE_CAP_S in all, then left, each named on stderr."""
    deadline = time.monotonic() + THREADS_WAITED_AT_THE_CAP_S if at_the_cap else None
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                print(
                    f"xover: the script's thread {thread.name!r} still ran {THREADS_WAITED_AT_THE_CAP_S:g} s after "
                    "the job's length stopped its loop (what stops it lies after the loop?): left as the rank ends",
                    file=sys.stderr,
                    flush=True,
                )
    atexit._run_exitfuncs()
    _flush_standard_streams()  # before what `finalize` closes: a file of the script's may share their descriptor
    if finalize is not None:
        finalize()
        _flush_standard_streams()
    os._exit(0)


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> None:
    """A worker's entry point: train from the spec file named by the first argument, then exit without teardown."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        train(json.load(handle))
    exit_without_teardown()


if __name__ == "__main__":
    main()
