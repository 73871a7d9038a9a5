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
the simulation (`predict.py`); the fluid bound only decides who is grouped - or, in a plan that learns, what
the jobs measured together before (`XoverModel.grouping_period_ms`: the period of the best way measured).

``matching`` is exact per round: clusters run dozens of copies of the same model, so
groups are collapsed into kinds with counts and each round is a maximum-weight
b-matching on kinds, solved with linear programming (certified upper bound) and an
integer program over the only pairs that could beat the answer
(``bmatching.solve_b_matching``). 2,000 jobs take seconds; ``matching_with_bounds`` returns the
bound of each round with the groups.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bmatching import SolverLimits, assignment_duals, solve_b_matching
from .model import JobProfile, fluid_gain

Groups = list[list[JobProfile]]

# The earlier heuristic (``candidate_graph_matching``): buckets up to this many groups
# get the complete compatibility graph; larger ones keep each group's best candidates
# only (networkx's blossom algorithm is pure Python and cubic in the node count).
DENSE_GRAPH_LIMIT = 128
CANDIDATES_PER_GROUP = 12

# Float sums of memory may be off by rounding; a group that fits "exactly" fits.
_MEMORY_TOLERANCE_GB = 1e-9


@dataclass(frozen=True)
class GroupingRules:
    """Constraints shared by all grouping algorithms. ``period_ms``: a group's period under another
    throughput model (``throughput.py``; a single job's too); None: the fluid bound, as `xover plan`."""

    max_group: int = 2
    device_memory_gb: float | None = None
    min_gain_margin: float = 0.05
    period_ms: Callable[[Sequence[JobProfile]], float] | None = None
    # what else tells two jobs' periods apart under that model (a plan that learns: each job's identity, which
    # its measurements are keyed by), so that jobs of equal figures are not taken for one kind
    identity: Callable[[JobProfile], Any] | None = None

    def period(self, jobs: Sequence[JobProfile]) -> float:
        """The period of `jobs` together under these rules' model."""
        if self.period_ms is not None:
            return self.period_ms(jobs)
        return jobs[0].solo_ms if len(jobs) == 1 else group_period_ms(jobs)


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
    def of(cls, job: JobProfile, index: int, rules: GroupingRules | None = None) -> _Group:
        period = job.solo_ms if rules is None or rules.period_ms is None else rules.period([job])
        return cls([job], job.devices, job.memory_gb, period, index)

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
    together = rules.period(a.members + b.members)
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


@dataclass(frozen=True)
class RoundBound:
    """One round of merges in ``matching``: the time per period its merges save, and an upper bound
    on what any set of merges allowed in that round could save (LP duality, so it is a certificate:
    ``saved_ms / upper_bound_ms`` is a lower bound on the fraction of the round's optimum reached).
    ``proven_optimal``: the mixed-integer program over every merge that could still beat the answer
    was solved to optimality (up to the solver's tolerances), so the round's merges are optimal."""

    saved_ms: float
    upper_bound_ms: float
    proven_optimal: bool

    @property
    def fraction(self) -> float:
        """Saved over the upper bound (1.0 when nothing could be saved)."""
        return self.saved_ms / self.upper_bound_ms if self.upper_bound_ms > 0 else 1.0


@dataclass(frozen=True)
class MatchingResult:
    """The groups ``matching`` forms, and one ``RoundBound`` per round that merged something."""

    groups: Groups
    rounds: list[RoundBound]


def matching(
    jobs: Sequence[JobProfile],
    rules: GroupingRules | None = None,
    *,
    dense_graph_limit: int | None = None,
    candidates_per_group: int = CANDIDATES_PER_GROUP,
) -> Groups:
    """Maximum-weight matching of groups, repeated in rounds (see ``matching_with_bounds``).

    Giving ``dense_graph_limit`` selects the earlier candidate-graph heuristic instead
    (``candidate_graph_matching``), kept to compare against.
    """
    if dense_graph_limit is not None:
        return candidate_graph_matching(
            jobs, rules, dense_graph_limit=dense_graph_limit, candidates_per_group=candidates_per_group
        )
    return matching_with_bounds(jobs, rules).groups


