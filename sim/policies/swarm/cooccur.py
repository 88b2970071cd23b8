"""Co-activation distances for Swarm's clustering (seed 000 §5.1, Steps 1-3).

The equations were lost in extraction; our readings (per layer, X is the
``T x N`` boolean profile, one row per profiled query, one column per entry;
``A_ij`` = queries selecting i and j together, ``f_i = A_ii`` = queries
selecting i):

* **Eqs. 2-3, normalised (ours).**  ``d_ij = 1 - A_ij / (f_i + f_j - A_ij)``,
  the Jaccard distance of the two entries' selection sets: 0 when every query
  that selects one selects the other, 1 when they never meet.  The earlier
  reading ``1 - A_ij / T`` is not normalised by popularity: an entry selected
  by most queries was "near" everything, joined nearly every cluster (24.6
  copies per entry at 8K, 51.5 at 128K) and left rare entries as singletons.
  Under Jaccard a popular entry (f = T) and a rare one (f = 2, selected with
  it) have d = 1 - 2/T: far apart.  ``0 / 0`` (two never-selected entries)
  reads as d = 1.
* **Eq. 4** ``rho_i = |{j != i : d_ij < r}|`` for cluster radius ``r``.
* **Thin profiles (ours).**  An entry selected by fewer than
  ``min_activations`` profiled queries has no measurable co-activation (one
  observation gives d = 0 to everything selected with it by chance); it is
  *ineligible*: never a neighbour, never a medoid.  :mod:`.cluster` groups
  such entries by position instead.
* **Radius (ours, from the data).**  :func:`choose_radius`: for each probed
  eligible entry, the distance to its ``k``-th nearest eligible neighbour
  (``k = target_size - 1``); r is the ``quantile`` of those distances, moved
  one ulp outward so that the entry at the quantile has its ``k`` neighbours
  strictly inside (``d < r``).  Meaning: at the median (quantile 0.5), half of
  the measurable entries have at least ``target_size - 1`` co-activated
  partners within r -- the DBSCAN "core point" condition at min_pts =
  ``target_size``.  The size of the clusters follows from the data, not from
  ``target_size``.

Both the dense reference and the scalable index evaluate the same float64
expression (:func:`jaccard_distance`) from exact integer counts, so they agree
bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.swarm.cograph import (
    NeighbourGraph,
    jaccard_distance,
    neighbour_graph,
    packed_bits,
)

MAX_DENSE_ENTRIES = 20_000  # largest N for which an N x N matrix is built
_BINS = 16  # selection-count bins pooled for the density prior
_BLOCK = 128  # probe rows per BLAS product (128 x N float64 = 128 MB at N = 128K)


def as_activations(X: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """``X`` as a canonical ``T x N`` boolean CSR matrix (sorted, no duplicates)."""
    csr = sp.csr_matrix(X, dtype=bool)
    if csr.ndim != 2 or csr.shape[0] < 1:
        raise ValueError(f"activations must be T x N with T >= 1, got shape {csr.shape}")
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr


def coactivation(X: sp.spmatrix | np.ndarray) -> np.ndarray:
    """Dense ``N x N`` co-activation counts ``A = X^T X``.

    ``uint16`` when ``T < 65536`` (counts never exceed T), else ``int64``.
    Refuses ``N > MAX_DENSE_ENTRIES``; use :class:`CoactivationIndex` instead.
    """
    X = as_activations(X)
    n_q, n = X.shape
    if n > MAX_DENSE_ENTRIES:
        raise ValueError(f"dense co-activation refuses N = {n} > {MAX_DENSE_ENTRIES}")
    dense = dense_rows(X)
    out = np.empty((n, n), dtype=np.uint16 if n_q < 65536 else np.int64)
    for lo in range(0, n, _BLOCK):
        out[lo : lo + _BLOCK] = np.rint(dense[lo : lo + _BLOCK] @ dense.T)
    return out


def dense_rows(X: sp.csr_matrix) -> np.ndarray:
    """``N x T`` float32: entry i's selection vector as row i (exact sums below 2**24)."""
    return np.ascontiguousarray(X.T.toarray(), dtype=np.float32)


def selection_counts(X: sp.csr_matrix) -> np.ndarray:
    """``f_i``: how many profiled queries select entry i (``A_ii``)."""
    return np.bincount(X.indices, minlength=X.shape[1]).astype(np.int64)


