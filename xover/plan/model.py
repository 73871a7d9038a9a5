"""Throughput model for jobs that share devices.

Each job i is summarised by per-iteration times measured alone:

* ``c_i`` - time it occupies the devices: data loading + forward + backward (+ update);
* ``m_i`` - exposed communication: from the end of its backward pass until its
  gradients are all-reduced and it could start the next iteration;
* ``l_i`` - how long its all-reduce keeps the link busy (``link_ms``; part of it
  overlaps backward, so l_i >= m_i);
* ``comm_cpu_i`` - the fraction of a core its communication threads (and the
  kernel's network work) take while it is in flight: device time in the fluid bound;
* ``interference_i`` - how much longer its device time is next to a partner than
  alone (``measured_interference``), measured by `xover profile` under crossover next
  to a reference partner: mostly the partner's communication on the same cores (the
  engines' threads, the kernel's network work, the caches they evict), which costs a
  computing job two to four times its CPU time. A measurement may be negative (it is
  stored down to ``MIN_INTERFERENCE``), but the predictions never charge less than none:
  a job measured faster next to a partner than alone was disturbed alone, as with the
  concurrent and MPS stretches. Half of it is charged whatever the partners;
  the other half grows with how much they communicate: with the sum of the partners'
  link shares l_j / T_j over the reference partner's (``interference_next_to``). The
  simulation charges it; the fluid bound, an ideal, does not.

Three views of a group, from cheapest to most faithful:

Fluid bound (``fluid_speeds``): the best any schedule could do. Each job gets a
speed x_i <= 1 relative to alone; the devices give at most their time
(sum x_i (c_i + comm_cpu_i m_i) / T_i <= 1), and so does the link
(sum x_i l_i / T_i <= 1), with T_i = c_i + m_i. The planner groups jobs by it.

Simulation (``simulate.py``, ``predict.py``): the runtime's own turn policy on one
device and a fairly shared link; each job's predicted speed under the policy.

Strict round robin, closed form (``round_robin_period``): CrossoverScheduler's
alternation, every job one iteration per period::

    P(G) = max( sum_i c_i,  sum_i m_i,  max_i (c_i + m_i) )

The closed form equals the long-run period of an event simulation of "round-robin
token on the devices, FIFO on the link" (the tests check that on random
instances). Muri's lock-step interleaving (SIGCOMM'22) has, for two jobs,
``T = max(c1, m2) + max(m1, c2)``, and for k jobs in a ring
``T = sum_s max(c_s, m_{s-1})`` (``lockstep_period``). Lock-step is never below
the pipelined period; for two jobs they coincide exactly, and they differ from
three jobs on: c = (50, 50, 50), m = (100, 10, 10) gives 150 ms pipelined (job
1's all-reduce overlaps two computes) and 200 ms lock-step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .calibration import SHIPPED, Calibration

# A job's name ends up in log folders and plan keys: no '/', no spaces ('#' for a second copy, name#2).
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._#-]{0,199}", re.ASCII)


DEFAULT_CHECKPOINT_MS = 1.0  # how soon a job yields a turn when its layer boundaries were not counted


def checkpoint_interval_ms(
    device_ms: float, checkpoints: int | None, on_gpu: bool = False, synced: bool = False
) -> float:
    """Compute between two layer boundaries (how soon a job can yield a turn), from its device time
    per iteration and the boundaries its worker counted (a profile's, or a run's). On a GPU the whole
    compute, unless the job waits for its kernels at each boundary (`synced`, XOVER_CHECKPOINT_SYNC):
    the CPU passes every layer boundary while it queues the kernels, long before the GPU has run them,
    so a request to yield is seen only when the iteration's compute is done (docs/gpu.md)."""
    if on_gpu and not synced:
        return device_ms
    return device_ms / checkpoints if checkpoints else DEFAULT_CHECKPOINT_MS


