"""Throughput at matched recall: each design's budget raised until it reaches a
target recall of the oracle's top-k.

Tokens/s at equal budgets rewards a design that selects the wrong entries
cheaply.  Here every design spends ``budget_scale`` x the oracle's budget
(:meth:`sim.policies.kvdesign.Layout.step_budget`; the oracle's own top-k
stays unscaled) and the search finds the smallest scale on the grid
``match_step, 2 x match_step, ...`` whose mean recall reaches the target.  The
grid ends at :func:`full_scale`, the scale where every step's budget is every
visible entry: a design whose recall stays below the target even there is
*unreachable* and reported with the recall it reached.

The search replays the design's selection only (a built design is copied and
stepped again for each candidate scale, :mod:`sim.scenarios.swarm`); nothing
is timed, and the variant is simulated once, at the scale found.  Recall is
taken to grow with the budget (a larger budget adds entries by the same
ranking), so galloping up from scale 1 then bisecting finds the smallest
reaching grid point in about ``2 log2(grid size)`` replays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from hwprofiles import HardwareProfile
from sim.config import SwarmParams
from sim.policies.kvdesign import Layout
from sim.scenarios.swarm import SwarmPlan, build_lanes, plan_at, replay_lane


@dataclass(frozen=True)
class Match:
    """The outcome of one matched-recall search.

    ``scale`` is the smallest grid scale whose recall reaches ``target`` or, when
    ``reached`` is False, the largest scale tried (every entry visible), with
    the ``recall`` it gave.  ``evaluations`` counts selection replays.
    """

    target: float
    scale: float
    recall: float
    reached: bool
    evaluations: int
    search_s: float = 0.0  # wall time of the search (replays only, no simulation)


def full_scale(layout: Layout, visibles: Iterable[int]) -> float:
    """The smallest scale at which the budget covers every visible entry at each
    of these steps (``visible / unscaled budget``, the largest over the steps)."""
    base = replace(layout, budget_scale=1.0)
    return max(v / base.step_budget(v) for v in visibles)


def scale_grid(step: float, top: float) -> np.ndarray:
    """Candidate scales: ``step, 2 step, ...`` below ``top``, then ``top`` itself."""
    n = math.ceil(top / step - 1e-9)
    grid = step * np.arange(1, n + 1, dtype=np.float64)
    grid[-1] = top
    return grid


def smallest_reaching(
    recall_at: Callable[[float], float], grid: np.ndarray, target: float, start: float = 1.0
) -> Match:
    """The first grid scale whose ``recall_at`` is ``>= target``, ``recall_at``
    taken as non-decreasing along ``grid``.

    From the last grid point at or below ``start`` (1.0: equal budgets) the
    index doubles (on the uniform grid, the scale doubles) until the target is
    reached, or the grid's end is not: unreachable, with the recall there.
    Then bisection inside that bracket.  Replays at large scales, the costly
    ones, happen only when needed; at most ``2 log2(len(grid)) + 2`` replays.
    """
    seen: dict[int, float] = {}

    def at(i: int) -> float:
        if i not in seen:
            seen[i] = float(recall_at(float(grid[i])))
        return seen[i]

    last = len(grid) - 1
    lo, hi = -1, min(max(int(np.searchsorted(grid, start, side="right")) - 1, 0), last)
    while at(hi) < target:  # recall below target at lo (-1: a virtual scale 0)
        if hi == last:
            return Match(target, float(grid[hi]), seen[hi], False, len(seen))
        lo, hi = hi, min(2 * hi + 1, last)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return Match(target, float(grid[hi]), at(hi), True, len(seen))


def plan_matched(
    p: SwarmParams, profile: HardwareProfile, seed: int, progress=None
) -> tuple[SwarmPlan, SwarmPlan, Match]:
    """The plan at ``p.budget_scale`` (equal budgets by default), the plan at the
    smallest scale reaching ``p.match_recall`` (or the largest tried when it is
    unreachable) and the search's outcome; every lane's design is built once."""
    ssds, layout, built = build_lanes(p, profile, seed)
    equal = plan_at(p, profile, ssds, layout, built, progress)
    prefix = p.context_tokens + p.profile_steps
    top = full_scale(layout, (prefix + t + 1 for t in range(p.steps)))

    def recall_at(scale: float) -> float:
        lay = replace(layout, budget_scale=scale)
        return mean_recall(replay_lane(b, p, lay) for b in built.values())

    t0 = time.perf_counter()
    match = smallest_reaching(recall_at, scale_grid(p.match_step, top), float(p.match_recall))
    match = replace(match, search_s=time.perf_counter() - t0)
    matched = plan_at(p, profile, ssds, replace(layout, budget_scale=match.scale), built)
    return equal, matched, match


def mean_recall(lanes: Iterable) -> float:
    """Mean over lanes and steps of ``|selected & oracle| / |oracle|`` (the lanes'
    ``decisions`` and ``oracle``, as :class:`sim.scenarios.swarm.LaneResult`)."""
    values = [
        np.intersect1d(dec.selected, orc).size / max(1, orc.size)
        for lane in lanes
        for dec, orc in zip(lane.decisions, lane.oracle, strict=True)
    ]
    return float(np.mean(values)) if values else float("nan")


def match_columns(match: Match) -> dict[str, float | bool]:
    """The summary row's columns for what the search found."""
    return {
        "match_target": match.target,
        "match_scale": match.scale,
        "match_recall": match.recall,
        "match_reached": match.reached,
        "match_evaluations": match.evaluations,
        "match_search_s": match.search_s,
    }
