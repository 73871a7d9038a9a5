"""What runs measured, as typed results: one job's run in one mode, a group's comparison across modes,
the model's figures for a group, loss parity, and an experiment's row.

`xover report` builds them once from the store (report/data.py); analysis, the report's views and the
benchmarks read them by attribute. Each one's `to_json()` is its shape in `xover report --format json`
and in the CSV files, key for key and in the same order (the names scripts rely on); `xover run --json`
writes the same shapes. Iterations stay plain rows (store/queries.iteration_rows): they are data, not
results.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .links import Link
from .sharing import (
    ADAPTIVE,
    ALONE_MODES,
    CONCURRENT,
    CROSSOVER,
    MODE_ORDER,
    SHARED_MODES,
    WAYS,
    Mode,
    RunStatus,
    adapts,
)


def mode_rank(mode: str | None) -> int:
    """A mode's place in MODE_ORDER (unknown modes last)."""
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def measured_makespan_s(runs: Iterable[tuple[str | None, datetime | None, datetime | None]]) -> float | None:
    """A plan's run's makespan from its runs' (status, start, end): first job's start to last job's end, in
    seconds; None unless every job finished (one cancelled, failed or cut short ended early, and the span is
    no makespan of the plan). `xover run`'s end-of-run line and `xover report`'s both say this one."""
    spans = list(runs)
    if not spans or any(status != RunStatus.FINISHED or start is None or end is None for status, start, end in spans):
        return None
    return (max(end for _, _, end in spans if end) - min(start for _, start, _ in spans if start)).total_seconds()


def kept_plan_lengths(planned: Mapping[str, int | None], ran: Iterable[tuple[str | None, int | None]]) -> bool:
    """Whether every job of a plan's run ran the length the plan predicted for: each (job name, iterations it
    was given) against the plan's iterations of that job. A job file without `iterations` runs its script to
    its own end, not the plan's default length. `xover run`'s line and `xover report`'s both ask this."""
    return all(name is not None and iterations == planned.get(name) for name, iterations in ran)


# a job sharing its devices is at most as fast as alone: beyond this, what ran alone was slowed (noise below it),
# and every figure relative to that run reads high (analysis warns; run/learn.py keeps no such comparison)
FASTER_THAN_ALONE = 0.1


def faster_than_alone(speed: float | None, tolerance: float = FASTER_THAN_ALONE) -> bool:
    """Whether a speed relative to alone is above what sharing can give, beyond noise."""
    return speed is not None and speed > 1 + tolerance