@dataclass(frozen=True)
class JobProfile:
    """Measured per-iteration behaviour of one data-parallel training job.

    ``memory_gb`` is what one replica needs on each of its devices; all jobs of a
    group live on the same devices at once, so their memory adds up.
    """

    name: str
    devices: int
    compute_ms: float
    comm_ms: float
    memory_gb: float
    data_ms: float = 0.0
    iterations: int = 100
    link_ms: float | None = None  # the link's busy time for one all-reduce (None: comm_ms, fully exposed)
    comm_cpu: float = 0.0  # fraction of a core its communication takes from whatever computes (CPU devices)
    checkpoint_ms: float = DEFAULT_CHECKPOINT_MS  # compute between two layer boundaries: how soon it can yield a turn
    max_slowdown: float | None = None  # protection: never planned (nor run) slower than this x alone
    interference: float = 0.0  # its device time grows by this fraction next to the reference partner (measured)
    # the reference partner's link share (l / T) when `interference` was measured; None: the same next to any partner
    interference_link_share: float | None = None
    startup_ms: float = 0.0  # launch to first iteration: processes, rendezvous, imports, set-up
    # compute time while a partner computes the whole time, over alone, without turns: time-sliced
    # (concurrent) and under CUDA MPS; measured on a GPU (None: processor sharing, as on a CPU core)
    corun_stretch: float | None = None
    mps_stretch: float | None = None

    def __post_init__(self) -> None:
        problem = _profile_problem(self)
        if problem is not None:
            raise InvalidJobProfile(self.name, problem)

    @property
    def device_ms(self) -> float:
        """Time per iteration the job holds the devices (c): data loading counts too."""
        return self.data_ms + self.compute_ms

    @property
    def solo_ms(self) -> float:
        """Iteration time when the job runs alone: c + m."""
        return self.device_ms + self.comm_ms

    @property
    def compute_fraction(self) -> float:
        """c / (c + m): close to 1 for compute-bound jobs, close to 0 for communication-bound."""
        return self.device_ms / self.solo_ms

    @property
    def link_busy_ms(self) -> float:
        """l: how long its all-reduce keeps the link busy per iteration (part of it overlaps backward)."""
        return max(self.comm_ms, self.link_ms if self.link_ms is not None else self.comm_ms)

    @property
    def device_share(self) -> float:
        """Device time per unit of speed: (c + the CPU its exposed communication takes) / (c + m)."""
        return (self.device_ms + self.comm_cpu * self.comm_ms) / self.solo_ms

    @property
    def link_share(self) -> float:
        """Link time per unit of speed: l / (c + m)."""
        return self.link_busy_ms / self.solo_ms


class InvalidJobProfile(ValueError):
    """Numbers that no job can have; ``problem`` says which field and why."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"job {name!r}: {problem}")
        self.problem = problem


def job_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a job in a trace or a plan file, or None if it can."""
    if JOB_NAME.fullmatch(name):
        return None
    return (
        f"name must be ASCII letters, digits, '.', '_', '-' or '#', starting with a letter or digit "
        f"(at most 200; it names log folders), got {name!r}"
    )


# The lowest interference a profile, a trace or a plan file may hold; a measurement below this is a
# disturbed one (the lowest measured: docs/measurements.md, *Figures behind the design*). The predictions
# charge none of a negative one (`interference_next_to`).
MIN_INTERFERENCE = -0.5

# The shortest compute per iteration: a microsecond. No device iteration is shorter (a kernel launch alone
# takes several), and it is far above the simulation's EPSILON (1e-9 ms): an iteration within that ended in
# the instant it began, and so did the next, for ever (plan and simulate hung).
MIN_COMPUTE_MS = 0.001


