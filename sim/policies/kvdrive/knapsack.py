"""KVDrive's 2D window scaling (seed 003 §5.2): window sizes per layer-head.

For every (layer, head) group g and candidate window w_j (ascending), an
offline profiling pass gives ``benefit[g, j]`` (transfer saved by window j
against none) and ``cost[g, j]`` (GPU memory it takes).  Choosing one window
per group to maximise total benefit with total cost <= M is the
multiple-choice knapsack problem (MCKP).

* :func:`greedy_mckp` is the paper's algorithm: "starts from the smallest
  windows and iteratively enlarges the window with the highest
  benefit-to-cost ratio until the GPU cache budget is met".  A move enlarges
  one group's window from its current j to any larger j' (a jump over options
  that gain nothing on their own: the step along the curve's upper hull),
  rated by its *incremental* benefit over incremental cost; moves that do not
  fit the remaining budget are not candidates.
* :func:`exhaustive_mckp` tries every combination (small instances only).

What holds (tests/sim/test_kvdrive_knapsack.py): greedy is feasible and never
beats exhaustive; when each group's curve is concave (incremental ratios
non-increasing in j) greedy follows the LP relaxation's order until the first
move that does not fit, so greedy >= OPT - (the largest single incremental
benefit); it is optimal when the budget falls on a move boundary, and can
be far from optimal otherwise (a small high-ratio move blocks a large one).
:func:`window_profile` is the profiling pass: a head's selections replayed
through a :class:`~sim.policies.kvdrive.gpucache.WindowCache` per window.
"""

from __future__ import annotations

import itertools

import numpy as np

from sim.policies.kvdrive.gpucache import WindowCache


def _check(benefit: np.ndarray, cost: np.ndarray, budget: float) -> None:
    if benefit.shape != cost.shape or benefit.ndim != 2:
        raise ValueError(f"benefit {benefit.shape} and cost {cost.shape} must be equal (G, K)")
    if np.any(np.diff(cost, axis=1) <= 0):
        raise ValueError("each group's options must have strictly increasing cost")
    if cost[:, 0].sum() > budget:
        raise ValueError(f"the smallest windows already cost {cost[:, 0].sum()} > {budget}")


def greedy_mckp(benefit: np.ndarray, cost: np.ndarray, budget: float) -> np.ndarray:
    """Option index per group chosen by the greedy enlargement (see module doc)."""
    benefit, cost = np.asarray(benefit, float), np.asarray(cost, float)
    _check(benefit, cost, budget)
    g_n, k_n = benefit.shape
    choice = np.zeros(g_n, dtype=np.int64)
    left = budget - cost[:, 0].sum()
    rows = np.arange(g_n)
    later = np.arange(k_n)[None, :]
    while True:
        d_cost = cost - cost[rows, choice][:, None]
        d_gain = benefit - benefit[rows, choice][:, None]
        ok = (later > choice[:, None]) & (d_gain > 0) & (d_cost <= left)
        ratio = np.where(ok, d_gain / np.where(ok, d_cost, 1.0), -np.inf)
        g, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[g, j] == -np.inf:
            return choice
        left -= d_cost[g, j]
        choice[g] = j


def exhaustive_mckp(benefit: np.ndarray, cost: np.ndarray, budget: float) -> np.ndarray:
    """The optimal option per group by trying all K^G combinations."""
    benefit, cost = np.asarray(benefit, float), np.asarray(cost, float)
    _check(benefit, cost, budget)
    g_n, k_n = benefit.shape
    if k_n**g_n > 1_000_000:
        raise ValueError(f"{k_n}^{g_n} combinations: too many for exhaustive search")
    best, best_val = None, -np.inf
    rows = np.arange(g_n)
    for combo in itertools.product(range(k_n), repeat=g_n):
        c = np.asarray(combo)
        if cost[rows, c].sum() <= budget and benefit[rows, c].sum() > best_val:
            best, best_val = c, benefit[rows, c].sum()
    return np.asarray(best, dtype=np.int64)


def value(benefit: np.ndarray, cost: np.ndarray, choice: np.ndarray) -> tuple[float, float]:
    """(total benefit, total cost) of a choice."""
    rows = np.arange(len(choice))
    return float(np.asarray(benefit)[rows, choice].sum()), float(
        np.asarray(cost)[rows, choice].sum()
    )


def window_profile(
    selections: list[np.ndarray], windows: list[int], budget: int, entry_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """One head's profiling pass: the head's per-step selections replayed
    through a cache of ``w x budget`` entries for each window w (ascending;
    LRU, as profiling has the selections but no scores).  Returns (benefit,
    cost) rows for :func:`greedy_mckp`: entries *not* fetched against the
    first window, and the cache's bytes."""
    misses = []
    for w in windows:
        cache = WindowCache(w * budget, "lru")
        n = 0
        for t, sel in enumerate(selections):
            n += int((~cache.access(t, sel, np.zeros_like)).sum())
        misses.append(n)
    benefit = float(misses[0]) - np.asarray(misses, float)
    cost = np.asarray(windows, float) * budget * entry_bytes
    return benefit, cost