@dataclass(frozen=True)
class RunResult:
    """One job's run in one mode: the run's own fields (store/queries.run_fields), its steady-state
    figures (analysis.job_summary), its speed next to alone (analysis.compare) and, for a job alone
    in a group's comparison, the interference its profile measured (the report's model reads it).

    Every field may be missing from a summary read back from JSON, hence the defaults."""

    # the run, as recorded
    run_id: int | None = None
    experiment: str | None = None
    name: str | None = None
    recipe: str | None = None
    mode: str | None = None
    policy: str | None = None
    group: int | None = None
    slot: int | None = None
    engine: str | None = None
    np: int | None = None
    hosts: str | None = None
    devices: str | None = None
    status: str | None = None
    exit_code: int | None = None
    iterations_planned: int | None = None
    gradient_bytes: int | None = None
    started_at: str | None = None  # UTC
    ended_at: str | None = None
    wall_s: float | None = None
    log_dir: str | None = None
    error: str | None = None
    turn_stats: dict[str, Any] | None = None
    launcher_job_id: str | None = None  # its job at the launcher's scheduler (a Slurm job's id)
    link_priority: int | None = None
    comm_threads: str | None = None
    checkpoints: int | None = None
    peak_memory_gb: float | None = None
    device: str | None = None
    backend: str | None = None
    deterministic: bool | None = None
    devices_per_gpu: int | None = None
    gpu_sharing: str | None = None
    turns_lost: list[dict[str, Any]] | None = None  # where its ranks gave up crossover turns, and why
    # what its iterations say (steady-state medians, warm-up left out)
    iterations: int | None = None
    samples_per_s: float | None = None
    iteration_ms: float | None = None
    compute_ms: float | None = None
    data_ms: float | None = None
    communication_ms: float | None = None
    wait_ms: float | None = None
    wait_p90_ms: float | None = None
    link_ms: float | None = None
    comm_cpu_ms: float | None = None
    yields: int | None = None
    skew_p50_ms: float | None = None
    skew_p90_ms: float | None = None
    final_loss: float | None = None  # NaN or infinite where the job diverged
    loss_not_finite: dict[str, Any] | None = None  # where it diverged (analysis.loss_not_finite)
    accuracy: float | None = None
    evaluations: dict[str, float] = field(default_factory=dict)
    speed: float | None = None  # relative to alone (1.0 alone)
    # next to alone, over the time its group's jobs ran together (analysis.compare)
    samples_per_s_shared: float | None = None
    slowdown: float | None = None
    # a job alone in a group's comparison: its profile's interference (the report's model reads it)
    interference: float | None = None
    interference_link_share: float | None = None

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> RunResult:
        """From a job summary as a dict (analysis.job_summary, or a `jobs` entry of the JSON);
        a key this class does not know is an error, so that no figure is dropped unseen."""
        return cls(**summary)

    @property
    def is_alone(self) -> bool:
        """Whether it ran with its devices to itself (solo, sequential or a profile)."""
        return self.mode in ALONE_MODES

    @property
    def is_shared(self) -> bool:
        """Whether it shared its devices with its group (concurrent or crossover)."""
        return self.mode in SHARED_MODES

    @property
    def span_hosts(self) -> int:
        """How many hosts the job spanned, from its -H spec."""
        return len({entry.split(":")[0] for entry in (self.hosts or "").split(",") if entry})

    def to_json(self) -> dict[str, Any]:
        """The job as `xover report --format json` writes it (the key order of the dicts it replaced:
        a shared job's samples/s together come before its slowdown, an alone one's after it, and
        the interference only where the report looked it up)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)[:_SUMMARY_FIELDS]}
        if self.is_shared and self.group is not None:
            data.update(samples_per_s_shared=self.samples_per_s_shared, slowdown=self.slowdown)
        elif self.is_alone:
            data.update(slowdown=self.slowdown, samples_per_s_shared=self.samples_per_s_shared)
        else:
            data["slowdown"] = self.slowdown
        if self.interference is not None:
            data.update(interference=self.interference, interference_link_share=self.interference_link_share)
        return data


# the run's own fields and its summary: the fields before samples_per_s_shared
_SUMMARY_FIELDS = [f.name for f in dataclasses.fields(RunResult)].index("samples_per_s_shared")


@dataclass(frozen=True)
class PolicyResult:
    """One shared mode of a group (concurrent, or crossover under one turn policy): the sum of its
    jobs' speeds relative to alone over the time they ran together."""

    aggregate: float | None  # None when a job's speed alone or together is unknown
    window_s: float | None  # the overlap window's length (None: whole runs compared)
    overlap: float | None  # the share of the mode's time that every job ran together
    vs_concurrent: float | None = None  # crossover only: its aggregate over concurrent's
    starts_apart_s: float | None = None  # the first iterations' starts, first to last (a group's start skew)

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GroupComparison:
    """A group's shared modes against its jobs alone (analysis.compare): each way of sharing that ran (and
    the two every comparison considers, concurrent and crossover), its jobs' aggregate speed over
    sequential and the share of its time the jobs ran together; crossover's under each turn policy."""

    group: int
    jobs: list[str]
    policies: dict[str, PolicyResult]  # crossover by turn policy
    sequential: float | None  # 1.0 when every job ran alone
    measured: dict[str, float | None]  # way of sharing -> aggregate over sequential (crossover: under crossover_policy)
    overlaps: dict[str, float | None]  # way of sharing -> the share of its time every job ran together
    crossover_policy: str | None
    # way of sharing -> the length of the window its aggregate was measured over (None: whole runs compared)
    windows: dict[str, float | None]
    # way of sharing -> how far apart its jobs' first iterations started (the late one's start-up)
    starts_apart: dict[str, float | None]

    @property
    def concurrent_vs_sequential(self) -> float | None:
        """Concurrent's aggregate over sequential."""
        return self.measured.get(CONCURRENT.name)

    @property
    def crossover_vs_sequential(self) -> float | None:
        """Crossover's aggregate over sequential, under crossover_policy."""
        return self.measured.get(CROSSOVER.name)

    @property
    def crossover_vs_concurrent(self) -> float | None:
        """Crossover's aggregate over concurrent's."""
        crossover, concurrent = self.crossover_vs_sequential, self.concurrent_vs_sequential
        return crossover / concurrent if crossover and concurrent else None

    @property
    def adaptive_vs_best(self) -> float | None:
        """Adaptive's aggregate over the better of crossover's and concurrent's (of those that ran; None where
        neither, or adaptive, did)."""
        adaptive = self.measured.get(ADAPTIVE.name)
        fixed = [gain for gain in (self.crossover_vs_sequential, self.concurrent_vs_sequential) if gain]
        return adaptive / max(fixed) if adaptive and fixed else None

    @property
    def concurrent_overlap(self) -> float | None:
        """The share of concurrent's time that every job ran together."""
        return self.overlaps.get(CONCURRENT.name)

    @property
    def crossover_overlap(self) -> float | None:
        """The share of crossover's time (under crossover_policy) that every job ran together."""
        return self.overlaps.get(CROSSOVER.name)

    def to_json(self) -> dict[str, Any]:
        """The group as the JSON writes it, in the key order scripts already read: each way's gain over
        sequential (`concurrent_vs_sequential`, ...), crossover's policy and its gain over concurrent, then
        each way's overlap."""
        # the key order of the dicts this replaced: policies third when crossover ran, else last
        policies = {name: entry.to_json() for name, entry in self.policies.items()}
        data: dict[str, Any] = {"group": self.group, "jobs": self.jobs}
        if policies:
            data["policies"] = policies
        data["sequential"] = self.sequential
        data.update({WAYS[way].compared_as: gain for way, gain in self.measured.items()})
        data.update(crossover_policy=self.crossover_policy, crossover_vs_concurrent=self.crossover_vs_concurrent)
        if ADAPTIVE.name in self.measured:
            data["adaptive_vs_best"] = self.adaptive_vs_best
        data.update({f"{way}_overlap": overlap for way, overlap in self.overlaps.items()})
        data["policies"] = policies
        return data