def matching_with_bounds(jobs: Sequence[JobProfile], rules: GroupingRules | None = None) -> MatchingResult:
    """Maximum-weight matching on the compatibility graph, repeated in rounds, with a bound per round.

    Edge weight = time saved per period by the merge, ``P(A) + P(B) - P(A u B)``, so a
    matching's weight is exactly the increase of ``plan_objective``. Round 1 pairs single
    jobs; it is optimal for max_group=2. Later rounds treat groups as nodes and merge pairs
    of groups under the same rules, until no allowed merge is left.

    Each round is solved per device-count bucket on *kinds*: groups whose jobs are identical
    but for name and iterations give identical weights, so a trace of dozens of copies of a
    few models becomes a b-matching on a handful of kinds with counts (``_best_merges``).
    """
    rules = rules or GroupingRules()
    groups = [_Group.of(job, index, rules) for index, job in enumerate(jobs)]
    rounds: list[RoundBound] = []
    while True:
        next_groups: list[_Group] = []
        saved = bound = 0.0
        proven = True
        for bucket in _buckets_by_devices(groups):
            merges = _best_merges(bucket, rules)
            merged, saved_here = _apply_merges(bucket, merges.pairs, rules)
            next_groups.extend(merged)
            saved += saved_here
            bound += merges.upper_bound_ms
            proven = proven and merges.proven_optimal
        groups = next_groups
        if saved <= 0:
            break
        rounds.append(RoundBound(saved_ms=saved, upper_bound_ms=bound, proven_optimal=proven))
    groups.sort(key=lambda group: group.first_index)
    return MatchingResult([group.members for group in groups], rounds)


def _buckets_by_devices(groups: list[_Group]) -> list[list[_Group]]:
    buckets: dict[int, list[_Group]] = {}
    for group in groups:
        buckets.setdefault(group.devices, []).append(group)
    return list(buckets.values())


def _apply_merges(
    bucket: list[_Group], pairs: list[tuple[int, int]], rules: GroupingRules
) -> tuple[list[_Group], float]:
    """Merge each pair (checked once more with the scalar rules); the groups left and the time saved."""
    absorbed: set[int] = set()
    saved = 0.0
    for left, right in pairs:
        keep, drop = sorted((left, right))
        merged = _merge(bucket[keep], bucket[drop], rules)
        if merged is None:  # only at a float tie with the vectorised weights; never break a rule
            continue
        bucket[keep].absorb(bucket[drop], merged[1])
        absorbed.add(drop)
        saved += merged[0]
    return [group for index, group in enumerate(bucket) if index not in absorbed], saved


# ---------------------------------------------------------------- one round, exactly

# The b-matching solver's limits (``bmatching.SolverLimits``), read at every round, so that
# tests/unit/test_grouping_scale.py can drive each of the solver's paths by setting them here.
ALL_COLUMNS_LIMIT = SolverLimits.all_columns_limit
STARTING_PARTNERS = SolverLimits.starting_partners
ENTERING_PER_KIND = SolverLimits.entering_per_kind
ASSIGNMENT_LIMIT = SolverLimits.assignment_limit
MILP_COLUMN_LIMIT = SolverLimits.milp_column_limit
_assignment_duals = assignment_duals  # the solver's starting duals, checked by the tests against an LP


def _solver_limits() -> SolverLimits:
    return SolverLimits(
        all_columns_limit=ALL_COLUMNS_LIMIT,
        starting_partners=STARTING_PARTNERS,
        entering_per_kind=ENTERING_PER_KIND,
        assignment_limit=ASSIGNMENT_LIMIT,
        milp_column_limit=MILP_COLUMN_LIMIT,
    )


@dataclass(frozen=True)
class _BucketMerges:
    pairs: list[tuple[int, int]]
    upper_bound_ms: float
    proven_optimal: bool


def _group_kind(group: _Group, rules: GroupingRules | None = None) -> tuple[Any, ...]:
    """Everything the rules and the fluid bound read of a group's jobs, and nothing else (not the
    names, not the iterations): two groups of one kind merge with anything in the same way. Under
    another model (``rules.period_ms``), every time of the job and its period alone (which that model
    may take from elsewhere) are read too."""
    if rules is not None and rules.period_ms is not None:
        return tuple(sorted(_job_kind(job) + _model_kind(job, rules) for job in group.members))
    return tuple(sorted(_job_kind(job) for job in group.members))


def _model_kind(job: JobProfile, rules: GroupingRules) -> tuple[Any, ...]:
    identity = rules.identity(job) if rules.identity is not None else None
    return (
        job.data_ms,
        job.compute_ms,
        job.comm_ms,
        job.link_ms,
        job.comm_cpu,
        job.interference,
        rules.period([job]),
        identity,
    )


