"""KVDrive (seed 003) as a :class:`~sim.policies.kvdesign.KVDesign` for one layer.

Offline (``build``, the prefill):

* the hierarchical index (:mod:`~sim.policies.kvdrive.index`): chunks of
  ``chunk_size`` tokens, mean keys, k-means centroids over them; kept in GPU
  memory and scored there (``score_device = "gpu"``);
* tiers by importance-guided warm-up (§7.1): the importance of a prefix entry
  is how often the prefill's observation window (the profiling queries,
  ``activations`` rows) selected it.  All entries persist on SSD in the
  packed layout (:mod:`~sim.policies.kvdrive.packing`); the most important
  fill the in-GPU cache, the next ``layout.dram_cache_entries`` stay in DRAM
  (``dram_only``: every entry is in DRAM and nothing is read from SSD, the
  paper's DRAM-only configuration of Fig. 21).

Online (``step``): centroids in descending score until the budget fills
(sinks and local window included, resident on the GPU as every sparse design
keeps them, §9.1); then the in-GPU cache (:class:`WindowCache`, capacity
``window x`` the budget of the first step, "x N" of Fig. 3, or
``gpu_cache_entries``) is looked up: hits move nothing; a miss in DRAM is a
host-to-device copy; any other miss is read from SSD (the packed layout's
ranges) and copied.  The cache then evicts by ``eviction`` (lookahead: the
current step's centroid score of each resident entry; or lru).

How misses move (SSD -> DRAM -> GPU) is ``sync``, one of the paper's four
synchronization strategies (§7.3, :mod:`~sim.policies.kvdrive.sync`):
``layerwise``, ``blockwise`` (the default: block-sparse coalesced reads of
what the static DRAM tier lacks), ``hierarchical`` (through a DRAM memmap
cache and pinned buffers) or ``balanced`` (profiled entries pinned, the rest
as hierarchical).

Decisions beyond :class:`StepDecision`'s fields, for the KVDrive driver
(:mod:`sim.scenarios.kvdrive`), are in ``info``: ``gpu_hits``,
``gpu_misses``, ``dram_hits``, ``ssd_entries``, ``h2d_entries`` (misses
copied to the GPU), ``h2d_runs`` (the runs of consecutive ids among them),
``h2d_per_run`` (1: one copy call per run, ``Params.h2d_copy``) and
``stage_entries`` (copied once more inside DRAM before the DMA: pageable
staging or memmap -> pinned), ``memmap_reads`` (1: SSD reads
are memmap page faults), ``blocking_h2d`` (1: pageable, synchronous copies),
``lookup_entries`` (ids the CPU's hit/miss
evaluation scans: the selection and the cache's resident set, a sorted
merge over both, §6.1).  ``StepDecision.dram_entries`` counts the selected
entries *not* read from SSD (GPU-resident or DRAM), as for every design.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.kvdrive.gpucache import POLICIES, WindowCache
from sim.policies.kvdrive.index import BUILDS, build_index
from sim.policies.kvdrive.packing import PackedLayout
from sim.policies.kvdrive.sync import (
    AHEAD_SYNCS,
    PAGEABLE_SYNCS,
    SSD_IOS,
    SYNCS,
    Memmap,
    fetch,
    memmap_reads,
    read_ahead,
)
from sim.policies.selection import always_selected, take_units
from sim.registry import ParamError

H2D_COPIES = ("gather", "per_run")  # Params.h2d_copy


def count_runs(ids: np.ndarray) -> int:
    """Runs of consecutive ids in ``ids`` (distinct): [1, 2, 3, 7, 9, 10] has 3."""
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    return int(len(ids) > 0) + int(np.count_nonzero(np.diff(ids) != 1))


@dataclass(frozen=True)
class Params:
    chunk_size: int = 4  # tokens per chunk (Fig. 17: 4 is the sweet spot)
    chunks_per_centroid: int = 8  # chunks grouped under one centroid
    window: int = 2  # in-GPU cache as a multiple of the step budget ("x N", Fig. 3)
    gpu_cache_entries: int = 0  # > 0: the cache's capacity in entries instead of window
    eviction: str = "lookahead"  # or "lru" (Table 3)
    warmup: bool = True  # importance-guided warm-up of GPU cache and DRAM (§7.1)
    kmeans_iters: int = 3
    index_build: str = "tree"  # "tree": two-level k-means; "exact": flat (index.py)
    dram_only: bool = False  # the whole KV in DRAM (Fig. 21's DRAM-only): no SSD reads
    sync: str = "blockwise"  # §7.3: layerwise, blockwise, hierarchical or balanced (sync.py)
    ssd_io: str = "per_sync"  # how SSD reads are issued: per_sync, memmap or io_path (sync.py)
    # §7.3 (c) read-ahead, as a multiple of the step budget beyond it: the entries the
    # previous step's query ranks next (sync.py); 0 = none
    readahead: float = 0.0
    # how the misses reach the GPU (:data:`H2D_COPIES`): "gather", one copy call per
    # micro-batch (seed 003 §8: "the data movement primitives for gather and copy are
    # derived from ShadowKV", whose gather_copy_with_offsets moves a layer's selected
    # chunks in one launch), or "per_run", one call per run of consecutive entries
    h2d_copy: str = "gather"

    def __post_init__(self) -> None:
        for name in ("chunk_size", "chunks_per_centroid"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("window", "gpu_cache_entries", "kmeans_iters"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0, got {getattr(self, name)}")
        if self.index_build not in BUILDS:
            raise ParamError("index_build", f"must be one of {BUILDS}, got {self.index_build!r}")
        if self.sync not in SYNCS:
            raise ParamError("sync", f"must be one of {SYNCS}, got {self.sync!r}")
        if self.ssd_io not in SSD_IOS:
            raise ParamError("ssd_io", f"must be one of {SSD_IOS}, got {self.ssd_io!r}")
        if self.readahead < 0:
            raise ParamError("readahead", f"must be >= 0, got {self.readahead}")
        if self.readahead and self.sync not in AHEAD_SYNCS:
            raise ParamError("readahead", f"needs sync in {AHEAD_SYNCS}, got {self.sync!r}")
        if self.eviction not in POLICIES:
            raise ParamError("eviction", f"must be one of {POLICIES}, got {self.eviction!r}")
        if self.h2d_copy not in H2D_COPIES:
            raise ParamError("h2d_copy", f"must be one of {H2D_COPIES}, got {self.h2d_copy!r}")


class KVDrive(DesignBase):
    """Hierarchical index on the GPU, window cache, packed SSD layout."""

    name = "kvdrive"
    params_type = Params
    score_device = "gpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        p = self.params
        n = self.start(keys, layout)
        rows, cpc = self.keys.rows(), p.chunks_per_centroid
        self.index = build_index(rows, p.chunk_size, cpc, rng, p.kmeans_iters, p.index_build)
        self.members = list(self.index.members)
        self.label = np.repeat(self.index.chunk_label, p.chunk_size)[:n].astype(np.int64)
        self.packed = PackedLayout(self.members, n, layout.n_ssd)
        act = activations.tocsr()
        self.profile_selections = [
            act.indices[act.indptr[i] : act.indptr[i + 1]] for i in range(act.shape[0])
        ]
        # warm-up order: by importance (then position); without warm-up, by position
        self.order = np.arange(n, dtype=np.int64)
        self.ranked = self.order[:0]  # the entries the observation window selected
        if p.warmup:
            importance = np.asarray(act.sum(axis=0)).ravel()[:n]
            self.order = np.lexsort((np.arange(n), -importance))
            self.ranked = self.order[importance[self.order] > 0]
        self.resize_cache(p.gpu_cache_entries or p.window * layout.step_budget(n + 1))
        self.placed = n

    def resize_cache(self, capacity: int) -> None:
        """A fresh window cache of ``capacity`` entries (before any step), warmed
        up with the most important entries; the next ones go to DRAM (§7.1), and
        when the DRAM tier has room beyond every other entry, the GPU-warmed ones
        get a DRAM copy too (so a later eviction does not leave them on SSD only).
        The per-head window allocation (:mod:`~sim.policies.kvdrive.windows`)
        calls it with each head's knapsack choice."""
        self.cache = WindowCache(capacity, self.params.eviction)
        self.in_dram = np.full(self.n_prefix, self.params.dram_only, dtype=bool)
        warmed = self.ranked[:capacity]
        self.cache.warm(warmed)
        room = self.layout.dram_cache_entries
        rest = self.order[len(warmed) :][:room]
        self.in_dram[rest] = True
        self.in_dram[warmed[: max(0, room - len(rest))]] = True
        self.warmed = warmed
        self.pinned = np.zeros(self.n_prefix, dtype=bool)
        big = np.iinfo(np.int64).max // 2
        cap = big if self.params.dram_only else room
        held = np.arange(self.n_prefix) if self.params.dram_only else np.flatnonzero(self.in_dram)
        order = np.concatenate([rest, warmed])  # most important first among the held
        self.memmap = Memmap(order[np.isin(order, held)], self.n_prefix, cap)
        self.room = cap

    def stall_profile(self) -> np.ndarray:
        """Per prefix entry, how often the prefill's observation window selected
        it outside the GPU cache's warm-up: the memmap accesses the offline
        profile of the balanced split counts (:func:`~.sync.allocate_pinned`)."""
        picks = [s[s < self.n_prefix] for s in self.profile_selections]
        ids = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
        count = np.bincount(ids, minlength=self.n_prefix)
        count[self.warmed] = 0
        return count

    def pin(self, ids: np.ndarray) -> None:
        """Keep ``ids`` resident in pinned memory (balanced); they leave the
        memmap region, whose capacity shrinks by as much (one DRAM tier)."""
        self.pinned[ids] = True
        self.memmap.resident[ids] = False
        self.memmap.resize(max(0, self.room - int(self.pinned.sum())))

    def index_bytes(self) -> int:
        return self.index.index_bytes(self.layout.key_bytes)

    def ssd_bytes(self) -> np.ndarray:
        return self.packed.used * self.layout.entry_bytes * (not self.params.dram_only)

    def host_bytes(self) -> int:
        """The DRAM tier: the entries warm-up put in DRAM (all of them when
        ``dram_only``); the rest are on SSD only.  With a memmap region, its
        capacity (at most the prefix) plus the pinned entries."""
        if self.params.sync == "blockwise" or self.params.dram_only:
            return int(self.in_dram.sum()) * self.layout.entry_bytes
        held = min(self.memmap.capacity, self.n_prefix) + int(self.pinned.sum())
        return held * self.layout.entry_bytes

    def cache_bytes(self) -> int:
        """GPU memory the window cache may hold (its capacity)."""
        return self.cache.capacity * self.layout.entry_bytes

    def _place(self, visible: int) -> None:
        """Tokens that left the local window join their nearest centroid."""
        stop = visible - self.layout.local_window
        if stop <= self.placed:
            return
        c = self.index.centroids
        half = 0.5 * (c * c).sum(axis=1)
        new = np.arange(self.placed, stop)
        lab = np.argmax(self.keys.rows()[new] @ c.T - half, axis=1)
        self.label = np.concatenate([self.label, lab])
        fresh = np.full(len(new), self.params.dram_only, dtype=bool)
        self.in_dram = np.concatenate([self.in_dram, fresh])
        self.pinned = np.concatenate([self.pinned, np.zeros(len(new), dtype=bool)])
        self.memmap.grow(stop)
        if self.params.dram_only:
            self.memmap.resident[new] = True
        for pos, cl in zip(new.tolist(), lab.tolist(), strict=True):
            self.members[cl] = np.append(self.members[cl], pos)
            self.packed.append(pos, cl)
        self.placed = stop

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay = self.layout
        visible = self.advance(t, new_key)
        self._place(visible)
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = self.index.centroids @ np.asarray(query, dtype=np.float32)
        chosen, extra = take_units(scores, self.members, lay.step_budget(visible), always, visible)
        label = self.label

        def score(ids: np.ndarray) -> np.ndarray:
            return scores[label[np.minimum(ids, len(label) - 1)]]

        lookup = len(extra) + len(self.cache)
        ahead = self._read_ahead(t)
        hit = self.cache.access(t, extra, score)
        miss = extra[~hit]
        sync = self.params.sync
        f = fetch(sync, miss, self.placed, self.memmap, self.in_dram, self.pinned, t)
        self.prev = (scores, always, visible)
        ahead_ext = self.packed.extents(ahead, lay.entry_bytes) if len(ahead) else None
        flops, nbytes = self.index.score_cost(lay.key_bytes)
        return StepDecision(
            selected=np.union1d(always, extra),
            dram_entries=len(always) + int(hit.sum()) + f.dram_hits,
            ssd_extents=self.packed.extents(f.from_ssd, lay.entry_bytes),
            score_flops=flops,
            score_bytes=nbytes,
            prefetch_extents=ahead_ext,
            info={
                "centroids": float(self.index.n_centroids),
                "centroids_chosen": float(len(chosen)),
                "gpu_hits": float(hit.sum()),
                "gpu_misses": float(len(miss)),
                "dram_hits": float(f.dram_hits),
                "ssd_entries": float(len(f.from_ssd)),
                "h2d_entries": float(f.h2d),
                "h2d_runs": float(count_runs(miss) if sync != "layerwise" else 1),
                "h2d_per_run": float(self.params.h2d_copy == "per_run"),
                "stage_entries": float(f.staged),
                "memmap_reads": float(memmap_reads(sync, self.params.ssd_io)),
                "read_ahead": float(self.params.readahead),
                "ahead_entries": float(len(ahead)),
                "blocking_h2d": float(sync in PAGEABLE_SYNCS),
                "lookup_entries": float(lookup),
                "cache_capacity": float(self.cache.capacity),
            },
        )

    def _read_ahead(self, t: int) -> np.ndarray:
        """The entries read ahead at step ``t`` (:func:`~.sync.read_ahead`),
        before this step's selection: the previous step's centroid ranking
        taken to ``1 + readahead`` step budgets; none without ``readahead`` or
        at the first step."""
        prev = getattr(self, "prev", None)
        if not self.params.readahead or prev is None:
            return np.zeros(0, dtype=np.int64)
        scores, always, visible = prev
        budget = int((1 + self.params.readahead) * self.layout.step_budget(visible))
        _, ids = take_units(scores, self.members, budget, always, visible)
        ids = ids[ids < self.placed]
        return read_ahead(ids, self.cache.contains(ids), self.memmap, self.pinned, t)


register("kvdrive", Params, KVDrive)
register("kvdrive-lru", Params, KVDrive, preset={"eviction": "lru"})