@dataclass(frozen=True)
class RunOutcome:
    """What one `xover run` ran (run/commands.run_groups): each job's run in each mode, compared
    (speeds set), and each group's comparison, with the plan's predicted gains, the launcher's job
    ids, the units it did not start and, for a plan run as scheduled, its makespans. `to_json()` is `xover run
    --json`."""

    experiment: str
    results_dir: str
    link: Link  # the run's: its JSON keys `bandwidth` (the rate this machine shaped) and `link` (the rate)
    modes: list[str]
    policies: list[str]
    jobs: list[RunResult]
    groups: list[GroupComparison]
    predicted_gains: dict[int, float | None] = field(default_factory=dict)  # group -> the plan's
    launcher: str = "local"
    launcher_jobs: dict[int, str] = field(default_factory=dict)  # group -> the launcher's job id (Slurm's)
    schedule: dict[str, Any] | None = None  # run/commands.schedule_summary
    sharing: dict[int, str] = field(default_factory=dict)  # group -> the plan's way of sharing (a plan's run)
    not_started: list[NotStarted] = field(default_factory=list)  # after a job failed alone or was refused
    seconds: float | None = None  # --seconds: the time alone each job's length was sized to

    @property
    def finished(self) -> bool:
        """Whether every job finished."""
        return all(job.status == RunStatus.FINISHED for job in self.jobs)

    def to_json(self) -> dict[str, Any]:
        """The run as `xover run --json` writes it; launcher job ids and the schedule only where there are some."""
        data: dict[str, Any] = {
            "experiment": self.experiment,
            "results_dir": self.results_dir,
            "bandwidth": self.link.shaped_rate,
            "link": self.link.rate,
            "modes": self.modes,
            "policies": self.policies,
            "jobs": [job.to_json() for job in self.jobs],
            "groups": [
                group.to_json()
                | {"predicted_gain": self.predicted_gains.get(group.group)}
                # the plan's pick, under report --json's name too (`sharing`: as run --json first named it)
                | (
                    {"sharing": self.sharing[group.group], "planned_sharing": self.sharing[group.group]}
                    if group.group in self.sharing
                    else {}
                )
                for group in self.groups
            ],
            "not_started": [unit.to_json() for unit in self.not_started],
        }
        if self.launcher_jobs:
            data[f"{self.launcher}_jobs"] = {str(index): job_id for index, job_id in self.launcher_jobs.items()}
        if self.schedule is not None:
            data["schedule"] = self.schedule
        return data


