"""Split jobs into groups that share devices and take turns.

Rules every algorithm follows:

* Jobs in one group need the same number of devices. A group runs on one set of
  devices and each job is data-parallel over all of them; a 2-device job next to
  a 4-device job would leave two devices without a turn-taking partner, and
  xover's token is per group, not per device.
* The memory of all jobs in a group fits on a device (``device_memory_gb``,
  None = unlimited), since every device holds one replica of each job.
* At most ``max_group`` jobs per group.
* A group's period ``P(G)`` is the time it needs for one iteration of each of its
  jobs at the fluid bound (``model.fluid_speeds``: the devices, the link, and each
  job's max_slowdown): ``sum of solo times / fluid gain``; a job alone has
  ``P = c + m``. A group whose protections cannot be met has no period: never formed.
* Merging two groups A and B (a single job is a group of one) must pay off by a
  margin: ``(P(A) + P(B)) / P(A u B) > 1 + min_gain_margin``, i.e. running them
  together beats running A's period and then B's period one after another. For
  two single jobs this is exactly ``fluid gain > 1 + margin``. Co-locating has costs
  the model does not see (interference, memory pressure), so small wins are skipped.

Objective (``plan_objective``): total time saved per period,
``sum over groups of (sum of solo iteration times - P(G))``. Every merge the
algorithms make saves ``P(A) + P(B) - P(A u B) > 0``, so no algorithm does worse
than ``none``. The plan then predicts each group under the run's turn policy with
the simulation (`predict.py`); the fluid bound only decides who is grouped.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from .model import JobProfile, fluid_gain

Groups = list[list[JobProfile]]

# Buckets up to this many groups get the complete compatibility graph, so the
# matching is exactly optimal; larger ones keep each group's best candidates only
# (networkx's blossom algorithm is pure Python and cubic in the node count).
DENSE_GRAPH_LIMIT = 128
CANDIDATES_PER_GROUP = 12

# Float sums of memory may be off by rounding; a group that fits "exactly" fits.
_MEMORY_TOLERANCE_GB = 1e-9


@dataclass(frozen=True)
class GroupingRules:
    """Constraints shared by all grouping algorithms."""

    max_group: int = 2
    device_memory_gb: float | None = None
    min_gain_margin: float = 0.05


def group_period_ms(jobs: Sequence[JobProfile]) -> float:
    """Time for one iteration of each job at the fluid bound (inf if its protections cannot be met)."""
    gain = fluid_gain(jobs)
    return sum(job.solo_ms for job in jobs) / gain if gain > 0 else math.inf


@dataclass(slots=True)
class _Group:
    """A group and its period (computed once per group)."""

    members: list[JobProfile]
    devices: int
    memory_gb: float
    period_ms: float
    first_index: int = field(default=0)

    @classmethod
    def of(cls, job: JobProfile, index: int) -> _Group:
        return cls([job], job.devices, job.memory_gb, job.solo_ms, index)

    def absorb(self, other: _Group, period_ms: float) -> None:
        self.members.extend(other.members)
        self.memory_gb += other.memory_gb
        self.period_ms = period_ms
        self.first_index = min(self.first_index, other.first_index)


def _merge(a: _Group, b: _Group, rules: GroupingRules) -> tuple[float, float] | None:
    """(time per period saved, merged period) of merging a and b, or None if not allowed."""
    if a.devices != b.devices or len(a.members) + len(b.members) > rules.max_group:
        return None
    limit = rules.device_memory_gb
    if limit is not None and a.memory_gb + b.memory_gb > limit + _MEMORY_TOLERANCE_GB:
        return None
    apart = a.period_ms + b.period_ms
    together = group_period_ms(a.members + b.members)
    if apart <= (1.0 + rules.min_gain_margin) * together:
        return None
    return apart - together, together


def _merge_benefit(a: _Group, b: _Group, rules: GroupingRules) -> float | None:
    """Time per period saved by merging a and b, or None if the merge is not allowed."""
    merged = _merge(a, b, rules)
    return None if merged is None else merged[0]


def time_saved_ms(jobs: Sequence[JobProfile]) -> float:
    """Time per period saved by grouping the jobs instead of running them one after another."""
    return sum(job.solo_ms for job in jobs) - group_period_ms(jobs)


def plan_objective(groups: Sequence[Sequence[JobProfile]]) -> float:
    """Total time saved per period over running every job alone (ms, >= 0)."""
    return sum(time_saved_ms(group) for group in groups)


def none(jobs: Sequence[JobProfile], rules: GroupingRules | None = None) -> Groups:
    """Every job alone (the baseline)."""
    return [[job] for job in jobs]


def matching(
    jobs: Sequence[JobProfile],
    rules: GroupingRules | None = None,
    *,
    dense_graph_limit: int = DENSE_GRAPH_LIMIT,
    candidates_per_group: int = CANDIDATES_PER_GROUP,
) -> Groups:
    """Maximum-weight matching on the compatibility graph, repeated in rounds.

    Edge weight = time saved per period by the merge, ``P(A) + P(B) - P(A u B)``,
    so a matching's weight is exactly the increase of ``plan_objective``. Round 1
    pairs single jobs (optimal for max_group=2 when each device-count bucket has
    at most ``dense_graph_limit`` jobs). Later rounds treat groups as nodes and
    merge pairs of groups under the same rules, until no allowed merge is left.
    """
    rules = rules or GroupingRules()
    groups = [_Group.of(job, index) for index, job in enumerate(jobs)]
    while True:
        merged_any = False
        next_groups: list[_Group] = []
        for bucket in _buckets_by_devices(groups):
            matched, merged = _match_round(bucket, rules, dense_graph_limit, candidates_per_group)
            next_groups.extend(matched)
            merged_any = merged_any or merged
        groups = next_groups
        if not merged_any:
            break
    groups.sort(key=lambda group: group.first_index)
    return [group.members for group in groups]


def _buckets_by_devices(groups: list[_Group]) -> list[list[_Group]]:
    buckets: dict[int, list[_Group]] = {}
    for group in groups:
        buckets.setdefault(group.devices, []).append(group)
    return list(buckets.values())


def _match_round(
    bucket: list[_Group], rules: GroupingRules, dense_graph_limit: int, candidates_per_group: int
) -> tuple[list[_Group], bool]:
    """One round of matching within a device-count bucket; returns the groups after merging."""
    mergeable = [index for index, group in enumerate(bucket) if len(group.members) < rules.max_group]
    dense = len(mergeable) <= dense_graph_limit
    edges = _candidate_edges(bucket, mergeable, rules, dense=dense, keep=candidates_per_group)
    if not edges:
        return bucket, False
    graph = nx.Graph()
    graph.add_weighted_edges_from(edges)
    absorbed: set[int] = set()
    for left, right in nx.max_weight_matching(graph):
        keep, drop = sorted((left, right))
        bucket[keep].absorb(bucket[drop], group_period_ms(bucket[keep].members + bucket[drop].members))
        absorbed.add(drop)
    return [group for index, group in enumerate(bucket) if index not in absorbed], bool(absorbed)


def _candidate_edges(
    bucket: list[_Group], mergeable: list[int], rules: GroupingRules, *, dense: bool, keep: int
) -> list[tuple[int, int, float]]:
    """Allowed merges as (i, j, benefit): all of them, or each group's ``keep`` most complementary.

    Complementarity is the merge gain (P(A) + P(B)) / P(A u B), not the benefit in ms:
    ranking by ms makes every small job list the same few big partners (its benefit
    is capped by its own period, so they all tie), and the sparse graph then misses
    the small-with-small pairs the optimum uses.
    """
    edges: list[tuple[int, int, float]] = []
    best: dict[int, list[tuple[float, float, int]]] = {index: [] for index in mergeable}
    for position, i in enumerate(mergeable):
        for j in mergeable[position + 1 :]:
            benefit = _merge_benefit(bucket[i], bucket[j], rules)
            if benefit is None:
                continue
            if dense:
                edges.append((i, j, benefit))
                continue
            apart = bucket[i].period_ms + bucket[j].period_ms
            gain = apart / (apart - benefit)
            best[i].append((gain, benefit, j))
            best[j].append((gain, benefit, i))
    if dense:
        return edges
    kept: dict[tuple[int, int], float] = {}
    for i, candidates in best.items():
        for _, benefit, j in heapq.nlargest(keep, candidates):
            kept[(min(i, j), max(i, j))] = benefit
    return [(i, j, benefit) for (i, j), benefit in kept.items()]


def ffd(jobs: Sequence[JobProfile], rules: GroupingRules | None = None) -> Groups:
    """First-fit decreasing on compute fraction.

    Compute-heavy jobs come first and open groups; communication-heavy jobs come
    later and fill them. Each job joins the first open group (same devices, room
    left, memory fits, merge pays off by the margin) or opens a new one.
    """
    rules = rules or GroupingRules()
    order = sorted(range(len(jobs)), key=lambda index: -jobs[index].compute_fraction)
    groups: list[_Group] = []
    open_groups: dict[int, list[_Group]] = {}
    for index in order:
        single = _Group.of(jobs[index], index)
        candidates = open_groups.setdefault(single.devices, [])
        target = _first_fit(candidates, single, rules)
        if target is None:
            groups.append(single)
            if rules.max_group > 1:
                candidates.append(single)
            continue
        candidates[target].absorb(single, group_period_ms(candidates[target].members + single.members))
        if len(candidates[target].members) >= rules.max_group:
            del candidates[target]
    return [group.members for group in groups]


def _first_fit(candidates: list[_Group], single: _Group, rules: GroupingRules) -> int | None:
    for position, group in enumerate(candidates):
        if _merge_benefit(group, single, rules) is not None:
            return position
    return None


ALGORITHMS: dict[str, Callable[[Sequence[JobProfile], GroupingRules | None], Groups]] = {
    "matching": matching,
    "ffd": ffd,
    "none": none,
}