def _job_kind(job: JobProfile) -> tuple[Any, ...]:
    lowest_speed = 1.0 / job.max_slowdown if job.max_slowdown else 0.0
    return (job.devices, job.memory_gb, job.solo_ms, job.device_share, job.link_share, lowest_speed)


def _best_merges(bucket: list[_Group], rules: GroupingRules) -> _BucketMerges:
    """The set of merges saving the most time per period in one device-count bucket.

    Groups are collapsed into kinds with counts; the merges form a b-matching on kinds
    (a kind may pair with itself), solved by ``bmatching.solve_b_matching``; the kind-level answer
    is expanded back to groups, longest-running with longest-running.
    """
    kinds: dict[tuple[Any, ...], list[int]] = {}
    for index, group in enumerate(bucket):
        if len(group.members) < rules.max_group:
            kinds.setdefault(_group_kind(group, rules), []).append(index)
    if not kinds:
        return _BucketMerges([], 0.0, True)
    members = list(kinds.values())
    counts = np.array([len(indices) for indices in members], dtype=np.int64)
    representatives = [bucket[indices[0]] for indices in members]
    saving = _kind_savings(representatives, counts, rules)
    periods = np.array([group.period_ms for group in representatives])
    solution = solve_b_matching(counts, saving, periods, _solver_limits())
    # Copies differ only in their iterations: pair long runs with long runs, so partners finish together.
    queues = [deque(sorted(indices, key=lambda index: (-_work_ms(bucket[index]), index))) for indices in members]
    pairs: list[tuple[int, int]] = []
    for (s, t), times in sorted(solution.pair_counts.items(), key=lambda item: (-saving[item[0]], item[0])):
        for _ in range(times):
            pairs.append((queues[s].popleft(), queues[t].popleft()))
    return _BucketMerges(pairs, solution.upper_bound, solution.proven_optimal)


def _work_ms(group: _Group) -> float:
    return max(job.iterations * job.solo_ms for job in group.members)


def _kind_savings(representatives: list[_Group], counts: np.ndarray, rules: GroupingRules) -> np.ndarray:
    """saving[s, t]: time per period saved by merging a group of kind s with one of kind t; 0 where
    the rules forbid it (and on the diagonal for a kind with a single group)."""
    if rules.period_ms is None and all(len(group.members) == 1 for group in representatives):
        saving = _single_job_savings([group.members[0] for group in representatives], rules)
    else:
        size = len(representatives)
        saving = np.zeros((size, size))
        for s in range(size):
            for t in range(s, size):
                merged = _merge(representatives[s], representatives[t], rules)
                if merged is not None:
                    saving[s, t] = saving[t, s] = merged[0]
    saving[np.diag_indices_from(saving)] *= counts >= 2
    return saving


# Entries of the pair matrix computed at once (bounds the temporaries of the vectorised fluid bound).
_BLOCK_ENTRIES = 1 << 19


