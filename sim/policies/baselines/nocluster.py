"""No Cluster (Swarm §8.1 baseline 1, §8.3 "Offline Placement-SSD").

"KV entries are stored on SSDs without any clustering or indexing
structures.  To identify the activated KV entries, the entire KVCache is
first loaded into DRAM (in chunks when necessary) to compute attention
scores, after which the required entries are retrieved from SSDs."  §8.3:
it "places tokens sequentially across SSDs".

Our reading:

* layout (:class:`Stripe`): the prefix is cut into chunks of
  ``chunk_entries`` consecutive tokens; chunk c goes to SSD ``c mod D``,
  contiguous within the chunk, so entry p is on disk ``(p // C) mod D`` at
  slot ``(p // (C*D)) * C + p mod C``.  Decode tokens continue the same
  round-robin when they leave the local window (the formula is positional,
  so appending is free);
* index: none (``index_bytes() == 0``); sinks and the local window stay in
  DRAM as for every design;
* selection: the oracle over the keys it has: every visible key is scored
  (``score_flops = 2 d visible``, ``score_bytes = visible x key_bytes``,
  d the trace's key dimension) and the top ``budget - |sinks + window|``
  non-resident entries are taken, plus sinks and window
  (:func:`~sim.policies.selection.top_entries`: exactly the oracle's count);
* I/O: with ``load_for_scoring`` (default) ``prefetch_extents`` holds the
  whole KV of the non-resident entries, one extent per chunk (a chunk's
  non-resident run; chunks that happen to be adjacent on a disk are not
  merged, so one I/O is at most ``chunk_entries x entry_bytes``).  With
  ``load_for_scoring=False`` prefetch is ``None``: the paper's "for fairness
  we report only the time spent on attention score computation and the
  transfer of the required entries".  The selected entries are then read one
  extent per entry (never merged: the oracle's picks are scattered).

``rounds`` (all designs in this package) is ``ceil(m / ios_per_round)``
where m is the largest number of extents (I/Os) one SSD reads this step,
0 when nothing is read; prefetch I/Os are not counted in it.

The helpers here (:class:`Stripe`, :class:`KeyLog`, :func:`extents_by_disk`,
:func:`io_rounds`) are shared by the InfLLM and PQCache baselines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase, KeyLog
from sim.policies.kvdesign import Layout, StepDecision, extents_from_slots, register
from sim.policies.selection import always_selected, top_entries


@dataclass(frozen=True)
class Stripe:
    """Positions in chunks of ``chunk`` consecutive entries, chunk c on SSD c mod D."""

    chunk: int
    n_ssd: int

    def disk(self, pos: np.ndarray) -> np.ndarray:
        return (np.asarray(pos, dtype=np.int64) // self.chunk) % self.n_ssd

    def slot(self, pos: np.ndarray) -> np.ndarray:
        pos = np.asarray(pos, dtype=np.int64)
        return (pos // (self.chunk * self.n_ssd)) * self.chunk + pos % self.chunk

    def slots_used(self, placed: int) -> np.ndarray:
        """Slots allocated on each disk once positions ``0..placed-1`` are placed
        (disk k holds slots ``0..slots_used[k]-1``, no gaps)."""
        per_round = self.chunk * self.n_ssd
        rem = placed % per_round
        k = np.arange(self.n_ssd, dtype=np.int64)
        return (placed // per_round) * self.chunk + np.clip(rem - k * self.chunk, 0, self.chunk)


def extents_by_disk(
    disks: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, n_ssd: int
) -> list[np.ndarray]:
    """Group (offset, length) extents by SSD, each disk's list by ascending offset."""
    disks = np.asarray(disks, dtype=np.int64)
    order = np.lexsort((offsets, disks))
    ext = np.stack([np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)], axis=1)
    ext = ext[order].reshape(-1, 2)
    bounds = np.searchsorted(disks[order], np.arange(n_ssd + 1))
    return [ext[bounds[k] : bounds[k + 1]] for k in range(n_ssd)]


