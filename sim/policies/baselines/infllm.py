"""InfLLM-style fixed blocks (Swarm §8.1 baseline 2).

"KV entries are organized into fixed-size blocks.  Token importance is
determined at the block level, and only the selected blocks are retrieved
during inference."  Our reading, after InfLLM (Xiao et al. 2024):

* blocks: ``block_tokens`` (B) consecutive tokens; the prefix gives blocks
  ``[bB, min((b+1)B, N))`` (the last may be short), decode tokens form new
  blocks of B starting at N once all B have left the local window;
* representatives: InfLLM keeps, per block, the few tokens that *receive the
  most attention*.  For the prefix we take the ``representatives`` (R) tokens
  most often active in the profiling activations (ties: lower position); for
  a decode block, the tokens that received the most attention (softmax over
  the not-yet-blocked tokens, summed over the steps they spent in DRAM).
  Their keys are the index in DRAM: ``index_bytes = blocks x R x key_bytes``
  (a short block pads with its first representative);
* selection: block score = max over its representatives of query . key;
  blocks in descending score until the selection, sinks, window and pending
  tokens included, reaches the budget; the last block is cut there, so it
  reads a shorter run (:func:`take_units`, the rule every design follows);
* layout: block b on SSD ``b mod D`` at slot ``(b // D) x B``, contiguous, so
  reading a block is ONE extent of up to ``B x entry_bytes`` (a large I/O).
  That is what helps blocks; the price is read amplification: the whole
  block is read (and takes budget) for the few tokens that matter.  A block
  overlapping sinks/window reads only its non-resident run (still one
  extent); blocks are never merged with their neighbours;
* DRAM: sinks, the local window, tokens that left the window while their
  block is not complete yet (at most B - 1, kept in DRAM and always selected),
  and an LRU cache of blocks (:meth:`Layout.cache_entries`: ``dram_cache_entries``,
  or what the index leaves of a shared ``dram_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.baselines.nocluster import extents_by_disk, io_rounds
from sim.policies.cache import LRUCache
from sim.policies.design_base import DesignBase, KeyLog
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.selection import always_selected, take_units


@dataclass(frozen=True)
class Params:
    block_tokens: int = 128  # consecutive tokens per block
    representatives: int = 4  # representative keys per block (the index)
    ios_per_round: int = 64  # I/Os per SSD per batched submission

    def __post_init__(self) -> None:
        if min(self.block_tokens, self.representatives, self.ios_per_round) < 1:
            raise ValueError(f"block_tokens, representatives, ios_per_round must be >= 1: {self}")


class InfLLM(DesignBase):
    """Fixed blocks, scored by their representative keys, read as one extent each."""

    name = "infllm"
    # as seed 000 runs its baselines (§8.1): block representatives in DRAM, scored
    # by the host in Swarm's pipeline (§7); InfLLM's own system scores on the GPU
    params_type = Params
    score_device = "cpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        n = self.start(keys, layout)
        self.starts: list[int] = []
        self.sizes: list[int] = []  # live list: the cache reads block sizes from it
        self.members: list[np.ndarray] = []
        self.reps: list[np.ndarray] = []  # representative token ids, most important first
        self.rep_keys = KeyLog(np.zeros((0, keys.shape[1]), dtype=np.float32))
        counts = np.asarray(activations.sum(axis=0), dtype=np.float64).ravel()
        for start in range(0, n, self.params.block_tokens):
            self._add_block(start, counts[start : start + self.params.block_tokens])
        self.next_start = n  # first decode token not yet in a block
        self.received = np.zeros(0)  # attention received by tokens next_start..visible-1
        self.cache = LRUCache(layout.cache_entries(self.index_bytes()), self.sizes)

    def _add_block(self, start: int, weight: np.ndarray) -> None:
        size, r = len(weight), self.params.representatives
        order = np.lexsort((np.arange(size), -weight))[:r]
        reps = start + order
        padded = np.concatenate([reps, np.full(r - len(reps), reps[0])])
        for row in self.keys.rows()[padded]:
            self.rep_keys.append(row)
        self.starts.append(start)
        self.sizes.append(size)
        self.members.append(np.arange(start, start + size, dtype=np.int64))
        self.reps.append(reps.astype(np.int64))

    @property
    def n_blocks(self) -> int:
        return len(self.starts)

    @property
    def slots_used(self) -> np.ndarray:
        """Slots reserved per disk: B for every block placed there."""
        d = self.layout.n_ssd
        per_disk = np.maximum(self.n_blocks - np.arange(d) + d - 1, 0) // d
        return per_disk * self.params.block_tokens

    def block_disk_slot(self, b: int) -> tuple[int, int]:
        """SSD and first slot of block b."""
        d = self.layout.n_ssd
        return b % d, (b // d) * self.params.block_tokens

    def index_bytes(self) -> int:
        return self.n_blocks * self.params.representatives * self.layout.key_bytes

    def host_bytes(self) -> int:
        """The index and the DRAM cache's room (:meth:`Layout.cache_entries`)."""
        return self.index_bytes() + self.cache.capacity * self.layout.entry_bytes

    def ssd_bytes(self) -> np.ndarray:
        """Whole blocks reserved per disk (a short last block still reserves B slots)."""
        return self.slots_used * self.layout.entry_bytes

    def block_scores(self, query: np.ndarray) -> np.ndarray:
        s = self.rep_keys.rows() @ np.asarray(query, dtype=np.float32)
        return s.reshape(self.n_blocks, self.params.representatives).max(axis=1)

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay, bt = self.layout, self.params.block_tokens
        visible = self.advance(t, new_key)
        self.received = np.append(self.received, 0.0)
        while self.next_start + bt <= visible - lay.local_window:
            self._add_block(self.next_start, self.received[:bt])
            self.received = self.received[bt:]
            self.next_start += bt
        self.cache.set_capacity(lay.cache_entries(self.index_bytes()))  # new blocks' keys
        s = self.keys.rows(self.next_start) @ np.asarray(query, dtype=np.float32)
        p = np.exp(s - s.max())
        self.received += p / p.sum()

        pending = np.arange(self.next_start, max(visible - lay.local_window, self.next_start))
        resident = np.union1d(always_selected(visible, lay.sink_tokens, lay.local_window), pending)
        budget = lay.step_budget(visible)
        scores = self.block_scores(query)
        chosen, extra = take_units(scores, self.members, budget, resident, visible)
        hits = [int(b) for b in chosen if self.cache.contains(int(b))]
        hit_entries = sum(np.isin(self.members[b], extra).sum() for b in hits)
        extents = self._reads([int(b) for b in chosen if not self.cache.contains(int(b))], extra)
        self.cache.touch(int(b) for b in chosen)
        d = self.keys.rows().shape[1]
        n_rep = self.n_blocks * self.params.representatives
        return StepDecision(
            selected=np.union1d(resident, extra),
            dram_entries=len(resident) + hit_entries,
            ssd_extents=extents,
            rounds=io_rounds(extents, self.params.ios_per_round),
            score_flops=2.0 * d * n_rep,
            score_bytes=float(n_rep * lay.key_bytes),
            info={
                "blocks": float(self.n_blocks),
                "blocks_chosen": float(len(chosen)),
                "blocks_read": float(len(chosen) - len(hits)),
                "cache_hits": float(len(hits)),
                "pending": float(len(pending)),
            },
        )

    def _reads(self, blocks: list[int], wanted: np.ndarray) -> list[np.ndarray]:
        """One extent per block: its run of ``wanted`` (selected, non-resident)
        entries -- the whole block, usually; a shorter run when it overlaps the
        sinks/window or is the block cut at the budget.  All blocks at once: an
        extent breaks where the block changes or a slot is skipped."""
        lay = self.layout
        if not blocks:
            return [np.zeros((0, 2), dtype=np.int64) for _ in range(lay.n_ssd)]
        b = np.asarray(blocks, dtype=np.int64)
        parts = [self.members[i] for i in blocks]
        ids = np.concatenate(parts)
        owner = np.repeat(b, [len(m) for m in parts])
        mask = np.zeros(int(max(ids.max(), wanted.max(initial=0))) + 1, dtype=bool)
        mask[wanted] = True
        keep = mask[ids]
        ids, owner = ids[keep], owner[keep]
        if ids.size == 0:
            return [np.zeros((0, 2), dtype=np.int64) for _ in range(lay.n_ssd)]
        starts = np.asarray(self.starts, dtype=np.int64)[owner]
        d, bt = lay.n_ssd, self.params.block_tokens
        slot = (owner // d) * bt + ids - starts  # block_disk_slot, vectorised
        new = np.ones(ids.size, dtype=bool)  # a run starts at a new block or a gap
        new[1:] = (owner[1:] != owner[:-1]) | (slot[1:] != slot[:-1] + 1)
        first = np.flatnonzero(new)
        length = np.diff(np.append(first, ids.size))
        return extents_by_disk(
            owner[first] % d, slot[first] * lay.entry_bytes, length * lay.entry_bytes, d
        )


register("infllm", Params, InfLLM)
