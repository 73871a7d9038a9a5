"""What runs: jobs placed on devices, and groups of them (the groups of a run come from targets.py; what
the turn policy knows of each job from traits.py).

A job's placement is host -> the device index of each of its local ranks (horovodrun and torchrun
give a host's ranks local ranks 0, 1, ... in that order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines import DEFAULT_ENGINE
from ..errors import XoverError
from ..hosts import LOCAL, MAX_SLOTS, Device, canonical_host, hosts_spec, parse_hosts
from ..recipes import Recipe
from ..scripts import check_engine, copy_name
from ..sharing import DEFAULT_WAY, WAYS
from ..turns.policies import SlotTraits


@dataclass
class JobSpec:
    """One job as it will be launched."""

    name: str
    recipe: Recipe
    devices: dict[str, list[int]]  # host -> device index of each local rank
    engine: str = DEFAULT_ENGINE  # a name in the engines' registry (xover/engines.py)
    traits: SlotTraits | None = None  # what the turn policy knows of it

    @property
    def script(self) -> list[str] | None:
        """The user's unmodified training script and its arguments (a job file, or --script), if any."""
        return [self.recipe.script, *self.recipe.args] if self.recipe.script else None

    @property
    def np(self) -> int:
        """How many ranks: one per device."""
        return sum(len(indices) for indices in self.devices.values())

    @property
    def hosts(self) -> str:
        """The -H spec for its launcher."""
        return hosts_spec(self.devices)

    @property
    def device_set(self) -> set[Device]:
        """Its devices as (host, index) pairs, hosts in canonical form so that two spellings of one host meet."""
        return {(canonical_host(host), index) for host, indices in self.devices.items() for index in indices}

    def devices_env(self) -> str:
        """XOVER_DEVICES: '0,1' on one host; 'h1=0,1;h2=0,1' across hosts (a worker finds its host's list)."""
        if len(self.devices) == 1:
            return ",".join(map(str, next(iter(self.devices.values()))))
        return ";".join(f"{host}={','.join(map(str, indices))}" for host, indices in self.devices.items())


@dataclass
class GroupToRun:
    """One group of a run: its jobs, the plan's predicted gain and the way of sharing the plan picked."""

    index: int
    jobs: list[JobSpec]
    predicted_gain: float | None = None
    sharing: str = DEFAULT_WAY.name  # the plan's pick (a way of sharing, xover/sharing.py): what `planned` runs
    predicted_by_sharing: dict[str, float] = field(default_factory=dict)  # the plan's gain of each way it predicted
    predicted_from: dict[str, str] = field(default_factory=dict)  # way -> measured | simulated (none given: simulated)
    measured_runs: dict[str, int] = field(default_factory=dict)  # measured way -> comparisons its figure is the mean of

    @property
    def best_without_turns(self) -> str | None:
        """The way without turns the plan predicted best (concurrent, or mps where measured): what an adaptive
        group runs when it runs without turns; None without a plan."""
        ways = {
            way: gain for way, gain in self.predicted_by_sharing.items() if way in WAYS and not WAYS[way].takes_turns
        }
        return max(ways, key=lambda way: ways[way]) if ways else None

    @property
    def needs_mps(self) -> bool:
        """Whether its plan's pick runs under an MPS daemon: MPS, or adaptive choosing between turns and MPS."""
        return WAYS[self.sharing].needs_mps or (WAYS[self.sharing].adapts and self.best_without_turns == "mps")

    @property
    def planned_mode(self) -> str:
        """The run mode of the plan's pick: MPS is concurrent under the run's MPS daemon."""
        return WAYS[self.sharing].mode.value

    @property
    def device_set(self) -> set[Device]:
        """Every device of the group's jobs."""
        return set().union(*(job.device_set for job in self.jobs))


def job_for(recipe: Recipe, hosts: str | None = None, name: str | None = None, engine: str = DEFAULT_ENGINE) -> JobSpec:
    """A recipe's job on the first slots of each host of `hosts` (default: this machine). `engine` is a
    built-in model's; a script runs under its own."""
    check_engine(engine)
    return JobSpec(
        name=name or recipe.name,
        recipe=recipe,
        devices=placement_on(hosts, recipe.np, recipe.name),
        engine=recipe.engine_under(engine),
    )


def placement_on(hosts: str | None, np: int, job: str) -> dict[str, list[int]]:
    """The first `np` slots of the hosts of a -H spec, host by host (default: this machine): host -> indices."""
    if not hosts and np > MAX_SLOTS:  # this machine's slots, as -H would say them, are the ranks asked for
        raise XoverError(
            f"job '{job}' asks for {np} ranks (--np, or its recipe's np) on this machine, more than one host holds "
            f"({MAX_SLOTS}): give fewer, or spread them over hosts with -H HOST:SLOTS,..."
        )
    placement: dict[str, list[int]] = {}
    left = np
    for host, slots in parse_hosts(hosts or f"{LOCAL}:{np}"):
        if left <= 0:
            break
        indices = placement[canonical_host(host)] = list(range(min(slots, left)))  # one spelling per host
        left -= len(indices)
    if left > 0:
        raise XoverError(f"job '{job}' needs {np} ranks but -H {hosts} has {np - left} slots")
    return placement


def unique_names(jobs: list[JobSpec]) -> list[JobSpec]:
    """Two copies of one recipe in a group get distinct job names (name, name#2: scripts.copy_name)."""
    seen: dict[str, int] = {}
    for job in jobs:
        seen[job.name] = seen.get(job.name, 0) + 1
        if seen[job.name] > 1:
            job.name = copy_name(job.name, seen[job.name])
    return jobs
