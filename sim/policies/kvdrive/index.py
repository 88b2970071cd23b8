"""KVDrive's hierarchical index (seed 003 §4): chunks, then centroids over them.

Built at prefill from the prefix keys of one layer:

1. the prefix is cut into chunks of ``chunk_size`` consecutive tokens; each
   chunk is represented by its *mean key* (ShadowKV/Quest-style spatial
   chunking, which keeps local semantic continuity);
2. the chunk means are grouped by k-means into ``ceil(n_chunks /
   chunks_per_centroid)`` centroids (similarity grouping over chunks, not
   over tokens: a centroid's members are whole chunks, i.e. runs of
   consecutive positions).

The k-means is the *two-level* build (:func:`tree_kmeans`, ``build="tree"``,
the default): ``ceil(sqrt(k))`` coarse groups by k-means, then each group's
share of the ``k`` centroids by k-means inside the group.  Every chunk is in
one group and one of its group's clusters, so the centroids still partition
the chunks; the distance products fall from ``n_chunks x k`` to about
``n_chunks x 2 sqrt(k)`` per Lloyd iteration (360K tokens: 92K chunks, 11.5K
centroids, 54x fewer), and k-means++ seeding runs per group (``k_g x n_g``)
instead of over a 16K-chunk sample for all ``k`` centres.  The price is that
a chunk can only join a centroid of its coarse group (a chunk near a group
border may miss its nearest centroid).  ``build="exact"`` is the flat
k-means over all chunks (the build before; identical results), and below
``LEAF`` centroids both are the same flat k-means.

Selection scores the *centroids only*, on the GPU: ``2 x d x n_centroids``
FLOPs over ``n_centroids x key_bytes`` of index, the cost the paper's
"number of centroids" sensitivity (Fig. 18) moves.  Centroids are then taken
in descending score until the budget fills (:func:`take_units`, the rule all
designs share).  The index held in GPU memory is the centroids plus one
4-byte centroid id per chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.policies.baselines.pqcache import kmeans
from sim.policies.kvdrive.memo import BuildMemo, array_digest

CHUNK_ID_BYTES = 4  # one int32 centroid id per chunk
LEAF = 256  # up to this many centroids the two-level build is the flat k-means
BUILDS = ("tree", "exact")
# indexes built in this process, reused by every variant over the same keys (memo.py);
# 1 GiB holds a 360K-token lane's index (~60 MB) many times over
BUILT = BuildMemo(1 << 30)


@dataclass
class HierIndex:
    """Chunks (``chunk_size`` consecutive tokens) and the centroids over them."""

    chunk_size: int
    chunk_keys: np.ndarray  # (n_chunks, d) mean key of each chunk
    centroids: np.ndarray  # (n_centroids, d)
    chunk_label: np.ndarray  # (n_chunks,) centroid of each chunk
    members: list[np.ndarray]  # per centroid: its entry ids, chunk by chunk, ascending

    @property
    def n_centroids(self) -> int:
        return len(self.centroids)

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_keys)

    def index_bytes(self, key_bytes: int) -> int:
        """GPU memory of the index: centroids (a key each) and chunk -> centroid ids."""
        return self.n_centroids * key_bytes + self.n_chunks * CHUNK_ID_BYTES

    def score_cost(self, key_bytes: int) -> tuple[float, float]:
        """(FLOPs, bytes) of scoring one query against every centroid."""
        d = self.centroids.shape[1]
        return 2.0 * d * self.n_centroids, float(self.n_centroids * key_bytes)


def chunk_means(keys: np.ndarray, chunk_size: int) -> np.ndarray:
    """Mean key of each run of ``chunk_size`` tokens (the last run may be shorter)."""
    keys = np.asarray(keys, dtype=np.float32)
    n = len(keys)
    starts = np.arange(0, n, chunk_size)
    sums = np.add.reduceat(keys, starts, axis=0)
    counts = np.minimum(starts + chunk_size, n) - starts
    return (sums / counts[:, None]).astype(np.float32)


def apportion(sizes: np.ndarray, k: int) -> np.ndarray:
    """Centroids per group: ``k`` split in proportion to ``sizes`` by largest
    remainder, each group at least 1 and at most its size (so the total is
    ``k`` unless those bounds force otherwise)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    share = k * sizes / max(int(sizes.sum()), 1)
    out = np.clip(np.floor(share).astype(np.int64), 1, sizes)
    short = k - int(out.sum())
    if short > 0:  # largest remainders first, among groups with room
        room = np.flatnonzero(out < sizes)
        order = room[np.lexsort((room, -(share[room] - np.floor(share[room]))))]
        out[order[:short]] += 1
    return out


def tree_kmeans(
    x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 3, leaf: int = LEAF
) -> tuple[np.ndarray, np.ndarray]:
    """Two-level k-means (see the module doc): (centroids, labels) as
    :func:`~sim.policies.baselines.pqcache.kmeans` returns them; flat up to
    ``leaf`` centroids."""
    x = np.asarray(x, dtype=np.float32)
    k = min(k, len(x))
    if k <= leaf:
        return kmeans(x, k, rng, iters)
    _, group = kmeans(x, math.ceil(math.sqrt(k)), rng, iters)
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    want = apportion(sizes, k)
    cents, labels, base = [], np.empty(len(x), dtype=np.int64), 0
    for g in range(len(sizes)):  # one small k-means per coarse group
        rows = order[bounds[g] : bounds[g + 1]]
        c, lab = kmeans(x[rows], int(want[g]), rng, iters)
        cents.append(c)
        labels[rows] = lab + base
        base += len(c)
    return np.concatenate(cents), labels


def build_index(
    keys: np.ndarray,
    chunk_size: int,
    chunks_per_centroid: int,
    rng: np.random.Generator,
    iters: int = 3,
    build: str = "tree",
) -> HierIndex:
    """The two-level index over ``keys`` (N, d) (see the module doc); built
    once per (keys, parameters, ``rng`` state) in a process (:data:`BUILT`)."""
    key = (array_digest(keys), chunk_size, chunks_per_centroid, iters, build)

    def fresh() -> HierIndex:
        return _build_index(keys, chunk_size, chunks_per_centroid, rng, iters, build)

    return BUILT.get_or_build(key, rng, fresh, _index_nbytes)


def _index_nbytes(index: HierIndex) -> int:
    arrays = [index.chunk_keys, index.centroids, index.chunk_label, *index.members]
    return sum(a.nbytes for a in arrays)


def _build_index(
    keys: np.ndarray,
    chunk_size: int,
    chunks_per_centroid: int,
    rng: np.random.Generator,
    iters: int,
    build: str,
) -> HierIndex:
    """:func:`build_index` without the memo; its arrays are read-only, since
    every design over the same keys may share them."""
    means = chunk_means(keys, chunk_size)
    k = math.ceil(len(means) / chunks_per_centroid)
    cluster = tree_kmeans if build == "tree" else kmeans
    centroids, labels = cluster(means, k, rng, iters)
    n = len(keys)
    token_label = np.repeat(labels, chunk_size)[:n]
    order = np.argsort(token_label, kind="stable")  # by centroid, then position
    bounds = np.searchsorted(token_label[order], np.arange(len(centroids) + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(len(centroids))]
    for a in (means, centroids, labels, order):
        a.setflags(write=False)
    return HierIndex(chunk_size, means, centroids, labels, members)
