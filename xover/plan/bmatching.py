"""A maximum-weight b-matching on kinds with counts, solved exactly with linear and integer programs.

The problem: kinds s = 0..n-1, each with ``counts[s]`` copies, and a weight ``saving[s, t]`` for
pairing one copy of s with one of t (a kind may pair with itself). Choose how many pairs of each
two kinds, ``y[s, t] >= 0`` whole, to maximise ``sum saving[s, t] y[s, t]`` with every kind used at
most ``counts[s]`` times (a pair within a kind uses it twice).

``solve_b_matching`` answers with the pairs, their value, an upper bound on every b-matching (LP
duality, a certificate whatever the solver's tolerances did) and whether the answer is proven
optimal. It knows nothing of jobs: ``plan/grouping.py`` turns a round of merges into this
problem. scipy (HiGHS) solves the linear and integer programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SolverLimits:
    """How far the solver goes before it settles; every limit keeps the bound valid.

    * ``all_columns_limit``: past this many allowed pairs of kinds, the linear programs start from
      each kind's ``starting_partners`` best partners and take in the rest only when their reduced
      cost says they matter;
    * ``cut_rounds``: cutting-plane rounds (odd-set inequalities) before the integer program takes over;
    * ``pricing_rounds`` per LP, and ``entering_per_kind`` pairs let in per kind and round (the bound
      stays valid if the rounds run out: see ``dual_bound``); ``pricing_tolerance`` in units of the
      largest weight of one pair;
    * ``assignment_limit``: starting duals from an assignment on the copies themselves, up to this
      many copies (a dense matrix of that side); ``bellman_ford_steps``: longest-path steps for its duals;
    * ``milp_column_limit``, ``milp_time_limit_s``: the integer program's size and time limits; past
      either the answer is the best found so far and not proven optimal (the bound still holds).
    """

    all_columns_limit: int = 4000
    starting_partners: int = 4
    cut_rounds: int = 12
    pricing_rounds: int = 50
    pricing_tolerance: float = 1e-3
    entering_per_kind: int = 2
    assignment_limit: int = 4000
    bellman_ford_steps: int = 500
    milp_column_limit: int = 60_000
    milp_time_limit_s: float = 20.0


@dataclass(frozen=True)
class BMatching:
    """The answer: how many pairs of each two kinds, their total weight, an upper bound on the
    optimum, and whether the answer is proven optimal (up to the solver's tolerances)."""

    pair_counts: dict[tuple[int, int], int]  # (s, t) with s <= t -> how many pairs of kinds s and t
    value: float
    upper_bound: float
    proven_optimal: bool


def solve_b_matching(
    counts: np.ndarray, saving: np.ndarray, periods: np.ndarray, limits: SolverLimits = SolverLimits()
) -> BMatching:
    """Maximise sum saving[s, t] y[s, t] over whole y >= 0 with, for every kind s,
    sum over t != s of y[s, t] + 2 y[s, s] <= counts[s]. ``saving`` is symmetric, 0 where a pair is
    not allowed; ``periods[s]`` is kind s's own scale (what its weights are a share of), which ranks
    partners when the problem is too big for the assignment's duals (``_starting_columns``).

    1. The linear relaxation with column generation: the LP runs on a working set of pairs
       (chosen with ``_starting_columns``) and prices every other pair by its reduced cost,
       taking in the most negative, until its duals certify a bound next to its value.
    2. Odd-set cuts (Edmonds' blossom inequalities: a set S of kinds holding an odd number of
       copies has at most (|S| - 1) / 2 pairs inside) where the LP solution violates them; the
       whole bucket when it holds an odd number is the usual one (someone stays alone).
    3. The LP duals certify an upper bound. Any answer better than an incumbent uses only pairs
       whose reduced cost is at most (bound - incumbent); the integer program over the working
       set plus those pairs is therefore the optimum over all pairs.
    """
    upper = np.triu(saving > 0)
    s_all, t_all = np.nonzero(upper)
    keep = (s_all != t_all) | (counts[s_all] >= 2)
    s_all, t_all = s_all[keep], t_all[keep]
    if len(s_all) == 0:
        return BMatching({}, 0.0, 0.0, True)
    weight = saving[s_all, t_all]
    capacity = np.where(s_all == t_all, counts[s_all] // 2, np.minimum(counts[s_all], counts[t_all]))
    problem = _PairingProblem(counts, s_all, t_all, weight, capacity, limits.milp_time_limit_s)
    scale = float(weight.max())
    working = _starting_columns(counts, saving, periods, s_all, t_all, limits)
    cuts: list[np.ndarray] = []
    for cut_round in range(limits.cut_rounds + 1):
        for _ in range(limits.pricing_rounds):  # column generation: the LP on the working set, priced over every pair
            lp_x, kind_duals, cut_duals = problem.solve_lp(working, cuts)
            reduced = problem.reduced_costs(kind_duals, cuts, cut_duals)
            bound = problem.dual_bound(kind_duals, cuts, cut_duals, reduced)
            # The LP's duals are far from unique; stop once they certify a bound next to the LP value.
            if bound <= float(weight @ lp_x) + limits.pricing_tolerance * scale:
                break
            entering = np.nonzero(~working & (reduced < 0))[0]
            if len(entering) == 0:
                break
            # the most negative few: pricing everything that is negative at once swamps the LP
            most = max(limits.entering_per_kind * len(counts), 100)
            if len(entering) > most:
                entering = entering[np.argpartition(reduced[entering], most)[:most]]
            working[entering] = True
        new_cuts = problem.violated_odd_sets(lp_x, cuts) if cut_round < limits.cut_rounds else []
        if not new_cuts:
            break
        cuts.extend(new_cuts)

    incumbent, proven = problem.solve_integer(working, cuts, lp_x)
    value = float(weight @ incumbent)
    could_beat = reduced <= (bound - value) + 1e-7 * scale
    if (could_beat & ~working).any():
        if np.count_nonzero(could_beat | working) <= limits.milp_column_limit:
            larger, proven = problem.solve_integer(could_beat | working, cuts, None)
            if float(weight @ larger) >= value:
                incumbent, value = larger, float(weight @ larger)
        else:
            proven = False
    pair_counts = {(int(s_all[c]), int(t_all[c])): int(incumbent[c]) for c in np.nonzero(incumbent)[0]}
    return BMatching(pair_counts, value, bound, proven)


@dataclass
class _PairingProblem:
    """The b-matching of ``solve_b_matching`` as sparse linear constraints over pair columns."""

    counts: np.ndarray
    s: np.ndarray
    t: np.ndarray
    weight: np.ndarray
    capacity: np.ndarray
    milp_time_limit_s: float

    def _rows(self, columns: np.ndarray, cuts: list[np.ndarray]) -> Any:
        from scipy.sparse import coo_matrix, vstack

        chosen = np.nonzero(columns)[0]
        kinds = len(self.counts)
        # a pair of one kind puts 2 in that kind's row: coo sums duplicate entries
        entry_columns = np.concatenate([np.arange(len(chosen))] * 2)
        entry_rows = np.concatenate([self.s[chosen], self.t[chosen]])
        degree = coo_matrix((np.ones(2 * len(chosen)), (entry_rows, entry_columns)), shape=(kinds, len(chosen)))
        blocks = [degree]
        for inside in cuts:
            within = np.nonzero(inside[self.s[chosen]] & inside[self.t[chosen]])[0]
            blocks.append(
                coo_matrix(
                    (np.ones(len(within)), (np.zeros(len(within), dtype=np.int64), within)), shape=(1, len(chosen))
                )
            )
        limits = np.concatenate([self.counts.astype(float), [self.odd_set_limit(inside) for inside in cuts]])
        return chosen, vstack(blocks).tocsr(), limits

    def odd_set_limit(self, inside: np.ndarray) -> float:
        return float(int(self.counts[inside].sum()) // 2)

    def solve_lp(self, columns: np.ndarray, cuts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """LP on ``columns``: the solution over all pairs (0 outside), kind duals, cut duals."""
        from scipy.optimize import linprog

        chosen, rows, limits = self._rows(columns, cuts)
        # no upper bounds on the variables: the kind rows imply them, and their duals would escape the bound
        result = linprog(-self.weight[chosen], A_ub=rows, b_ub=limits, bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"the pairing LP failed: {result.message}")
        solution = np.zeros(len(self.weight))
        solution[chosen] = result.x
        duals = np.maximum(0.0, -np.asarray(result.ineqlin.marginals))
        kinds = len(self.counts)
        return solution, duals[:kinds], duals[kinds:]

    def reduced_costs(self, kind_duals: np.ndarray, cuts: list[np.ndarray], cut_duals: np.ndarray) -> np.ndarray:
        """Dual price of every pair minus its weight (< 0: the pair would improve the LP)."""
        price = kind_duals[self.s] + kind_duals[self.t]
        for inside, dual in zip(cuts, cut_duals):
            if dual > 0:
                price += dual * (inside[self.s] & inside[self.t])
        result: np.ndarray = price - self.weight
        return result

    def dual_bound(
        self, kind_duals: np.ndarray, cuts: list[np.ndarray], cut_duals: np.ndarray, reduced: np.ndarray
    ) -> float:
        """Weak duality with non-negative duals: sum of limits x duals, plus, for pairs the duals
        under-price, the shortfall times the most such pairs there can be: an upper bound on
        every b-matching whatever the LP solver's tolerances did."""
        limits = sum(self.odd_set_limit(inside) * dual for inside, dual in zip(cuts, cut_duals))
        shortfall = np.maximum(0.0, -reduced) @ self.capacity
        return float(self.counts @ kind_duals + limits + shortfall)

    def violated_odd_sets(self, solution: np.ndarray, cuts: list[np.ndarray]) -> list[np.ndarray]:
        """Odd sets whose blossom inequality the LP solution breaks: the whole bucket, single kinds
        (pairs within a kind of odd count), and the connected pieces of the solution's support and
        of its fractional part."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        kinds = len(self.counts)
        candidates = [np.ones(kinds, dtype=bool)]
        for selected in (solution > 1e-9, np.abs(solution - np.round(solution)) > 1e-9):
            edges = np.nonzero(selected)[0]
            if len(edges) == 0:
                continue
            for kind in self.s[edges[self.s[edges] == self.t[edges]]]:
                alone = np.zeros(kinds, dtype=bool)
                alone[kind] = True
                candidates.append(alone)
            graph = coo_matrix((np.ones(len(edges)), (self.s[edges], self.t[edges])), shape=(kinds, kinds))
            _, labels = connected_components(graph, directed=False)
            touched = np.zeros(kinds, dtype=bool)
            touched[self.s[edges]] = touched[self.t[edges]] = True
            for label in np.unique(labels[touched]):
                candidates.append(labels == label)
        known = {inside.tobytes() for inside in cuts}
        violated = []
        for inside in candidates:
            if int(self.counts[inside].sum()) % 2 == 0 or inside.tobytes() in known:
                continue
            within = inside[self.s] & inside[self.t]
            if solution[within].sum() > self.odd_set_limit(inside) + 1e-6:
                violated.append(inside)
                known.add(inside.tobytes())
        return violated

    def solve_integer(
        self, columns: np.ndarray, cuts: list[np.ndarray], lp_solution: np.ndarray | None
    ) -> tuple[np.ndarray, bool]:
        """Best whole solution on ``columns`` (HiGHS branch and cut); (pairs per column, proven optimal).
        The rounded-down LP solution is feasible too and is kept if the solver returns nothing better."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        chosen, rows, limits = self._rows(columns, cuts)
        result = milp(
            -self.weight[chosen],
            integrality=np.ones(len(chosen)),
            bounds=Bounds(0, self.capacity[chosen].astype(float)),
            constraints=LinearConstraint(rows, -np.inf, limits),
            options={"mip_rel_gap": 0.0, "time_limit": self.milp_time_limit_s},
        )
        fallback = np.zeros(len(self.weight), dtype=np.int64)
        if lp_solution is not None:
            fallback = np.floor(lp_solution + 1e-9).astype(np.int64)
        if result.x is None:
            return fallback, False
        solution = np.zeros(len(self.weight), dtype=np.int64)
        solution[chosen] = np.round(result.x).astype(np.int64)
        if not self.feasible(solution):
            return fallback, False
        if result.status == 0:
            return solution, True
        return (fallback if self.weight @ fallback > self.weight @ solution else solution), False

    def feasible(self, solution: np.ndarray) -> bool:
        used = np.bincount(self.s, weights=solution, minlength=len(self.counts))
        used += np.bincount(self.t, weights=solution, minlength=len(self.counts))
        return bool(np.all(solution >= 0) and np.all(solution <= self.capacity) and np.all(used <= self.counts))


def _starting_columns(
    counts: np.ndarray,
    saving: np.ndarray,
    periods: np.ndarray,
    s_all: np.ndarray,
    t_all: np.ndarray,
    limits: SolverLimits,
) -> np.ndarray:
    """All pairs when there are few. Else each kind's partners of smallest reduced cost under the
    optimal duals of the LP without odd-set cuts (``assignment_duals``), or, for buckets too big
    for that, each kind's best partners by time saved and by the fraction of its time saved."""
    if len(s_all) <= limits.all_columns_limit:
        return np.ones(len(s_all), dtype=bool)
    kinds = len(counts)
    partners = min(limits.starting_partners, kinds - 1)
    wanted = np.zeros((kinds, kinds), dtype=bool)
    if counts.sum() <= limits.assignment_limit:
        duals = assignment_duals(counts, saving, limits.bellman_ford_steps)
        reduced = np.where(saving > 0, duals[:, None] + duals[None, :] - saving, np.inf)
        best = np.argpartition(reduced, partners, axis=1)[:, : partners + 1]
        wanted[np.repeat(np.arange(kinds), best.shape[1]), best.ravel()] = True
        wanted |= reduced <= 1e-9 * max(1.0, float(saving.max()))
    else:
        fraction = saving / (periods[:, None] + periods[None, :])
        for score in (saving, fraction):
            best = np.argpartition(-score, partners, axis=1)[:, : partners + 1]
            wanted[np.repeat(np.arange(kinds), best.shape[1]), best.ravel()] = True
    wanted |= wanted.T
    chosen: np.ndarray = wanted[s_all, t_all]
    return chosen


def assignment_duals(
    counts: np.ndarray, saving: np.ndarray, bellman_ford_steps: int = SolverLimits.bellman_ford_steps
) -> np.ndarray:
    """Optimal duals per kind of the fractional b-matching LP (no odd-set cuts).

    On groups, that LP's optimum is half the maximum-weight assignment on the bipartite double
    cover (a job "assigned" to itself stays alone): scipy's ``linear_sum_assignment`` solves it
    but gives no duals, so column potentials come from longest paths in the assignment's
    exchange graph (Bellman-Ford, one numpy pass per step), row potentials from them, and the
    mean over the copies of a kind is an optimal dual of the kind-level LP.
    """
    from scipy.optimize import linear_sum_assignment

    kind_of = np.repeat(np.arange(len(counts)), counts)
    weight = saving[kind_of][:, kind_of]
    np.fill_diagonal(weight, 0.0)
    # The same optimum, found sooner (2.4 s instead of 3.9 s on 2,000 random jobs): rows and columns
    # in the order of their best saving, and costs reduced by row and column as in Jonker-Volgenant.
    order = np.argsort(-weight.max(axis=1), kind="stable")
    permuted = weight[order][:, order]
    cost = permuted.max(axis=1, keepdims=True) - permuted
    cost -= cost.min(axis=0, keepdims=True)
    _, assigned_in_order = linear_sum_assignment(cost)
    assigned = np.empty_like(order)
    assigned[order] = order[assigned_in_order]
    # v[j] >= v[assigned[i]] + weight[i, j] - weight[i, assigned[i]]: the assignment stays optimal
    exchange = weight - weight[np.arange(len(kind_of)), assigned][:, None]
    column = np.zeros(len(kind_of))
    tolerance = 1e-12 * max(1.0, float(weight.max()))
    for _ in range(bellman_ford_steps):
        raised = np.maximum(column, (column[assigned][:, None] + exchange).max(axis=0))
        if np.all(raised <= column + tolerance):
            break
        column = raised
    row = (weight - column[None, :]).max(axis=1)
    per_job = (row + column) / 2
    share: np.ndarray = np.bincount(kind_of, weights=per_job) / counts
    return share