@dataclass(frozen=True)
class SimulatedGain:
    """One turn policy simulated on a group's jobs alone: the sum of speeds, and each job's speed."""

    gain: float
    speeds: dict[str, float]


@dataclass(frozen=True)
class GroupModel:
    """The model's figures for a group from its jobs measured alone (analysis.group_model)."""

    fluid_bound: float | None = None
    predicted: dict[str, SimulatedGain] = field(default_factory=dict)  # by turn policy
    without_turns: dict[str, SimulatedGain] = field(default_factory=dict)  # concurrent, and mps where measured


def predicted_in_way(predicted_by_sharing: Mapping[str, float], way: str, fallback: float | None) -> float | None:
    """The plan's predicted gain of a group run in `way`: an adaptive group's is its better way's (what it settles
    in); `fallback` (the plan group's own gain) where the plan predicted no way apart (a job alone: its own gain, the
    only one; a plan from before the pick: every group in crossover). `xover run` and `xover report` both ask it."""
    if not predicted_by_sharing:
        return fallback
    if adapts(way):
        return max(predicted_by_sharing.values(), default=None)
    return predicted_by_sharing.get(way)


@dataclass(frozen=True)
class GroupReport(GroupComparison):
    """A group's comparison as the report shows it: with each job's run alone against its profile,
    the plan's predicted gain, and the model's figures."""

    alone_vs_profile: dict[str, float]  # job -> device time alone in the run / in its profile
    # the plan's, of the way it ran in: crossover's in a comparison, the pick's in a plan's run as planned
    predicted_gain: float | None
    model: GroupModel
    planned_sharing: str | None = None  # the plan's pick for the group (crossover, concurrent, mps, adaptive)
    predicted_by_sharing: dict[str, float] = field(default_factory=dict)  # the plan's gain of each way
    concurrent_under: str = CONCURRENT.name  # "mps" where the concurrent runs had CUDA MPS (runs.gpu_sharing)
    # an adaptive run of the group: its segments in order (run/adaptive.py's Segment.to_json()), and why the plan
    # picked what it picked
    timeline: list[dict[str, Any]] = field(default_factory=list)
    planned_reason: str | None = None

    @classmethod
    def of(
        cls,
        comparison: GroupComparison,
        alone_vs_profile: dict[str, float],
        predicted_gain: float | None,
        model: GroupModel,
        planned_sharing: str | None = None,
        predicted_by_sharing: dict[str, float] | None = None,
        concurrent_under: str = CONCURRENT.name,
        timeline: list[dict[str, Any]] | None = None,
        planned_reason: str | None = None,
    ) -> GroupReport:
        """A group's comparison with the report's additions, every field of the comparison carried over."""
        fields = {f.name: getattr(comparison, f.name) for f in dataclasses.fields(GroupComparison)}
        return cls(
            **fields,
            alone_vs_profile=alone_vs_profile,
            predicted_gain=predicted_gain,
            model=model,
            planned_sharing=planned_sharing,
            predicted_by_sharing=dict(predicted_by_sharing or {}),
            concurrent_under=concurrent_under,
            timeline=list(timeline or []),
            planned_reason=planned_reason,
        )

    @property
    def adaptive_gain(self) -> float | None:
        """Adaptive's measured gain over sequential (None unless it ran)."""
        return self.measured.get(ADAPTIVE.name)

    @property
    def time_in_ways(self) -> dict[str, float]:
        """An adaptive run's share of its time in each way of sharing (empty without one)."""
        return time_shares(self.timeline)

    @property
    def adaptive_way(self) -> str | None:
        """The way an adaptive run settled in last (its last settled segment's), None without one."""
        settled = [segment["way"] for segment in self.timeline if segment.get("kind") == "settled"]
        return settled[-1] if settled else None

    @property
    def measured_by_sharing(self) -> dict[str, float]:
        """The measured gain of each way of sharing that ran (crossover under its policy; concurrent, or
        mps where the concurrent runs had an MPS daemon)."""
        return {
            self.concurrent_under if way == CONCURRENT.name else way: gain
            for way, gain in self.measured.items()
            if gain is not None
        }

    @property
    def best_measured(self) -> str | None:
        """The way of sharing that measured best (sequential, 1.0, when neither beat it)."""
        measured = self.measured_by_sharing
        if not measured:
            return None
        best = max(measured, key=lambda sharing: measured[sharing])
        return best if measured[best] > (self.sequential or 1.0) else Mode.SEQUENTIAL.value

    @property
    def pick_vs_best(self) -> float | None:
        """The plan's pick, measured, over the best mode measured (1.0: the pick was the best)."""
        measured = self.measured_by_sharing
        picked = measured.get(self.planned_sharing or "")
        best = max([*measured.values(), self.sequential or 1.0], default=None)
        return picked / best if picked and best else None

    @property
    def fluid_bound(self) -> float | None:
        """The model's fluid bound: the most any sharing could gain."""
        return self.model.fluid_bound

    @property
    def simulated(self) -> dict[str, SimulatedGain]:
        """The model's simulated gain of each turn policy."""
        return self.model.predicted

    @property
    def measured_gain(self) -> float | None:
        """Crossover's measured gain over sequential."""
        return self.crossover_vs_sequential

    @property
    def of_fluid_bound(self) -> float | None:
        """The measured gain as a share of the fluid bound (None where either is unknown)."""
        measured, bound = self.measured_gain, self.fluid_bound
        return measured / bound if measured and bound else None

    @property
    def gain_error_pct(self) -> float | None:
        """How far the measured gain fell from the plan's prediction, in percent (negative: below it)."""
        measured, predicted = self.measured_gain, self.predicted_gain
        return (measured / predicted - 1) * 100 if measured and predicted else None

    def to_json(self) -> dict[str, Any]:
        """The group as the report's JSON writes it: the comparison's keys, then the model's and the plan's."""
        return {
            **super().to_json(),
            "alone_vs_profile": self.alone_vs_profile,
            "predicted_gain": self.predicted_gain,
            "fluid_bound": self.fluid_bound,
            "model_gain": self.fluid_bound,  # the model's ideal: the fluid bound
            "simulated": {policy: dataclasses.asdict(gain) for policy, gain in self.simulated.items()},
            "measured_gain": self.measured_gain,
            "of_fluid_bound": self.of_fluid_bound,
            "gain_error_pct": self.gain_error_pct,
            "simulated_without_turns": {
                way: dataclasses.asdict(gain) for way, gain in self.model.without_turns.items()
            },
            "concurrent_predicted": self.concurrent_predicted,
            "concurrent_error_pct": self.concurrent_error_pct,
            "planned_sharing": self.planned_sharing,
            "predicted_by_sharing": self.predicted_by_sharing,
            "best_measured": self.best_measured,
            "pick_vs_best": self.pick_vs_best,
            "planned_reason": self.planned_reason,
            "adaptive_way": self.adaptive_way,
            "adaptive_time": self.time_in_ways,
            "adaptive_timeline": self.timeline,
            "crossover_predicted": self.crossover_predicted,  # last: the keys before it keep their places
        }

    @property
    def concurrent_predicted(self) -> float | None:
        """Concurrent's predicted gain (MPS's where its runs had MPS): the plan's, else the model's from the
        jobs' runs alone."""
        if self.concurrent_under in self.predicted_by_sharing:
            return self.predicted_by_sharing[self.concurrent_under]
        simulated = self.model.without_turns.get(self.concurrent_under)
        return simulated.gain if simulated is not None else None

    @property
    def crossover_predicted(self) -> float | None:
        """Crossover's predicted gain: the plan's, else the model's simulation of the turn policy crossover ran under,
        from the jobs' runs alone (as concurrent's, and as the predicted-against-measured picture reads it)."""
        if CROSSOVER.name in self.predicted_by_sharing:
            return self.predicted_by_sharing[CROSSOVER.name]
        if self.predicted_gain is not None and not self.predicted_by_sharing:  # a plan from before the pick
            return self.predicted_gain
        simulated = self.simulated.get(self.crossover_policy or "")
        return simulated.gain if simulated is not None else None

    @property
    def concurrent_error_pct(self) -> float | None:
        """How far concurrent's measured gain fell from its prediction, in percent (negative: below it)."""
        measured, predicted = self.concurrent_vs_sequential, self.concurrent_predicted
        return (measured / predicted - 1) * 100 if measured and predicted else None