def choose_radius(
    X: sp.spmatrix | np.ndarray,
    target_size: int,
    quantile: float = 0.5,
    min_activations: int = 2,
    rng: np.random.Generator | None = None,
    max_probes: int = 1024,
) -> float:
    """r from the ``k``-th-nearest-neighbour distances (module doc; ``k = target_size - 1``).

    Probes are all eligible entries when there are no more than ``max_probes``
    (then the choice is exact), else a uniform sample of them.  With fewer
    than two eligible entries nothing can be clustered and r = 1.
    """
    if target_size < 2:
        raise ValueError(f"target_size must be >= 2, got {target_size}")
    X = as_activations(X)
    f = selection_counts(X)
    eligible = np.flatnonzero(f >= min_activations)
    if len(eligible) < 2:
        return 1.0
    k = min(target_size - 1, len(eligible) - 1)
    probes = np.arange(len(eligible))
    if len(eligible) > max_probes:
        rng = rng if rng is not None else np.random.default_rng(0)
        probes = np.sort(rng.choice(len(eligible), size=max_probes, replace=False))
    dense = dense_rows(X[:, eligible].tocsr())
    fe = f[eligible]
    kth = np.empty(len(probes))
    for lo in range(0, len(probes), _BLOCK):
        chunk = probes[lo : lo + _BLOCK]
        d = jaccard_distance(dense[chunk] @ dense.T, fe[chunk, None], fe[None, :])
        d[np.arange(len(chunk)), chunk] = np.inf  # j != i
        kth[lo : lo + len(chunk)] = np.partition(d, k - 1, axis=1)[:, k - 1]
    dq = float(np.quantile(kth, quantile, method="lower"))
    return float(min(1.0, np.nextafter(dq, 2.0)))


