"""Selection helpers shared by the sparse-attention designs: how a design
spends its selection budget.

The budget (:meth:`sim.policies.kvdesign.Layout.step_budget`) is the number of
*distinct entries attention uses* at a step, the sinks and the local window
included, as the oracle counts them.  Every design spends it the same way:

1. the always-selected entries (sinks, window, and whatever else the design
   keeps resident and attends to unconditionally) come first and count;
2. the rest, ``budget - |always|`` entries, go by score: single entries
   (:func:`top_entries`, No Cluster) or whole units (clusters, blocks:
   :func:`take_units`) in descending unit score, each unit adding its entries
   not selected yet, in member order;
3. the last unit is *cut* where the count reaches the budget, so a design
   that selects units never exceeds the budget and overshoots by nothing:
   ``|selected| = min(budget, |always| + entries the units cover)``.
"""

from __future__ import annotations

import numpy as np


def always_selected(visible: int, sink_tokens: int, local_window: int) -> np.ndarray:
    """Sink tokens and the local window of ``visible`` entries (sorted ids)."""
    sinks = np.arange(min(sink_tokens, visible))
    window = np.arange(max(visible - local_window, 0), visible)
    return np.union1d(sinks, window).astype(np.int64)


def remaining(budget: int, always: np.ndarray) -> int:
    """Entries left to choose by score once the always-selected ones are counted."""
    return max(int(budget) - len(always), 0)


def top_entries(scores: np.ndarray, budget: int, always: np.ndarray) -> np.ndarray:
    """The ``budget - |always|`` highest-scoring entries not in ``always`` (sorted
    ids); ``scores`` covers every visible entry."""
    k = remaining(budget, always)
    cand = np.setdiff1d(np.arange(len(scores), dtype=np.int64), always, assume_unique=True)
    if k < len(cand):
        cand = cand[np.argpartition(-np.asarray(scores)[cand], k)[:k]] if k else cand[:0]
    return np.sort(cand)


def take_units(
    scores: np.ndarray,
    members: list[np.ndarray],
    budget: int,
    always: np.ndarray,
    visible: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Units in descending score until the selection holds ``budget`` entries.

    ``always`` (sorted ids) are selected anyway and count toward ``budget``;
    every member id and every ``always`` id is below ``visible``.
    Each unit adds its members not selected yet, in member order; the last
    unit is cut at the budget (see the module doc).  Ties break by unit id.
    Returns (chosen unit ids, the entries they add, sorted), so
    ``|always| + |entries| = min(budget, |always| + what the units cover)``.
    One numpy pass per chunk of units (chunks double): cost grows with the
    selection, not the index.
    """
    k = remaining(budget, always)
    order = np.lexsort((np.arange(len(scores)), -np.asarray(scores)))
    taken = np.zeros(visible, dtype=bool)
    taken[always] = True
    chosen: list[np.ndarray] = []
    added: list[np.ndarray] = []
    n, pos, width = 0, 0, 16
    while n < k and pos < len(order):
        units = order[pos : pos + width]  # the next units by score, as one numpy pass
        pos, width = pos + len(units), 2 * width
        parts = [np.asarray(members[u], dtype=np.int64) for u in units]
        flat = np.concatenate(parts)
        owner = np.repeat(np.arange(len(units)), [len(m) for m in parts])
        first = np.zeros(flat.size, dtype=bool)  # first occurrence in unit, member order
        first[np.unique(flat, return_index=True)[1]] = True
        new = np.flatnonzero(first & ~taken[flat])
        if new.size >= k - n:  # the budget fills inside this chunk: cut that unit there
            new = new[: k - n]
            units = units[: owner[new[-1]] + 1] if new.size else units[:1]
        ids = flat[new]
        taken[ids] = True
        added.append(ids)
        chosen.append(units)
        n += ids.size
    entries = np.sort(np.concatenate(added)) if added else np.zeros(0, dtype=np.int64)
    ids = np.concatenate(chosen).astype(np.int64) if chosen else np.zeros(0, dtype=np.int64)
    return ids, entries