def io_rounds(extents: list[np.ndarray], ios_per_round: int) -> int:
    """Batched submissions: the busiest SSD's I/O count over the batch size."""
    most = max((len(e) for e in extents), default=0)
    return math.ceil(most / ios_per_round)


def entry_reads(ids: np.ndarray, stripe: Stripe, entry_bytes: int) -> list[np.ndarray]:
    """The ids' entries on their stripe disks, each run of consecutive slots
    one range (:func:`extents_from_slots` with ``merge``), by ascending offset."""
    ids = np.asarray(ids, dtype=np.int64)
    disk, slot = stripe.disk(ids), stripe.slot(ids)
    return [
        extents_from_slots(slot[disk == k], entry_bytes, merge=True) for k in range(stripe.n_ssd)
    ]


@dataclass(frozen=True)
class Params:
    chunk_entries: int = 256  # consecutive tokens per chunk; chunk c on SSD c mod D
    load_for_scoring: bool = True  # False: the paper's "for fairness" accounting
    ios_per_round: int = 64  # I/Os per SSD per batched submission

    def __post_init__(self) -> None:
        if self.chunk_entries < 1 or self.ios_per_round < 1:
            raise ValueError(f"chunk_entries and ios_per_round must be >= 1: {self}")


class NoCluster(DesignBase):
    """Sequential chunks over the SSDs; oracle top-k over every visible key."""

    name = "nocluster"
    # seed 000 §8.1: the KV is "first loaded into DRAM ... to compute attention scores"
    params_type = Params
    score_device = "cpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        self.placed = self.start(keys, layout)  # positions < placed have their slot on SSD
        self.stripe = Stripe(self.params.chunk_entries, layout.n_ssd)

    @property
    def slots_used(self) -> np.ndarray:
        return self.stripe.slots_used(self.placed)

    def ssd_bytes(self) -> np.ndarray:
        return self.slots_used * self.layout.entry_bytes

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay = self.layout
        visible = self.advance(t, new_key)
        self.placed = max(self.placed, visible - lay.local_window)
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = self.keys.rows() @ np.asarray(query, dtype=np.float32)
        cand = np.setdiff1d(np.arange(visible, dtype=np.int64), always, assume_unique=True)
        top = top_entries(scores, lay.step_budget(visible), always)
        extents = entry_reads(top, self.stripe, lay.entry_bytes)
        prefetch = self._prefetch(cand) if self.params.load_for_scoring else None
        d = self.keys.rows().shape[1]
        return StepDecision(
            selected=np.union1d(always, top),
            dram_entries=len(always),
            ssd_extents=extents,
            rounds=io_rounds(extents, self.params.ios_per_round),
            score_flops=2.0 * d * visible,
            score_bytes=float(visible * lay.key_bytes),
            prefetch_extents=prefetch,
            info={
                "scored": float(visible),
                "read_entries": float(len(top)),
                "prefetch_bytes": float(len(cand) * lay.entry_bytes)
                if prefetch is not None
                else 0.0,
            },
        )

    def _prefetch(self, ids: np.ndarray) -> list[np.ndarray]:
        """The whole KV of ``ids`` (sorted): one extent per run within a chunk."""
        chunk = self.params.chunk_entries
        if ids.size == 0:
            return [np.zeros((0, 2), dtype=np.int64) for _ in range(self.layout.n_ssd)]
        breaks = np.nonzero((np.diff(ids) != 1) | (np.diff(ids // chunk) != 0))[0] + 1
        starts = np.concatenate([[0], breaks])
        lengths = np.diff(np.concatenate([starts, [ids.size]]))
        first = ids[starts]
        eb = self.layout.entry_bytes
        return extents_by_disk(
            self.stripe.disk(first), self.stripe.slot(first) * eb, lengths * eb, self.stripe.n_ssd
        )


register("nocluster", Params, NoCluster)

__all__ = ["KeyLog", "NoCluster", "Params", "Stripe", "entry_reads", "extents_by_disk", "io_rounds"]
