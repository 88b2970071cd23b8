"""KVDrive's in-GPU cache (seed 003 §5.1): a sliding window of critical entries.

The cache holds up to ``capacity`` KV entries of one layer (one lane).  Each
decode step attention uses a selection; the selected entries already resident
are *hits* (no transfer), the others *misses*, fetched and inserted.  When the
cache then holds more than ``capacity`` entries, victims are chosen by the
eviction policy among the entries *not* used this step (the step's own
selection is never evicted while it is being attended to; a selection larger
than the capacity keeps its highest-scored entries):

* ``lookahead`` (KVDrive): evict the entries with the lowest *current-step*
  score ("entries with the lowest current-step attention scores are
  discarded, as they are least likely to be reused in subsequent steps");
* ``lru``: evict the least recently used (the step an entry was last
  selected or inserted).

Ties break by entry id (lower id evicted first), so runs are reproducible.
The capacity of "x N" windows (Fig. 3) is N times the per-step budget; the
design (:mod:`sim.policies.kvdrive.design`) sets it.  All work is numpy over
the resident ids: no per-entry Python loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

POLICIES = ("lookahead", "lru")


class WindowCache:
    """Resident entry ids with the step each was last used (sorted by id)."""

    def __init__(self, capacity: int, policy: str = "lookahead"):
        if policy not in POLICIES:
            raise ValueError(f"eviction must be one of {POLICIES}, got {policy!r}")
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self.policy = policy
        self.ids = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def warm(self, ids: np.ndarray) -> None:
        """Fill with ``ids`` (importance order, best first) up to the capacity,
        as used at step -1 (KVDrive's importance-guided warm-up, §7.1)."""
        ids = np.asarray(ids, dtype=np.int64)[: self.capacity]
        order = np.argsort(ids, kind="stable")
        self.ids, self.last = ids[order], np.full(len(ids), -1, dtype=np.int64)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask: which of ``ids`` are resident."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(self.ids):
            return np.zeros(len(ids), dtype=bool)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return self.ids[pos] == ids

    def access(
        self, t: int, selected: np.ndarray, score: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """Step ``t`` uses ``selected`` (distinct ids): returns the hit mask over
        ``selected``, inserts the misses and evicts down to the capacity.
        ``score(ids)`` gives the current step's score of any ids (lookahead)."""
        selected = np.asarray(selected, dtype=np.int64)
        hit = self.contains(selected)
        ids = np.union1d(self.ids, selected)
        last = np.full(len(ids), -1, dtype=np.int64)
        last[np.searchsorted(ids, self.ids)] = self.last
        used = np.zeros(len(ids), dtype=bool)
        used[np.searchsorted(ids, selected)] = True
        last[used] = t
        over = len(ids) - self.capacity
        if over > 0:
            keep = np.ones(len(ids), dtype=bool)
            keep[self._victims(ids, last, used, score, over)] = False
            ids, last = ids[keep], last[keep]
        self.ids, self.last = ids, last
        return hit

    def _victims(self, ids, last, used, score, over: int) -> np.ndarray:
        """Positions (into ``ids``) of the ``over`` entries to evict: unused
        entries first, each group ordered by the policy's key, then by id."""
        if self.policy == "lookahead":
            key = np.asarray(score(ids), dtype=np.float64)
        else:
            key = last.astype(np.float64)
        order = np.lexsort((ids, key, used))  # unused (False) first, lowest key first
        return order[:over]
