"""Swarm's correlation-aware clustering (seed 000 §5.1 Steps 3-4, Algorithm 1, §6.2, §8.3).

Eqs. 2-4 (co-activation probability, distance, density) are read in
:mod:`sim.policies.swarm.cooccur`.  The rest, also reconstructed from the
prose because the equations and Algorithm 1 were lost in extraction:

* **Eq. 5** the distance of candidate j to cluster C is the mean pairwise
  distance ``mean_{c in C} d_jc`` (Jaccard distances, :mod:`.cooccur`); j
  joins C if it is ``< r``.  Both implementations add the ``d_jc`` in float64
  in join order (a running sum per candidate), so ties resolve identically.
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
  expansion once C has that many members.
* ``max_replicas`` (ours, default 2) skips candidates already in that many
  clusters.  §5.1 creates replicas for entries shared by *interleaved*
  patterns, at "negligible storage overhead": an entry at the junction of two
  patterns needs one copy in each, so two bounds the worst case at 2x the KV
  bytes while keeping the mechanism; a third pattern finds the entry through
  the copies it already has.  The measured mean is reported per run.
* **Thin profiles (ours).**  Entries selected by fewer than
  ``min_activations`` profiled queries (ineligible, :mod:`.cooccur`) take no
  part in Algorithm 1, and entries with no partner within r (density 0:
  their selections look like noise, nothing is co-activated with them) would
  be singletons.  Both are grouped by position: sorted by id, cut into
  ``ceil(n / g)`` runs of consecutive such entries as even as possible (at
  most ``g`` each), ``g`` = the median size of the co-activation clusters
  with two or more members (``target_size`` when there are none; at most
  ``max_cluster``), the middle one as medoid.  Attention is local in
  position, so neighbours are the best guess without a profile, and one index key per
  ``g`` of them keeps the index from filling with never-selected entries.
* **§8.3 ablations.**  *Medoid Only*: C is the medoid plus its candidates
  (capped), with no Eq. 5 test, so it is a superset of Swarm's cluster for the
  same medoid.  *No Replica*: candidates already in a cluster are skipped, so
  every entry is in exactly one cluster (``max_replicas = 1``).
* **Eq. 9** (§6.2 maintenance): the distance of a new entry e to cluster c is
  ``1 - n(e, m_c) / n(e)``, with ``n(e)`` the local-window steps that select e
  and ``n(e, m_c)`` those of them that select c's medoid too; e joins every c
  with distance < r (:func:`join_targets`; the paper's equation did not survive
  extraction: this reading, over the steps e was active, is kvtier's, not
  ``1 - a / w`` over all ``w`` window steps).
* **§8.3 Table 5's maintenance baselines** (one definition each, named by
  :data:`MAINTENANCE_RULES`): *Min-Size* "assigns new tokens based solely on
  cluster size": the cluster with the fewest members (:func:`min_size_target`);
  *Min-Diff* "assigns them based on similarity to the cluster medoid": the
  cluster whose medoid key differs least from the new entry's key, in
  Euclidean distance (:func:`min_diff_target`; our reading of "Diff" --
  the paper names no measure).  Each puts a new entry in exactly one
  cluster and never opens one.

The radius comes from the data (:func:`~.cooccur.choose_radius`: a quantile
of the k-th-nearest-neighbour distances) unless ``radius`` is given.

:func:`cluster_exact` is Algorithm 1 on the dense ``N x N`` matrix (the
reference).  :func:`cluster` runs the same algorithm from a
:class:`~sim.policies.swarm.cooccur.CoactivationIndex`.  Normally it first
builds the exact r-neighbour graph (:mod:`.cograph`: every pair within r,
found in blocked BLAS products over the band of selection counts where a pair
can be within r), which gives every density and candidate queue exactly, so
the result equals the reference at any N.  When the band is too wide for that
(``graph_pairs``; a radius near 1), it falls back to rows on demand:
candidate queues and Eq. 5 sums are still exact, and a medoid's density is
made exact before it is chosen (:class:`_MedoidQueue`); only the order in
which not-yet-counted entries are examined comes from densities estimated
from ``density_probes`` sampled entries (with no more eligible entries than
that, the result equals the reference).
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.swarm.cluster_metrics import clustering_quality, comembership_f1
from sim.policies.swarm.cooccur import (
    MAX_DENSE_ENTRIES,
    CoactivationIndex,
    Densities,
    as_activations,
    choose_radius,
    coactivation,
    jaccard_distance,
    selection_counts,
)
from sim.policies.swarm.types import Clustering

__all__ = [
    "MAINTENANCE_RULES",
    "ClusterParams",
    "cluster",
    "cluster_exact",
    "clustering_quality",
    "comembership_f1",
    "grow_clusters",
    "join_targets",
    "maintenance_targets",
    "min_diff_target",
    "min_size_target",
]

_WINDOW = 128  # candidates whose vectors are gathered at once during an expansion
_BATCH = 128  # medoid rows per BLAS product
_HEAD = 4  # candidate-queue heads of max_cluster * _HEAD ids are cached (int32)


_COUNTS = ("target_size", "max_cluster", "density_probes", "radius_probes", "graph_pairs")


@dataclass(frozen=True)
class ClusterParams:
    """Knobs of Algorithm 1 and of the scalable version."""

    radius: float | None = None  # r in (0, 1]; None -> choose_radius (k-NN quantile)
    target_size: int = 16  # k + 1 of the radius rule: the neighbourhood of a core entry
    radius_quantile: float = 0.5  # share of eligible entries with k neighbours inside r
    min_activations: int = 2  # profiled selections below which an entry is thin
    replicate: bool = True  # False = "No Replica" ablation
    medoid_only: bool = False  # True = "Medoid Only" ablation
    max_cluster: int = 256  # cap on members per cluster (medoid included)
    max_replicas: int | None = 2  # cap on clusters per entry (ours); None = unbounded
    exact: bool = False  # cluster() runs cluster_exact
    density_probes: int = 4096  # entries whose densities are counted; the rest estimated
    radius_probes: int = 512  # entries sampled to choose the radius
    graph_pairs: int = 10_000_000_000  # band pairs up to which the neighbour graph is built

    def __post_init__(self) -> None:
        if self.radius is not None and not 0.0 < self.radius <= 1.0:
            raise ValueError(f"radius must be in (0, 1], got {self.radius}")
        for name in _COUNTS:
            if getattr(self, name) < (2 if name == "target_size" else 1):
                raise ValueError(f"ClusterParams.{name} out of range: {getattr(self, name)}")
        if not 0.0 <= self.radius_quantile <= 1.0 or self.min_activations < 1:
            raise ValueError("ClusterParams: radius_quantile in [0, 1], min_activations >= 1")
        if self.max_replicas is not None and self.max_replicas < 1:
            raise ValueError(f"ClusterParams.max_replicas must be >= 1, got {self.max_replicas}")

    @property
    def replica_cap(self) -> int | None:
        """Clusters an entry may join: 1 without replication, else ``max_replicas``."""
        return 1 if not self.replicate else self.max_replicas


def _radius(X: sp.csr_matrix, params: ClusterParams, rng: np.random.Generator | None, probes: int):
    if params.radius is not None:
        return params.radius
    q, fmin = params.radius_quantile, params.min_activations
    return choose_radius(X, params.target_size, q, fmin, rng, probes)


def cluster_exact(X: sp.spmatrix | np.ndarray, params: ClusterParams) -> Clustering:
    """Algorithm 1 literally, on the dense ``N x N`` co-activation matrix (N <= 20000)."""
    X = as_activations(X)
    n = X.shape[1]
    if n > MAX_DENSE_ENTRIES:
        raise ValueError(f"cluster_exact refuses N = {n} > {MAX_DENSE_ENTRIES}; use cluster()")
    A = coactivation(X)
    f = selection_counts(X)
    ok = f >= params.min_activations  # eligible
    r = _radius(X, params, None, probes=n)

    def dist(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:  # Eq. 3, Jaccard
        return jaccard_distance(A[np.ix_(rows, cols)], f[rows][:, None], f[cols][None, :])

    el = np.flatnonzero(ok)
    rho = np.zeros(n, dtype=np.int64)  # Eq. 4
    for lo in range(0, len(el), 1024):
        rows = el[lo : lo + 1024]
        near = dist(rows, el) < r
        near[np.arange(len(rows)), np.arange(lo, lo + len(rows))] = False
        rho[rows] = near.sum(axis=1)
    count = np.zeros(n, dtype=np.int64)  # clusters each entry is in
    cap = params.replica_cap
    members: list[np.ndarray] = []
    lonely = list(np.flatnonzero(~ok))
    for m in el[np.lexsort((el, -rho[el]))]:
        if count[m]:
            continue
        if rho[m] == 0:  # no partner within r: grouped by position with the thin ones
            lonely.append(m)
            continue
        d = dist(np.array([m]), el)[0]  # the medoid's row
        sel = (d < r) & (el != m)
        cand, dc = el[sel], d[sel]
        keep = count[cand] < cap if cap is not None else np.ones(len(cand), bool)
        cand, dc = cand[keep], dc[keep]
        order = np.lexsort((cand, dc))
        cand, total = cand[order], dc[order].copy()  # running Eq. 5 sums, join order
        cl = [int(m)]
        for i, j in enumerate(cand.tolist()):
            if len(cl) >= params.max_cluster:
                break
            if params.medoid_only or total[i] / len(cl) < r:  # Eq. 5
                cl.append(j)
                if not params.medoid_only:
                    total += dist(cand, np.array([j]))[:, 0]
        members.append(np.array(cl, dtype=np.int64))
        count[cl] += 1
    members += thin_groups(np.array(lonely, dtype=np.int64), members, params)
    return Clustering(members=members, radius=float(r), n_entries=n)


def thin_groups(thin: np.ndarray, members: list[np.ndarray], params: ClusterParams) -> list:
    """Clusters of ``g`` consecutive thin entries, middle one first (module doc)."""
    if len(thin) == 0:
        return []
    sizes = np.array([len(m) for m in members if len(m) > 1], dtype=np.int64)
    g = min(int(np.median(sizes)) if len(sizes) else params.target_size, params.max_cluster)
    out = []
    for run in np.array_split(np.sort(thin), -(-len(thin) // g)):
        mid = len(run) // 2
        out.append(np.concatenate([run[mid : mid + 1], run[:mid], run[mid + 1 :]]))
    return out


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
    r = _radius(X, params, rng, params.radius_probes)
    index = CoactivationIndex(X, r, params.min_activations)
    if index.build_graph(params.graph_pairs):  # exact densities and queues: the reference
        density = index.graph_densities()
    else:
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
    covered = ~index.eligible_mask  # thin entries are grouped after Algorithm 1
    n_covered = int(covered.sum())
    cap = params.replica_cap
    members: list[np.ndarray] = []
    queue = _MedoidQueue(index, density, covered, _head(params))
    lonely = [np.flatnonzero(~index.eligible_mask)]
    while n_covered < n:
        m, cand, complete = queue.pop()
        if complete and len(cand) == 0:  # no partner within r (d is symmetric: nobody
            lonely.append(np.array([m]))  # has m as a candidate either)
            covered[m] = True
            n_covered += 1
            continue
        cl = _expand(index, m, cand if cap is None else cand[count[cand] < cap], params)
        if not complete and len(cl) < params.max_cluster:  # the head ran out: redo in full
            cand = index.neighbours(m)
            cl = _expand(index, m, cand if cap is None else cand[count[cand] < cap], params)
        new = cl[~covered[cl]]
        covered[new] = True
        count[cl] += 1
        n_covered += len(new)
        members.append(cl)
    members += thin_groups(np.concatenate(lonely), members, params)
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
    """Step 4, ``_WINDOW`` candidates at a time.

    One count matrix per window (popcounts, :meth:`~.cooccur.CoactivationIndex.counts`)
    gives its distances to the members so far and to itself.  A window's running
    Eq. 5 sums start as the sequential (cumsum) sum of its distances to the members
    in join order; each join adds the new member's distances to the candidates
    after it (its row of the window's distances: d is symmetric bit for bit, exact
    integer counts and a commuted sum), the reference's order.  Earlier
    candidates' sums are never read again.
    """
    cap = params.max_cluster
    head = np.array([medoid], dtype=np.int64)
    if params.medoid_only or len(cand) == 0:
        return np.concatenate([head, cand[: cap - 1]])
    r, f = index.radius, index.freq
    members = [int(medoid)]
    for lo in range(0, len(cand), _WINDOW):
        if len(members) >= cap:
            break
        win = cand[lo : lo + _WINDOW]
        n_mem = len(members)
        ids = np.concatenate([members, win])
        d = jaccard_distance(index.counts(win, ids), f[win][:, None], f[ids])
        total = np.cumsum(d[:, :n_mem], axis=1)[:, -1]
        dww = d[:, n_mem:]
        for k, j in enumerate(win.tolist()):
            if len(members) >= cap:
                break
            if total.item(k) / len(members) < r:  # Eq. 5
                members.append(j)
                total[k + 1 :] += dww[k, k + 1 :]
    return np.array(members, dtype=np.int64)


# How a token leaving the local window is placed (§6.2, §8.3 Table 5): Swarm's Eq. 9
# on the co-activations seen in the window, or one of Table 5's two baselines.
MAINTENANCE_RULES = ("coactivation", "min-size", "min-diff")


def join_targets(co: Counter[int], n: int, radius: float, cap: int | None) -> list[int]:
    """Swarm's Eq. 9 online: of the clusters with ``d = 1 - co[c] / n < radius``
    (``n`` steps the token was active, ``co[c]`` of them with c's medoid), the
    ``cap`` nearest (ties: lower index; all when ``cap`` is None), ascending.
    ``n = 0`` (never active): none (the caller opens a singleton)."""
    if not n:
        return []
    near = sorted((1.0 - k / n, c) for c, k in co.items() if 1.0 - k / n < radius)
    return sorted(c for _, c in near[:cap])


def min_size_target(sizes: np.ndarray) -> int:
    """Table 5's Min-Size: the cluster with the fewest members (ties: lower index)."""
    if len(sizes) == 0:
        raise ValueError("min-size: no cluster to join")
    return int(np.argmin(sizes))


def min_diff_target(medoid_keys: np.ndarray, key: np.ndarray) -> int:
    """Table 5's Min-Diff: the cluster whose medoid key is nearest to ``key``
    (squared Euclidean distance in float64; ties: lower index)."""
    if len(medoid_keys) == 0:
        raise ValueError("min-diff: no cluster to join")
    diff = np.asarray(medoid_keys, dtype=np.float64) - np.asarray(key, dtype=np.float64)
    return int(np.argmin(np.einsum("ij,ij->i", diff, diff)))


def maintenance_targets(
    rule: str,
    co: Counter[int],
    n_active: int,
    radius: float,
    cap: int | None,
    sizes: np.ndarray,
    medoid_keys: np.ndarray,
    key: np.ndarray,
) -> list[int]:
    """The clusters a token leaving the window joins under ``rule``
    (:data:`MAINTENANCE_RULES`); empty: it opens its own (Eq. 9 only)."""
    if rule == "coactivation":
        return join_targets(co, n_active, radius, cap)
    if rule == "min-size":
        return [min_size_target(sizes)]
    if rule == "min-diff":
        return [min_diff_target(medoid_keys, key)]
    raise ValueError(f"maintenance rule must be one of {MAINTENANCE_RULES}, got {rule!r}")
