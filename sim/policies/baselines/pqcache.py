"""PQCache-style k-means clusters (Swarm §8.1 baseline 3).

"A clustering-based method that groups KV entries using K-means, where
cluster centroids are used to identify relevant tokens for retrieval."
Our reading (PQCache itself scores product-quantised token codes; the Swarm
paper describes it as centroid retrieval, and that is what we model):

* offline: k-means on the prefix keys with ``ceil(N / target_size)``
  clusters (k-means++ seeding on a sample of at most ``init_sample`` keys,
  then ``kmeans_iters`` Lloyd iterations on all keys, assignments in chunks
  of one BLAS product each; empty clusters are re-seeded with the keys
  farthest from their centroid, and any still empty at the end are dropped).
  Each entry is in exactly one cluster (no replicas).  The centroids are the
  index in DRAM: ``index_bytes = n_clusters x key_bytes``;
* selection: score every centroid with the query (inner product, the mean
  of its members' query . key); clusters in descending score until the
  selection, sinks and window included, reaches the budget, the last cluster
  cut there (:func:`take_units`, the rule every design follows);
* layout: as PQCache keeps the KV, in position order, striped over the SSDs
  like No Cluster's chunks (:class:`Stripe`).  Co-clustered tokens are
  scattered over positions, so the selected entries are read one extent per
  entry (never merged);
* DRAM: sinks, local window, an LRU cache of clusters
  (:meth:`Layout.cache_entries`: ``dram_cache_entries``, or what the index
  leaves of a shared ``dram_bytes``);
* decode: a token that leaves the local window joins its nearest centroid
  (Euclidean; centroids are not updated) and takes its stripe slot.  If that
  cluster is cached, the token joins the cached copy (it is in DRAM already)
  and the cache's usage grows by one entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.baselines.nocluster import Stripe, entry_reads, io_rounds
from sim.policies.cache import LRUCache
from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.selection import always_selected, take_units

_CHUNK_FLOATS = 1 << 20  # distance-matrix chunk for assignments (4 MiB: stays in cache)


def _assign(x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of every row and its squared distance (chunked GEMMs)."""
    half = 0.5 * (c * c).sum(axis=1)
    ct = np.ascontiguousarray(c.T)
    rows = max(1, _CHUNK_FLOATS // max(len(c), 1))
    buf = np.empty((min(rows, len(x)), len(c)), dtype=np.float32)
    labels = np.empty(len(x), dtype=np.int64)
    best = np.empty(len(x), dtype=np.float32)
    for s in range(0, len(x), rows):
        g = np.matmul(x[s : s + rows], ct, out=buf[: min(rows, len(x) - s)])
        g -= half
        lab = g.argmax(axis=1)
        labels[s : s + rows] = lab
        best[s : s + rows] = g[np.arange(len(g)), lab]
    dist = np.maximum((x * x).sum(axis=1) - 2.0 * best, 0.0)
    return labels, dist


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (D^2 sampling), one matrix-vector product per centre."""
    sq = (x * x).sum(axis=1)
    idx = np.empty(k, dtype=np.int64)
    idx[0] = rng.integers(len(x))
    d = np.maximum(sq + sq[idx[0]] - 2.0 * (x @ x[idx[0]]), 0.0)
    for i in range(1, k):
        cum = np.cumsum(d, dtype=np.float64)
        if cum[-1] <= 0.0:  # fewer distinct keys than centres: any key will do
            idx[i] = rng.integers(len(x))
        else:
            pick = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
            idx[i] = min(pick, len(x) - 1)
        np.minimum(d, np.maximum(sq + sq[idx[i]] - 2.0 * (x @ x[idx[i]]), 0.0), out=d)
    return x[idx].copy()


def _means(x: np.ndarray, labels: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centroids as the mean of their members (an empty cluster keeps ``old``)."""
    k = len(old)
    onehot = sp.csr_matrix(
        (np.ones(len(x), dtype=np.float32), (labels, np.arange(len(x)))), shape=(k, len(x))
    )
    counts = np.bincount(labels, minlength=k)
    sums = np.asarray(onehot @ x)
    c = old.copy()
    nz = counts > 0
    c[nz] = sums[nz] / counts[nz, None]
    return c.astype(np.float32), counts


def kmeans(
    x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 3, init_sample: int = 16384
) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means from k-means++ seeds.  Returns (centroids (k', d), labels);
    k' <= k after dropping clusters that end empty; labels index the centroids."""
    x = np.asarray(x, dtype=np.float32)
    k = min(k, len(x))
    sample = x
    if len(x) > max(init_sample, k):
        sample = x[np.sort(rng.choice(len(x), size=max(init_sample, k), replace=False))]
    c = _kmeans_pp(sample, k, rng)
    labels, dist = _assign(x, c)
    for _ in range(iters):
        c, counts = _means(x, labels, c)
        empty = np.nonzero(counts == 0)[0]
        if empty.size:  # re-seed with the keys worst served by their centroid
            c[empty] = x[np.argsort(-dist, kind="stable")[: empty.size]]
        new_labels, dist = _assign(x, c)
        if not empty.size and np.array_equal(new_labels, labels):
            break
        labels = new_labels
    c, counts = _means(x, labels, c)
    keep = counts > 0
    remap = np.cumsum(keep) - 1
    return c[keep], remap[labels]


@dataclass(frozen=True)
class Params:
    target_size: int = 32  # mean entries per cluster: n_clusters = ceil(N / target_size)
    chunk_entries: int = 256  # position stripe, as No Cluster's
    kmeans_iters: int = 3  # Lloyd iterations after k-means++ seeding
    init_sample: int = 16384  # keys sampled for k-means++ seeding (all when fewer)
    ios_per_round: int = 64  # I/Os per SSD per batched submission

    def __post_init__(self) -> None:
        if min(self.target_size, self.chunk_entries, self.init_sample, self.ios_per_round) < 1:
            raise ValueError(f"sizes must be >= 1: {self}")
        if self.kmeans_iters < 0:
            raise ValueError(f"kmeans_iters must be >= 0: {self}")


class PQCache(DesignBase):
    """k-means clusters of keys, centroids as the index, entries striped by position."""

    name = "pqcache"
    # as seed 000 runs its baselines (§8.1): centroids in DRAM, scored by the host
    # in Swarm's pipeline (§7); PQCache's own system scores PQ codes on the GPU
    params_type = Params
    score_device = "cpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        p = self.params
        n = self.start(keys, layout)
        self.stripe = Stripe(p.chunk_entries, layout.n_ssd)
        k = math.ceil(n / p.target_size)
        self.centroids, labels = kmeans(self.keys.rows(), k, rng, p.kmeans_iters, p.init_sample)
        self._half = 0.5 * (self.centroids * self.centroids).sum(axis=1)
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(len(self.centroids) + 1))
        self.members = [order[bounds[c] : bounds[c + 1]] for c in range(len(self.centroids))]
        self.sizes = [len(m) for m in self.members]  # live list: the cache reads it
        self.cache = LRUCache(layout.cache_entries(self.index_bytes()), self.sizes)
        self.placed = n

    @property
    def n_clusters(self) -> int:
        return len(self.centroids)

    @property
    def slots_used(self) -> np.ndarray:
        return self.stripe.slots_used(self.placed)

    def index_bytes(self) -> int:
        return self.n_clusters * self.layout.key_bytes

    def host_bytes(self) -> int:
        """The index and the DRAM cache's room (:meth:`Layout.cache_entries`)."""
        return self.index_bytes() + self.cache.capacity * self.layout.entry_bytes

    def ssd_bytes(self) -> np.ndarray:
        return self.slots_used * self.layout.entry_bytes

    def _join(self, pos: int) -> None:
        """Token ``pos`` left the window: nearest centroid, next stripe slot."""
        c = int(np.argmax(self.centroids @ self.keys.rows()[pos] - self._half))
        self.members[c] = np.append(self.members[c], pos)
        self.sizes[c] += 1
        if self.cache.contains(c):
            self.cache.used += 1

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay = self.layout
        visible = self.advance(t, new_key)
        for pos in range(self.placed, visible - lay.local_window):
            self._join(pos)
        self.placed = max(self.placed, visible - lay.local_window)
        self.cache.set_capacity(lay.cache_entries(self.index_bytes()))  # joins grew cached ones
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = self.centroids @ np.asarray(query, dtype=np.float32)
        budget = lay.step_budget(visible)
        chosen, extra = take_units(scores, self.members, budget, always, visible)
        hit = np.array([self.cache.contains(int(c)) for c in chosen], dtype=bool)
        in_dram = [self.members[c] for c in chosen[hit]]
        from_dram = np.intersect1d(extra, np.concatenate(in_dram)) if in_dram else extra[:0]
        from_ssd = np.setdiff1d(extra, from_dram, assume_unique=True)
        extents = entry_reads(from_ssd, self.stripe, lay.entry_bytes)
        self.cache.touch(int(c) for c in chosen)
        d = self.centroids.shape[1]
        return StepDecision(
            selected=np.union1d(always, extra),
            dram_entries=len(always) + len(from_dram),
            ssd_extents=extents,
            rounds=io_rounds(extents, self.params.ios_per_round),
            score_flops=2.0 * d * self.n_clusters,
            score_bytes=float(self.n_clusters * lay.key_bytes),
            info={
                "clusters": float(self.n_clusters),
                "clusters_chosen": float(len(chosen)),
                "clusters_read": float((~hit).sum()),
                "cache_hits": float(hit.sum()),
                "read_entries": float(len(from_ssd)),
            },
        )


register("pqcache", Params, PQCache)
