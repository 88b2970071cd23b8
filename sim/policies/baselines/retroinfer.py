"""RetroInfer (seed 003 §2.2, §9.1): wave index and a cluster-granular GPU buffer.

* index (on the GPU): k-means clusters of the prefix keys, their centroids,
  clustered segment by segment (``segment_tokens`` consecutive tokens each,
  RetroInfer's segmented clustering: a cluster never spans two segments, so
  the build costs O(N x segment) rather than O(N^2) at long contexts);
* selection, the tripartite attention: clusters in descending centroid
  score; the first ones up to the budget are attended *exactly* (their
  entries are selected and must be on the GPU); the next
  ``estimate_clusters`` are *estimated* from their centroid and size
  (``4 x d`` FLOPs each, no KV moved, not counted as selected); the rest are
  ignored;
* the mechanism that distinguishes it, the wave buffer: a GPU cache of whole
  clusters (LRU over clusters, capacity ``buffer_entries`` or ``window x``
  the step budget): a cluster selected again is a hit for all its entries, a
  miss copies the whole cluster from DRAM.  The KV lives in DRAM (nothing on
  SSD).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.baselines.pqcache import kmeans
from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.kvdrive.gpucache import WindowCache
from sim.policies.selection import always_selected, take_units
from sim.registry import ParamError


@dataclass(frozen=True)
class Params:
    cluster_size: int = 16  # mean entries per k-means cluster
    estimate_clusters: int = 64  # clusters estimated from their centroid
    window: int = 2  # buffer as a multiple of the step budget
    buffer_entries: int = 0  # > 0: the buffer's capacity in entries instead of window
    segment_tokens: int = 8192  # tokens clustered together (0: the whole prefix at once)

    def __post_init__(self) -> None:
        if self.cluster_size < 1:
            raise ParamError("cluster_size", f"must be >= 1, got {self.cluster_size}")
        for name in ("estimate_clusters", "window", "buffer_entries", "segment_tokens"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0, got {getattr(self, name)}")


def segmented_kmeans(
    x: np.ndarray, cluster_size: int, segment: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """k-means (``ceil(len / cluster_size)`` clusters) over each run of ``segment``
    rows on its own; (centroids, labels) numbered across segments in order."""
    cents, labels, base = [], [], 0
    for s in range(0, len(x), segment):
        part = x[s : s + segment]
        c, lab = kmeans(part, max(1, -(-len(part) // cluster_size)), rng)
        cents.append(c)
        labels.append(lab + base)
        base += len(c)
    return np.concatenate(cents), np.concatenate(labels)


class RetroInfer(DesignBase):
    """Exact, estimated and ignored clusters; whole clusters buffered on the GPU."""

    name = "retroinfer"
    params_type = Params
    score_device = "gpu"

    def build(
        self, activations: sp.csr_matrix, keys: np.ndarray, layout: Layout, rng: np.random.Generator
    ) -> None:
        p = self.params
        n = self.start(keys, layout)
        self.centroids, labels = segmented_kmeans(
            self.keys.rows(), p.cluster_size, p.segment_tokens or n, rng
        )
        order = np.argsort(labels, kind="stable")
        cuts = np.cumsum(np.bincount(labels, minlength=len(self.centroids)))[:-1]
        self.members = np.split(order.astype(np.int64), cuts)
        cap = p.buffer_entries or p.window * layout.step_budget(n + 1)
        self.buffer = WindowCache(cap, "lru")

    def index_bytes(self) -> int:
        return len(self.centroids) * self.layout.key_bytes

    def host_bytes(self) -> int:
        """Every entry's KV in DRAM (the wave buffer copies whole clusters from it)."""
        return self.visible * self.layout.entry_bytes

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay, p = self.layout, self.params
        visible = self.advance(t, new_key)
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = self.centroids @ np.asarray(query, dtype=np.float32)
        chosen, extra = take_units(scores, self.members, lay.step_budget(visible), always, visible)
        whole = np.setdiff1d(np.concatenate([self.members[c] for c in chosen] or [[]]), always)
        whole = whole.astype(np.int64)
        hit_whole = self.buffer.access(t, whole, np.zeros_like)
        hit = hit_whole[np.searchsorted(whole, extra)]
        n_est = min(p.estimate_clusters, len(self.centroids) - len(chosen))
        d = self.centroids.shape[1]
        return StepDecision(
            selected=np.union1d(always, extra),
            dram_entries=len(always) + len(extra),
            ssd_extents=[np.zeros((0, 2), dtype=np.int64)] * lay.n_ssd,
            score_flops=2.0 * d * len(self.centroids) + 4.0 * d * n_est,
            score_bytes=float(len(self.centroids) * lay.key_bytes),
            info={
                "gpu_hits": float(hit.sum()),
                "gpu_misses": float((~hit).sum()),
                "h2d_entries": float((~hit_whole).sum()),  # whole clusters move
                "estimated_clusters": float(n_est),
                "cache_capacity": float(self.buffer.capacity),
            },
        )


register("retroinfer", Params, RetroInfer)