class CoactivationIndex:
    """Exact co-activation counts of one layer on demand, without an N x N matrix.

    Keeps the selection vectors of the *eligible* entries (``f_i >= min_activations``,
    the only ones that can have a neighbour) as a dense float32
    ``E x T`` matrix, ``4 * T`` bytes per entry, and answers with BLAS
    products on it: rows of ``A`` for a batch of entries (:meth:`rows`,
    ~0.6 ms per row at E = 78K, T = 512 in batches of 64) and Eq. 4 densities
    (:meth:`densities`).  The same vectors packed as bits (``T / 8`` bytes per
    entry) give the few counts of one Eq. 5 expansion by popcounts (:meth:`counts`).
    After :meth:`build_graph`, candidate queues and densities come from the
    exact r-neighbour graph (:mod:`.cograph`) instead of rows.
    """

    def __init__(self, X: sp.spmatrix | np.ndarray, radius: float, min_activations: int = 2):
        X = as_activations(X)
        self.n_queries, self.n_entries = X.shape
        self.radius = float(radius)
        self.freq = selection_counts(X)
        self.eligible_mask = self.freq >= max(1, min_activations)
        self.eligible = np.flatnonzero(self.eligible_mask)
        self._fe = self.freq[self.eligible]
        self._pos = np.full(self.n_entries, -1, dtype=np.int64)
        self._pos[self.eligible] = np.arange(len(self.eligible))
        sub = X[:, self.eligible].tocsr()
        self._dense = dense_rows(sub)
        self._bits = packed_bits(self._dense)  # the same vectors, T / 8 bytes per entry
        csc = X.tocsc()
        self._queries_of = (csc.indptr, csc.indices)  # the queries selecting each entry
        self._in_query = (sub.indptr, sub.indices.astype(np.int64))  # eligible positions
        self.graph: NeighbourGraph | None = None  # all candidate queues, once built

    def build_graph(self, max_pairs: int) -> bool:
        """Compute every candidate queue at once (:mod:`.cograph`); False (and no
        graph) when the radius is too wide for it.  Queues and densities are
        exact either way; with the graph they cost no more rows."""
        self.graph = neighbour_graph(
            self._dense, self.eligible, self.freq, self.radius, self.n_entries, max_pairs
        )
        return self.graph is not None

    def graph_densities(self) -> Densities:
        """Eq. 4 densities of every entry from the graph, all exact."""
        assert self.graph is not None
        value = self.graph.degree().astype(np.float64)
        return Densities(value, np.ones(self.n_entries, dtype=bool), {})

    def distances(self, entries: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Jaccard distances ``d[entries, eligible]`` from their count rows."""
        return jaccard_distance(counts, self.freq[entries][:, None], self._fe[None, :])

    def is_eligible(self, entry: int) -> bool:
        return bool(self.eligible_mask[entry])

    def rows(self, entries: np.ndarray) -> np.ndarray:
        """``A[entries, eligible]`` as float32 (exact integers), one row per entry."""
        return self.vectors(entries) @ self._dense.T

    def row(self, entry: int) -> np.ndarray:
        """One row ``A[entry, eligible]`` (float32) by adding up the profile rows that
        select ``entry``: ``f_entry * k`` additions, cheaper than BLAS for a single row."""
        qptr, qidx = self._queries_of
        eptr, epos = self._in_query
        queries = qidx[qptr[entry] : qptr[entry + 1]].tolist()
        parts = [epos[eptr[q] : eptr[q + 1]] for q in queries]
        flat = np.concatenate(parts) if parts else np.empty(0, np.int64)
        return np.bincount(flat, minlength=len(self.eligible)).astype(np.float32)

    def neighbours(self, entry: int, row: np.ndarray | None = None) -> np.ndarray:
        """Eligible entries j != entry with ``d < r``, nearest first (ties: lower id).

        ``row`` is ``rows([entry])[0]`` when the caller already has it.  An
        ineligible entry has none.
        """
        if not self.is_eligible(entry):
            return np.empty(0, np.int64)
        if self.graph is not None:
            return self.graph.row(entry)
        counts = self.row(entry) if row is None else row
        d = self.distances(np.array([entry]), counts[None, :])[0]
        d[self._pos[entry]] = np.inf
        near = np.flatnonzero(d < self.radius)
        return self.eligible[near[np.lexsort((near, d[near]))]]

    def counts(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Exact ``A[rows, cols]`` (int64) of eligible entries, by popcounts of their
        packed selection vectors: no BLAS call for the few pairs of one expansion."""
        pr, pc = self._pos[rows], self._pos[cols]
        if (pr < 0).any() or (pc < 0).any():
            raise ValueError("counts() of an entry that cannot have neighbours")
        both = self._bits[pr][:, None, :] & self._bits[pc][None, :, :]
        return np.bitwise_count(both).sum(axis=2, dtype=np.int64)

    def vectors(self, entries: np.ndarray) -> np.ndarray:
        """Dense float32 selection vectors (``len x T``) of eligible entries."""
        pos = self._pos[entries]
        if (pos < 0).any():
            raise ValueError("vectors() of an entry that cannot have neighbours")
        return self._dense[pos]

    def densities(
        self, n_probes: int, rng: np.random.Generator | None = None, head: int = 1024
    ) -> Densities:
        """Eq. 4 densities, exact for ``n_probes`` probes and estimated for the rest.

        Exact rows ``A[q, eligible]`` are computed for probes drawn uniformly
        from the eligible entries (all of them when there are no more than
        ``n_probes``: every density is then exact).  A probe's density is
        counted; any other eligible entry's is estimated from ``hits``, how
        many probes have it as a neighbour (:func:`_shrunk`; the raw estimate
        ``hits * (E - 1) / n_probes`` is unbiased but, at a few percent of
        probes, mostly 0 or one large step).  Ineligible entries have density
        0, exactly.  The first ``head`` ids of
        each probe's candidate queue are kept (int32).  Cost:
        ``2 * n_probes * E * T`` flops.
        """
        n_el = len(self.eligible)
        out = Densities(np.zeros(self.n_entries), ~self.eligible_mask, {})
        if n_el == 0:
            return out
        if n_probes >= n_el:
            probes = np.arange(n_el)
        else:
            rng = rng if rng is not None else np.random.default_rng(0)
            probes = np.sort(rng.choice(n_el, size=max(1, n_probes), replace=False))
        hits = np.zeros(n_el, dtype=np.int64)
        for lo in range(0, len(probes), _BLOCK):
            chunk = probes[lo : lo + _BLOCK]
            rows = self._dense[chunk] @ self._dense.T
            near = self.distances(self.eligible[chunk], rows) < self.radius
            near[np.arange(len(chunk)), chunk] = False
            hits += near.sum(axis=0)
            for q, row, count in zip(chunk.tolist(), rows, near.sum(axis=1).tolist(), strict=True):
                entry = int(self.eligible[q])
                out.value[entry] = count
                out.neighbours[entry] = self.neighbours(entry, row)[:head].astype(np.int32)
        exact = out.value[self.eligible[probes]]
        if len(probes) < n_el:
            rate = len(probes) / (n_el - 1)
            est = _shrunk(hits, rate, self.freq[self.eligible], probes, exact)
        else:
            est = np.zeros(n_el)
        est[probes] = exact
        out.value[self.eligible] = est
        out.exact[self.eligible[probes]] = True
        return out


@dataclass
class Densities:
    """Eq. 4 densities of all entries, and the candidate queues found on the way."""

    value: np.ndarray  # float64, length N: exact where `exact`, else an estimate
    exact: np.ndarray  # bool, length N
    neighbours: dict[int, np.ndarray]  # heads of the probes' candidate queues (int32)


def _shrunk(
    hits: np.ndarray, rate: float, freq: np.ndarray, probes: np.ndarray, exact: np.ndarray
) -> np.ndarray:
    """Posterior-mean densities from probe hits, pooled by selection count.

    ``hits_j ~ Poisson(rate * rho_j)`` with ``rate = n_probes / (E - 1)``;
    the prior of ``rho`` is a Gamma fitted (by moments) to the exact
    densities of the probes in the same ``freq`` bin (``_BINS`` quantile bins).
    Without pooling, one hit alone reads as ``1 / rate`` neighbours.
    """
    edges = np.unique(np.quantile(freq[probes], np.linspace(0, 1, _BINS + 1)[1:-1]))
    bins, probe_bins = np.searchsorted(edges, freq), np.searchsorted(edges, freq[probes])
    est = hits / rate
    for b in np.unique(bins).tolist():
        sample = exact[probe_bins == b]
        mean, var = (sample.mean(), sample.var()) if len(sample) > 1 else (0.0, 0.0)
        if mean > 0 and var > 0:
            sel = bins == b
            est[sel] = (mean * mean / var + hits[sel]) / (mean / var + rate)
    return est