def time_shares(segments: list[dict[str, Any]]) -> dict[str, float]:
    """The share of an adaptive run's time (its segments' `started` to `ended`, wall times) in each way, while
    its jobs shared the devices (the last job alone shares nothing)."""
    spans: dict[str, float] = {}
    for segment in segments:
        if segment.get("kind") == "alone":
            continue
        if segment.get("ended") is not None and segment.get("started") is not None:
            length = max(0.0, float(segment["ended"]) - float(segment["started"]))
            spans[segment["way"]] = spans.get(segment["way"], 0.0) + length
    total = sum(spans.values())
    return {way: round(length / total, 4) for way, length in spans.items()} if total > 0 else {}


@dataclass(frozen=True)
class ParityResult:
    """A job shared with others against the same job alone: the largest per-iteration loss difference."""

    group: int | None
    name: str
    mode: str
    policy: str | None
    steps: int  # iterations compared
    max_abs_loss_diff: float | None
    identical: bool | None  # None when no iteration could be compared

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NotStarted:
    """A unit of runs the scheduler never started, and why: a job of it was refused or failed alone before any
    run of it finished, so each of its runs would fail the same way (run/schedule.py, `_skip_doomed`), or the run
    was stopped before its turn came (`stopped_first`)."""

    group: int | None
    mode: str
    policy: str | None  # crossover's turn policy
    jobs: list[str]
    why: str  # each job to blame: "name: failed alone (its last error line)", or "name: refused (...)"
    # the run was stopped (Ctrl-C, a signal, --timeout) before its turn came: nothing of it was to blame
    stopped_first: bool = False

    @property
    def label(self) -> str:
        """The runs it stood for, in words: `sequential (b)` for a job alone, `crossover (work-conserving)`."""
        if self.mode in ALONE_MODES:
            return f"{self.mode} ({', '.join(self.jobs)})"
        return f"{self.mode} ({self.policy})" if self.policy and self.mode == Mode.CROSSOVER else self.mode

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


