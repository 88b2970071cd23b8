"""Swarm's correlation-aware clustering (seed 000 §5.1 Steps 3-4, Algorithm 1, §6.2, §8.3).

Eqs. 2-4 (co-activation probability, distance, density) are read in
:mod:`sim.policies.swarm.cooccur`.  The rest, also reconstructed from the
prose because the equations and Algorithm 1 were lost in extraction:

* **Eq. 5** the distance of candidate j to cluster C is the mean pairwise
  distance ``mean_{c in C} d_jc = 1 - sum_c A_jc / (T |C|)``; j joins C if it
  is ``< r``.  Both implementations evaluate that right-hand form from
  integer counts, so ties resolve identically.
* **Algorithm 1.**  The medoid queue Q holds all entries by descending density
  (ties: lower id).  The next entry of Q that is in no cluster yet becomes a
  medoid m (Lines 6-10).  Its candidate queue holds every ``j != m`` with
  ``d_mj < r``, nearest first (ties: lower id), so every member lies within r
  of its medoid, as §5.2 states.  Each candidate is fetched once and joins if
  Eq. 5 holds (Lines 11-28: "until no further entries can be incorporated" =
  until the candidate queue is empty; a rejected candidate is not retried).
  Candidates may already belong to other clusters: that is how replicas arise
  ("the algorithm naturally creates replicas").  Clustering stops once every
  entry is in a cluster; an entry without neighbours is a singleton.
* ``max_cluster`` (ours; the paper bounds size by r alone) stops an
  expansion once C has that many members.  ``max_replicas`` (ours, off by
  default) skips candidates already in that many clusters.
* **§8.3 ablations.**  *Medoid Only*: C is the medoid plus its candidates
  (capped), with no Eq. 5 test, so it is a superset of Swarm's cluster for the
  same medoid.  *No Replica*: candidates already in a cluster are skipped, so
  every entry is in exactly one cluster (``max_replicas = 1``).
* **Eq. 9** (§6.2 maintenance): the distance of a new entry e to cluster c is
  ``1 - a_e,m_c / w``, with ``a_e,m_c`` the number of the ``w`` local-window
  steps that select both e and c's medoid; e joins every c with distance < r.

Popularity caveat: ``d_ij`` is not normalised by frequency, so an entry
selected by most queries is near everything, comes first in every candidate
queue and passes every Eq. 5 test.  With replicas unbounded, such entries
join nearly every cluster (on the default generated trace at N = 128K: mean
replication ~54, most clusters full at ``max_cluster``).  ``max_replicas``
bounds that; dropping always-selected entries (sinks, local window) from the
profile helps too.

:func:`cluster_exact` is Algorithm 1 on the dense ``N x N`` matrix (the
reference).  :func:`cluster` runs the same algorithm from a
:class:`~sim.policies.swarm.cooccur.CoactivationIndex`: candidate queues and
Eq. 5 sums are exact, and a medoid's density is made exact before it is
chosen (:class:`_MedoidQueue`); only the order in which not-yet-counted
entries are examined comes from densities estimated from ``density_probes``
sampled entries.  With no more eligible entries than that, the result equals
the reference.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.swarm.cluster_metrics import clustering_quality, comembership_f1
from sim.policies.swarm.cooccur import (
    MAX_DENSE_ENTRIES,
    CoactivationIndex,
    Densities,
    as_activations,
    choose_level,
    coactivation,
    radius_for_level,
)
from sim.policies.swarm.types import Clustering

__all__ = [
    "ClusterParams",
    "assign_new_entry",
    "cluster",
    "cluster_exact",
    "clustering_quality",
    "comembership_f1",
    "grow_clusters",
]

_WINDOW = 128  # candidates whose vectors are gathered at once during an expansion
_MAX_WINDOW = 4096
_RUN = 64  # candidates tried as one run of joins
_LOWER = np.tril(np.ones((_RUN, _RUN), dtype=np.float32))
_BATCH = 128  # medoid rows per BLAS product
_HEAD = 4  # candidate-queue heads of max_cluster * _HEAD ids are cached (int32)


@dataclass(frozen=True)
class ClusterParams:
    """Knobs of Algorithm 1 and of the scalable version."""

    radius: float | None = None  # r in (0, 1]; None -> chosen for target_size (choose_level)
    target_size: int = 32  # neighbourhood size of the median entry when radius is None
    replicate: bool = True  # False = "No Replica" ablation
    medoid_only: bool = False  # True = "Medoid Only" ablation
    max_cluster: int = 256  # cap on members per cluster (medoid included)
    max_replicas: int | None = None  # cap on clusters per entry (ours); None = unbounded
    exact: bool = False  # cluster() runs cluster_exact
    density_probes: int = 4096  # entries whose densities are counted; the rest estimated
    radius_probes: int = 512  # entries sampled to choose the radius

    def __post_init__(self) -> None:
        if self.radius is not None and not 0.0 < self.radius <= 1.0:
            raise ValueError(f"radius must be in (0, 1], got {self.radius}")
        for name in ("target_size", "max_cluster", "density_probes", "radius_probes"):
            if getattr(self, name) < (2 if name == "target_size" else 1):
                raise ValueError(f"ClusterParams.{name} out of range: {getattr(self, name)}")
        if self.max_replicas is not None and self.max_replicas < 1:
            raise ValueError(f"ClusterParams.max_replicas must be >= 1, got {self.max_replicas}")

    @property
    def replica_cap(self) -> int | None:
        """Clusters an entry may join: 1 without replication, else ``max_replicas``."""
        return 1 if not self.replicate else self.max_replicas


def _radius(X: sp.csr_matrix, params: ClusterParams, rng: np.random.Generator | None, probes: int):
    if params.radius is not None:
        return params.radius
    return radius_for_level(choose_level(X, params.target_size, rng, probes), X.shape[0])


def cluster_exact(X: sp.spmatrix | np.ndarray, params: ClusterParams) -> Clustering:
    """Algorithm 1 literally, on the dense ``N x N`` co-activation matrix (N <= 20000)."""
    X = as_activations(X)
    T, n = X.shape
    if n > MAX_DENSE_ENTRIES:
        raise ValueError(f"cluster_exact refuses N = {n} > {MAX_DENSE_ENTRIES}; use cluster()")
    A = coactivation(X)
    r = _radius(X, params, None, probes=n)
    rho = np.empty(n, dtype=np.int64)  # Eq. 4
    for lo in range(0, n, 1024):
        near = 1.0 - A[lo : lo + 1024] / T < r
        near[np.arange(len(near)), np.arange(lo, lo + len(near))] = False
        rho[lo : lo + 1024] = near.sum(axis=1)
    count = np.zeros(n, dtype=np.int64)  # clusters each entry is in
    cap = params.replica_cap
    members: list[np.ndarray] = []
    for m in np.lexsort((np.arange(n), -rho)):
        if count[m]:
            continue
        d = 1.0 - A[m] / T  # Eq. 3, the medoid's row
        cand = np.flatnonzero(d < r)
        cand = cand[cand != m]
        if cap is not None:
            cand = cand[count[cand] < cap]
        cand = cand[np.lexsort((cand, d[cand]))]
        cl = [int(m)]
        for j in cand:
            if len(cl) >= params.max_cluster:
                break
            if params.medoid_only or 1.0 - A[j, cl].sum() / (T * len(cl)) < r:  # Eq. 5
                cl.append(int(j))
        members.append(np.array(cl, dtype=np.int64))
        count[cl] += 1
        if count.all():
            break
    return Clustering(members=members, radius=float(r), n_entries=n)


def cluster(
    X: sp.spmatrix | np.ndarray, params: ClusterParams, rng: np.random.Generator | None = None
) -> Clustering:
    """Algorithm 1 at scale (bounded memory; see the module docstring).

    ``rng`` (default ``default_rng(0)``) draws the radius and density probes;
    the same input and seed give the same clustering.
    """
    if params.exact:
        return cluster_exact(X, params)
    X = as_activations(X)
    rng = rng if rng is not None else np.random.default_rng(0)
    index = CoactivationIndex(X, _radius(X, params, rng, params.radius_probes))
    density = index.densities(params.density_probes, rng, head=_head(params))
    return grow_clusters(index, density, params)


def grow_clusters(
    index: CoactivationIndex, density: Densities, params: ClusterParams
) -> Clustering:
    """Algorithm 1's medoid loop over ``index``; densities may be partly estimated.

    The medoid queue (:class:`_MedoidQueue`) makes a density exact before
    committing to a medoid.
    """
    n = index.n_entries
    count = np.zeros(n, dtype=np.int64)  # clusters each entry is in
    covered = np.zeros(n, dtype=bool)
    n_covered = 0
    cap = params.replica_cap
    members: list[np.ndarray] = []
    queue = _MedoidQueue(index, density, covered, _head(params))
    while n_covered < n:
        m, cand, complete = queue.pop()
        cl = _expand(index, m, cand if cap is None else cand[count[cand] < cap], params)
        if not complete and len(cl) < params.max_cluster:  # the head ran out: redo in full
            cand = index.neighbours(m)
            cl = _expand(index, m, cand if cap is None else cand[count[cand] < cap], params)
        new = cl[~covered[cl]]
        covered[new] = True
        count[cl] += 1
        n_covered += len(new)
        members.append(cl)
    return Clustering(members=members, radius=index.radius, n_entries=n)


class _MedoidQueue:
    """Medoid queue Q with lazily exact densities (a lazy-greedy priority queue).

    Entries with exact densities sit in a heap; the others wait in order of
    their estimates.  Before a waiting entry can become a medoid its row is
    computed (with the next ones, ``_BATCH`` rows per BLAS product), giving its
    exact density and candidate queue, and it moves to the heap.  The heap's
    top is the medoid once no waiting entry has a higher estimate.  With all
    densities exact this is the reference order; with estimates,
    over-estimated entries sink to their place and only under-estimated ones
    can come late.  Only the head of each candidate queue is kept
    (``head`` ids, int32); an expansion that runs past it is redone from the
    full queue, which is rare (it has to reject most of the head).
    """

    def __init__(
        self, index: CoactivationIndex, density: Densities, covered: np.ndarray, head: int
    ):
        self.head = head
        self.index = index
        self.estimate = density.value
        waiting = np.flatnonzero(~density.exact)
        self.order = waiting[np.lexsort((waiting, -density.value[waiting]))]
        self.next = 0  # first entry of `order` not refined yet
        self.covered = covered  # shared with the caller, who updates it
        exact = np.flatnonzero(density.exact)
        keys = (-density.value[exact]).astype(np.int64).tolist()
        self.heap = list(zip(keys, exact.tolist(), strict=True))
        heapq.heapify(self.heap)  # (-exact density, entry)
        self.cands = density.neighbours  # heads of candidate queues, for exact entries

    def pop(self) -> tuple[int, np.ndarray, bool]:
        """The uncovered entry of highest density (ties: lower id), the head of its
        candidate queue, and whether that head is the whole queue."""
        while True:
            while self.heap and self.covered[self.heap[0][1]]:
                self.cands.pop(heapq.heappop(self.heap)[1], None)
            while self.next < len(self.order) and self.covered[self.order[self.next]]:
                self.next += 1
            waiting = self.next < len(self.order)
            if self.heap and (
                not waiting
                or self.heap[0] <= (-self.estimate[self.order[self.next]], self.order[self.next])
            ):
                rho, m = heapq.heappop(self.heap)
                cand = self.cands.pop(m, None)
                if cand is None:  # ineligible (no candidates) or a probe beyond the budget
                    cand = self.index.neighbours(m)
                return m, cand, len(cand) == -rho
            if not waiting:
                raise RuntimeError("medoid queue exhausted with uncovered entries")
            self._refine()

    def _refine(self) -> None:
        """Exact densities and candidates of the next waiting entries (``_BATCH`` eligible)."""
        pos = np.arange(self.next, min(self.next + 4 * _BATCH, len(self.order)))
        pos = pos[~self.covered[self.order[pos]]]
        eligible = self.index.eligible_mask[self.order[pos]]
        if eligible.sum() > _BATCH:
            pos = pos[: np.flatnonzero(eligible)[_BATCH - 1] + 1]
            eligible = eligible[: len(pos)]
            self.next = int(pos[-1]) + 1
        else:
            self.next = min(self.next + 4 * _BATCH, len(self.order))
        ids = self.order[pos]
        rows = iter(self.index.rows(ids[eligible]) if eligible.any() else ())
        for m, ok in zip(ids.tolist(), eligible.tolist(), strict=True):
            cand = self.index.neighbours(m, next(rows)) if ok else np.empty(0, np.int64)
            heapq.heappush(self.heap, (-len(cand), m))
            if ok:
                self.cands[m] = cand[: self.head].astype(np.int32)


def _head(params: ClusterParams) -> int:
    return _HEAD * params.max_cluster


def _expand(
    index: CoactivationIndex, medoid: int, cand: np.ndarray, params: ClusterParams
) -> np.ndarray:
    """Step 4 from dense vectors: ``sum_c A_jc = x_j . sum_c x_c``, window by window.

    Vectorised but sequentially equivalent: alternately find the next
    candidate that joins with the members fixed, then the longest run of
    candidates that each join given that all before them in the run did.
    Windows without a join double in size (up to ``_MAX_WINDOW``).
    """
    cap = params.max_cluster
    head = np.array([medoid], dtype=np.int64)
    if params.medoid_only or len(cand) == 0:
        return np.concatenate([head, cand[: cap - 1]])
    T, r = index.n_queries, index.radius
    exact32 = cap * T < 2**24  # float32 sums of 0/1 products are exact integers
    total = index.vectors(head)[0].astype(np.float32 if exact32 else np.float64)
    parts, n, lo, width = [head], 1, 0, _WINDOW
    while lo < len(cand) and n < cap:
        win = cand[lo : lo + width]
        vecs = index.vectors(win)
        sums = (vecs @ total).astype(np.float64)  # sum_c A_jc over the current members
        k, joined = 0, False
        while k < len(win) and n < cap:
            joins = np.flatnonzero(1.0 - sums[k:] / (T * n) < r)  # Eq. 5, members fixed
            if len(joins) == 0:
                break
            k += int(joins[0])
            block = vecs[k : k + _RUN]
            m = len(block) - 1  # prefix[j] = x_k + ... + x_(k+j), exact (BLAS beats cumsum)
            prefix = _LOWER[:m, :m] @ block[:-1]
            before = np.zeros(len(block))  # sum_{b<j} A(k+b, k+j) = x_(k+j) . prefix[j-1]
            before[1:] = np.einsum("ij,ij->i", block[1:], prefix)
            sizes = n + np.arange(len(block))
            fails = np.flatnonzero(1.0 - (sums[k : k + len(block)] + before) / (T * sizes) >= r)
            run = min(int(fails[0]) if len(fails) else len(block), cap - n)
            parts.append(win[k : k + run])
            added = vecs[k : k + run].sum(axis=0)  # float32: at most _WINDOW per query
            total += added
            sums += vecs @ added
            n += run
            k += run + (run < len(block))  # a failed candidate had every earlier one in
            joined = True
        lo += len(win)
        width = _WINDOW if joined else min(2 * width, _MAX_WINDOW)
    return np.concatenate(parts)


def assign_new_entry(
    clustering: Clustering,
    X_window: sp.spmatrix | np.ndarray,
    entry: int,
    radius: float | None = None,
) -> list[int]:
    """Clusters a new entry joins (§6.2, Eq. 9), in ascending cluster index.

    ``X_window`` is the ``w x N'`` boolean activations of the ``w`` local-window
    steps since ``entry`` was generated (columns: entry ids, medoids included).
    Cluster c is joined when ``1 - a / w < r`` (``r`` defaults to
    ``clustering.radius``), ``a`` = steps selecting both ``entry`` and c's
    medoid.  Several clusters -> replicas; none -> the caller makes a singleton.
    """
    X = as_activations(X_window)
    w, n_cols = X.shape
    medoids = clustering.medoids
    if not 0 <= entry < n_cols or (len(medoids) and medoids.max() >= n_cols):
        raise ValueError(f"X_window has {n_cols} columns; needs entry {entry} and every medoid")
    r = clustering.radius if radius is None else radius
    steps = X.tocsc()[:, entry].indices
    counts = np.asarray(X[steps][:, medoids].sum(axis=0)).ravel()
    return np.flatnonzero(1.0 - counts / w < r).tolist()