def _single_job_savings(jobs: list[JobProfile], rules: GroupingRules) -> np.ndarray:
    """``_merge`` of every two single jobs at once (same devices assumed): the same arithmetic as
    ``model._pair_fluid_speeds`` and ``_merge``, operation for operation, on numpy arrays."""
    solo = np.array([job.solo_ms for job in jobs])
    device = np.array([job.device_share for job in jobs])
    link = np.array([job.link_share for job in jobs])
    lowest = np.array([1.0 / job.max_slowdown if job.max_slowdown else 0.0 for job in jobs])
    memory = np.array([job.memory_gb for job in jobs])
    size = len(jobs)
    saving = np.zeros((size, size))
    block_rows = max(1, _BLOCK_ENTRIES // max(1, size))
    for start in range(0, size, block_rows):
        # from the diagonal on: the upper triangle is computed, the lower one is its mirror
        rows, columns = slice(start, start + block_rows), slice(start, None)
        gain = _pair_fluid_gain(
            (device[rows, None], link[rows, None], lowest[rows, None]),
            (device[None, columns], link[None, columns], lowest[None, columns]),
        )
        apart = solo[rows, None] + solo[None, columns]
        with np.errstate(divide="ignore"):
            together = np.where(gain > 0, apart / np.where(gain > 0, gain, 1.0), np.inf)
        allowed = apart > (1.0 + rules.min_gain_margin) * together
        if rules.device_memory_gb is not None:
            allowed &= memory[rows, None] + memory[None, columns] <= rules.device_memory_gb + _MEMORY_TOLERANCE_GB
        saving[rows, columns] = np.where(allowed, apart - together, 0.0)
        diagonal = saving[rows, rows]
        saving[rows, rows] = np.triu(diagonal) + np.triu(diagonal, 1).T
        saving[rows, :start] = saving[:start, rows].T
    return saving


def _pair_fluid_gain(a: tuple[Any, ...], b: tuple[Any, ...]) -> np.ndarray:
    """Fluid gain of pairs (a_i, b_j): the best vertex of each pair's polygon, found as
    ``model._pair_fluid_speeds`` finds it (same lines, same order, same tolerances); 0 where the
    protections cannot be met."""
    device_a, link_a, low_a = a
    device_b, link_b, low_b = b
    lines = [
        (1.0, 0.0, low_a),
        (1.0, 0.0, 1.0),
        (0.0, 1.0, low_b),
        (0.0, 1.0, 1.0),
        (device_a, device_b, 1.0),
        (link_a, link_b, 1.0),
    ]
    shape = np.broadcast_shapes(np.shape(device_a), np.shape(device_b))
    best = np.full(shape, -np.inf)
    found = np.zeros(shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i, (a1, b1, c1) in enumerate(lines):
            for a2, b2, c2 in lines[i + 1 :]:
                det = a1 * b2 - a2 * b1
                x, y = (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det
                feasible = (
                    (np.abs(det) >= 1e-12)
                    & (low_a - 1e-9 <= x)
                    & (x <= 1 + 1e-9)
                    & (low_b - 1e-9 <= y)
                    & (y <= 1 + 1e-9)
                    & (device_a * x + device_b * y <= 1 + 1e-9)
                    & (link_a * x + link_b * y <= 1 + 1e-9)
                )
                better = feasible & (~found | (x + y > best + 1e-12))
                clipped = np.minimum(1.0, np.maximum(0.0, x)) + np.minimum(1.0, np.maximum(0.0, y))
                best = np.where(better, clipped, best)
                found |= better
    return np.where(found, best, 0.0)


# ---------------------------------------------------------------- the earlier heuristic


def candidate_graph_matching(
    jobs: Sequence[JobProfile],
    rules: GroupingRules | None = None,
    *,
    dense_graph_limit: int = DENSE_GRAPH_LIMIT,
    candidates_per_group: int = CANDIDATES_PER_GROUP,
) -> Groups:
    """The earlier matching, kept to compare against: networkx's blossom algorithm per round on the
    complete graph for buckets of up to ``dense_graph_limit`` groups, and above that on a sparse
    graph where each group keeps its ``candidates_per_group`` most complementary partners. On
    traces of many copies of a few models those partners are all copies of one kind, and about 3%
    of the optimum is lost."""
    rules = rules or GroupingRules()
    groups = [_Group.of(job, index, rules) for index, job in enumerate(jobs)]
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


def _match_round(
    bucket: list[_Group], rules: GroupingRules, dense_graph_limit: int, candidates_per_group: int
) -> tuple[list[_Group], bool]:
    """One round of matching within a device-count bucket; returns the groups after merging."""
    mergeable = [index for index, group in enumerate(bucket) if len(group.members) < rules.max_group]
    dense = len(mergeable) <= dense_graph_limit
    edges = _candidate_edges(bucket, mergeable, rules, dense=dense, keep=candidates_per_group)
    if not edges:
        return bucket, False
    import networkx as nx  # a quarter second to import, and only matching needs it

    graph = nx.Graph()
    graph.add_weighted_edges_from(edges)
    absorbed: set[int] = set()
    for left, right in nx.max_weight_matching(graph):
        keep, drop = sorted((left, right))
        bucket[keep].absorb(bucket[drop], rules.period(bucket[keep].members + bucket[drop].members))
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
        single = _Group.of(jobs[index], index, rules)
        candidates = open_groups.setdefault(single.devices, [])
        target = _first_fit(candidates, single, rules)
        if target is None:
            groups.append(single)
            if rules.max_group > 1:
                candidates.append(single)
            continue
        candidates[target].absorb(single, rules.period(candidates[target].members + single.members))
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