def _profile_problem(job: JobProfile) -> str | None:
    """Why ``job``'s numbers are unusable, or None if they are fine."""
    if not job.name:
        return "name is empty"
    if isinstance(job.devices, bool) or not isinstance(job.devices, int) or job.devices < 1:
        return f"devices must be a whole number >= 1, got {job.devices!r}"
    if isinstance(job.iterations, bool) or not isinstance(job.iterations, int) or job.iterations < 1:
        return f"iterations must be a whole number >= 1, got {job.iterations!r}"
    for field_name in (
        "compute_ms",
        "comm_ms",
        "memory_gb",
        "data_ms",
        "comm_cpu",
        "checkpoint_ms",
        "interference",
        "startup_ms",
    ):
        value = getattr(job, field_name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{field_name} must be a finite number, got {value!r}"
        lowest = MIN_INTERFERENCE if field_name == "interference" else 0
        if value < lowest:
            return f"{field_name} must be >= {lowest}, got {value!r}"
    # A job with no compute never needs the devices; it would also make gains divide by zero.
    if job.compute_ms < MIN_COMPUTE_MS:
        return f"compute_ms must be at least {MIN_COMPUTE_MS:g} (a microsecond), got {job.compute_ms!r}"
    if job.comm_cpu > 1:
        return f"comm_cpu is a fraction of a core, at most 1, got {job.comm_cpu!r}"
    if job.link_ms is not None and (
        isinstance(job.link_ms, bool)
        or not isinstance(job.link_ms, (int, float))
        or not math.isfinite(job.link_ms)
        or job.link_ms < 0
    ):
        return f"link_ms must be a finite number >= 0, got {job.link_ms!r}"
    for field_name in ("corun_stretch", "mps_stretch"):
        stretch = getattr(job, field_name)
        if stretch is not None and (
            isinstance(stretch, bool)
            or not isinstance(stretch, (int, float))
            or not math.isfinite(stretch)
            or stretch <= 0
        ):
            return f"{field_name} must be a finite number > 0, got {stretch!r}"
    share = job.interference_link_share
    if share is not None and (
        isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or not 0 < share <= 1
    ):
        # the reference partner's time on the link over its iteration (l / T): a share, never above 1
        return f"interference_link_share is a share of the partner's iteration, a number > 0 and <= 1, got {share!r}"
    if job.max_slowdown is not None and (
        isinstance(job.max_slowdown, bool)
        or not isinstance(job.max_slowdown, (int, float))
        or not math.isfinite(job.max_slowdown)
        or job.max_slowdown < 1
    ):
        return f"max_slowdown must be a number >= 1, got {job.max_slowdown!r}"
    return None


def measured_interference(alone_device_ms: float, shared_device_ms: float) -> float:
    """A job's interference from its device time per iteration next to a partner (the co-run of
    `xover profile`) over its device time alone; never below `MIN_INTERFERENCE`."""
    if alone_device_ms <= 0:
        return 0.0
    return max(MIN_INTERFERENCE, shared_device_ms / alone_device_ms - 1.0)


def interference_next_to(job: JobProfile, partners: Sequence[JobProfile], calibration: Calibration = SHIPPED) -> float:
    """`job`'s interference next to `partners`, as the predictions charge it: its measured interference,
    its traffic part (`calibration.interference_traffic_part`: the partners' communication - the kernel's
    TCP work, the engines' copies and reductions, the cache lines they evict, all on the cores the job
    computes on) scaled by the partners' link shares summed, over the reference partner's; the rest is
    paid next to any partner (sharing caches across a turn change); a reference share below the calibration's
    least counts as that least (the fit's range). Without a reference share it is the
    measured value whatever the partners. Never below 0: a job measured faster next to a partner than
    alone was disturbed alone, its measurement's noise larger than most jobs' interference
    (docs/measurements.md, *Interference never below none*)."""
    if not partners:
        return 0.0
    charged = job.interference
    if job.interference_link_share is not None:
        # a reference that hardly sent measured hardly any traffic part: not scaled up from it past the fit
        reference = max(job.interference_link_share, calibration.interference_reference_share)
        traffic = sum(partner.link_share for partner in partners) / reference
        part = calibration.interference_traffic_part
        charged *= 1.0 - part + part * traffic
    return max(0.0, charged)


def round_robin_period(jobs: Sequence[JobProfile]) -> float:
    """Strict round robin: steady-state time (ms) for every job of the group to finish one iteration."""
    if not jobs:
        return 0.0
    return max(
        sum(job.device_ms for job in jobs),
        sum(job.comm_ms for job in jobs),
        max(job.solo_ms for job in jobs),
    )


def lockstep_period(jobs: Sequence[JobProfile]) -> float:
    """Muri-style lock-step period: stage s pairs job s's compute with job s-1's all-reduce.

    Only for comparison with ``round_robin_period``; the planner does not use it.
    """
    if not jobs:
        return 0.0
    if len(jobs) == 1:
        return jobs[0].solo_ms
    return sum(max(jobs[s].device_ms, jobs[s - 1].comm_ms) for s in range(len(jobs)))


def round_robin_gain(jobs: Sequence[JobProfile]) -> float:
    """Strict round robin: throughput relative to one job after another (1.0 = no better)."""
    return sum(job.solo_ms for job in jobs) / round_robin_period(jobs)


def fluid_speeds(jobs: Sequence[JobProfile]) -> list[float] | None:
    """The fluid bound: speeds x_i (relative to alone) maximising sum x_i subject to the devices
    (sum x_i device_share_i <= 1), the link (sum x_i link_share_i <= 1), x_i <= 1, and each job's
    protection (x_i >= 1 / max_slowdown_i). No schedule does better with the job's speeds alone;
    interference is left out, so a negative one (a job faster next to a partner than alone, as the
    thread policy can make it) lets a prediction or a measurement pass it. None when the protections
    cannot all be met. Two jobs: the best vertex of a polygon; more: an LP (scipy's HiGHS)."""
    if not jobs:
        return []
    lows = [1.0 / job.max_slowdown if job.max_slowdown else 0.0 for job in jobs]
    if len(jobs) == 1:
        return [1.0]
    if len(jobs) == 2:
        return _pair_fluid_speeds(jobs[0], jobs[1], lows)
    from scipy.optimize import linprog

    result = linprog(
        c=[-1.0] * len(jobs),
        A_ub=[[job.device_share for job in jobs], [job.link_share for job in jobs]],
        b_ub=[1.0, 1.0],
        bounds=list(zip(lows, [1.0] * len(jobs))),
        method="highs",
    )
    return [float(x) for x in result.x] if result.success else None


def _pair_fluid_speeds(a: JobProfile, b: JobProfile, lows: list[float]) -> list[float] | None:
    # every line a vertex lies on: x = bound, y = bound, or a resource used up
    lines = [
        (1.0, 0.0, lows[0]),
        (1.0, 0.0, 1.0),
        (0.0, 1.0, lows[1]),
        (0.0, 1.0, 1.0),
        (a.device_share, b.device_share, 1.0),
        (a.link_share, b.link_share, 1.0),
    ]
    best: list[float] | None = None
    for i, (a1, b1, c1) in enumerate(lines):
        for a2, b2, c2 in lines[i + 1 :]:
            det = a1 * b2 - a2 * b1
            if abs(det) < 1e-12:
                continue
            x, y = (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det
            feasible = (
                lows[0] - 1e-9 <= x <= 1 + 1e-9
                and lows[1] - 1e-9 <= y <= 1 + 1e-9
                and a.device_share * x + b.device_share * y <= 1 + 1e-9
                and a.link_share * x + b.link_share * y <= 1 + 1e-9
            )
            if feasible and (best is None or x + y > sum(best) + 1e-12):
                best = [min(1.0, max(0.0, x)), min(1.0, max(0.0, y))]
    return best


def fluid_gain(jobs: Sequence[JobProfile]) -> float:
    """The fluid bound's aggregate speed (1.0 for one job; 0.0 when protections cannot be met)."""
    speeds = fluid_speeds(jobs)
    return sum(speeds) if speeds is not None else 0.0


def link_busy_ms(gradient_bytes: int, ranks: int, hosts: int, rate_bits_per_s: float) -> float:
    """How long a ring all-reduce of `gradient_bytes` keeps the busiest link busy, at a node's NIC rate.

    A ring all-reduce over n ranks sends 2 (n - 1) / n of the gradients from every rank, each over its
    node's NIC: 2 (n - 1) / n of the gradients at the rate. On one host the emulated loopback stands for
    the nodes' NICs together (shaped to the rate times the devices, `emulation/network.py`), so the same
    holds there; `hosts` is kept for the callers that say where the ranks were.
    """
    if ranks <= 1 or rate_bits_per_s <= 0:
        return 0.0
    share = 2 * (ranks - 1) / ranks
    return gradient_bytes * share * 8 / rate_bits_per_s * 1000