def not_started_lines(units: list[NotStarted]) -> list[str]:
    """One line per group and reason: which of its runs were not started, and why (in the order they would have
    run)."""
    by_reason: dict[tuple[int | None, str], list[NotStarted]] = {}
    for unit in units:
        by_reason.setdefault((unit.group, unit.why), []).append(unit)
    return [
        f"{f'group {group}: ' if group is not None else ''}not started: "
        f"{', '.join(dict.fromkeys(unit.label for unit in same))} - {why}"
        + ("" if same[0].stopped_first else "; each would have failed the same way")
        for (group, why), same in by_reason.items()
    ]


@dataclass(frozen=True)
class ExperimentInfo:
    """An experiment's row; times as UTC text."""

    id: str
    kind: str
    status: str
    command: str | None
    bandwidth: str | None
    hosts: str | None
    plan_id: int | None
    hardware: str | None
    created_at: str | None
    ended_at: str | None

    @property
    def is_comparison(self) -> bool:
        """Whether it compared modes (`xover run`), rather than trained or profiled."""
        return self.kind == "run"

    @property
    def lengths_in_seconds(self) -> bool:
        """Whether its command line gave --seconds (each job's length sized to a time alone)."""
        return any(word == "--seconds" or word.startswith("--seconds=") for word in self._xover_words())

    @property
    def modes_asked(self) -> list[str]:
        """The modes its command line gave with --mode, in order ([] where it gave none: a plan's run as planned,
        or `xover train`)."""
        words = self._xover_words()
        asked = []
        for position, word in enumerate(words):
            if word == "--mode" and position + 1 < len(words):
                asked.extend(words[position + 1].split(","))
            elif word.startswith("--mode="):
                asked.extend(word.removeprefix("--mode=").split(","))
        return asked

    def _xover_words(self) -> list[str]:
        """Its command line's words before any `--` (the scripts' own arguments)."""
        try:
            words = shlex.split(self.command or "")
        except ValueError:  # a command cut short (unbalanced quotes): not one xover can read
            return []
        return words[: words.index("--")] if "--" in words else words

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExperimentSummary:
    """One line of `xover report all`."""

    id: str
    kind: str
    status: str
    created_at: str | None
    jobs: int  # distinct job names, with those of runs never started
    runs: int
    modes: str  # comma-separated, in MODE_ORDER
    best_crossover_gain: float | None

    def to_json(self) -> dict[str, Any]:
        """Its shape in the JSON: every field, in order."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GainPoint:
    """A group's crossover gain, predicted (by the plan, else the model) and measured."""

    experiment: str
    group: int
    jobs: list[str]
    predicted_gain: float
    predicted_from: str  # "plan" or "model"
    measured_gain: float
