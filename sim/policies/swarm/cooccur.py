"""Co-activation counts for Swarm's clustering (seed 000 §5.1, Steps 1-3).

The equations were lost in extraction; our readings (per layer, X is the
``T x N`` boolean profile, one row per profiled query, one column per entry):

* **Eq. 2** ``P_ij = A_ij / T``.  ``A_ij`` is the number of profiled queries
  that select entries i and j together, ``T`` the number of profiled queries.
  The paper divides by "the context length" because profiling runs a query at
  every position of a context.  ``A_ii = f_i`` is entry i's own count.
* **Eq. 3** ``d_ij = 1 - P_ij``: 0 means always co-activated, 1 never.
* **Eq. 4** ``rho_i = |{j != i : d_ij < r}|`` for cluster radius ``r``.

Since ``A_ij`` is an integer, ``d_ij < r`` holds exactly when ``A_ij >= level``
for one integer :func:`level_for_radius`; it is found with the same
floating-point expression ``1.0 - a / T < r`` that the dense reference uses,
so the two views agree bit for bit.  ``A_ij <= min(f_i, f_j)``: an entry
selected fewer than ``level`` times has no neighbour at all (it becomes a
singleton cluster) and is never loaded densely.

With 10% sparsity even perfectly co-activated pairs have ``P <= ~0.1``, so
useful radii are close to 1; :func:`choose_level` picks one from a target
neighbourhood size instead of asking for ``r``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

MAX_DENSE_ENTRIES = 20_000  # largest N for which an N x N matrix is built
_BINS = 16  # selection-count bins pooled for the density prior
_BLOCK = 256  # probe rows per BLAS product (256 x N float32 = 128 MB at N = 128K)


def as_activations(X: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """``X`` as a canonical ``T x N`` boolean CSR matrix (sorted, no duplicates)."""
    csr = sp.csr_matrix(X, dtype=bool)
    if csr.ndim != 2 or csr.shape[0] < 1:
        raise ValueError(f"activations must be T x N with T >= 1, got shape {csr.shape}")
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr


def level_for_radius(radius: float, n_queries: int) -> int:
    """Smallest count ``a`` with ``1.0 - a / T < radius`` (``T + 1`` if none)."""
    a = np.arange(n_queries + 1)
    ok = np.flatnonzero(1.0 - a / n_queries < radius)
    return int(ok[0]) if len(ok) else n_queries + 1


def radius_for_level(level: int, n_queries: int) -> float:
    """The radius half a count outside ``level``: ``d < r`` iff ``A >= level``."""
    return 1.0 - (level - 0.5) / n_queries


def coactivation(X: sp.spmatrix | np.ndarray) -> np.ndarray:
    """Dense ``N x N`` co-activation counts ``A = X^T X`` (Eq. 2's numerator).

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


def choose_level(
    X: sp.spmatrix | np.ndarray,
    target_size: int,
    rng: np.random.Generator | None = None,
    max_probes: int = 1024,
) -> int:
    """Count level that gives the median entry ``target_size - 1`` neighbours.

    For a probed entry i let ``k_i`` be the ``(target_size - 1)``-th largest
    ``A_ij`` over ``j != i``: with ``level <= k_i``, i has at least
    ``target_size - 1`` neighbours, i.e. a Step-4 candidate queue of the target
    size.  The level is the lower median of ``k_i`` (at least 1).  In distance
    terms r is the median distance from an entry to its
    ``(target_size - 1)``-th nearest neighbour, moved half a count outward
    (:func:`radius_for_level`).  Probes are all entries when
    ``N <= max_probes`` (then the choice is exact), else a uniform sample.

    We do not use the pair quantile (fraction of pairs with ``d < r`` equal to
    ``(s - 1) / (N - 1)``, i.e. a mean density of ``s - 1``): under popularity
    skew a core of frequently selected entries is co-activated with nearly
    everything.  On the default generated trace (N = 128K, T = 512) ~2K such
    entries use up the whole pair budget and 99% of entries are left with no
    neighbour; the median rule ignores that core.
    """
    if target_size < 2:
        raise ValueError(f"target_size must be >= 2, got {target_size}")
    X = as_activations(X)
    n = X.shape[1]
    if n < 2:
        return 1
    k = min(target_size - 1, n - 1)
    if n <= max_probes:
        probes = np.arange(n)
    else:
        rng = rng if rng is not None else np.random.default_rng(0)
        probes = np.sort(rng.choice(n, size=max_probes, replace=False))
    dense = dense_rows(X)
    kth = np.empty(len(probes), dtype=np.int64)
    for lo in range(0, len(probes), _BLOCK):
        chunk = probes[lo : lo + _BLOCK]
        counts = dense[chunk] @ dense.T
        counts[np.arange(len(chunk)), chunk] = -1.0  # j != i
        kth[lo : lo + len(chunk)] = np.rint(-np.partition(-counts, k - 1, axis=1)[:, k - 1])
    return max(1, int(np.quantile(kth, 0.5, method="lower")))


class CoactivationIndex:
    """Exact co-activation counts of one layer on demand, without an N x N matrix.

    Keeps the selection vectors of the *eligible* entries (``f_i >= level``,
    the only ones that can have a neighbour) as a dense float32
    ``E x T`` matrix, ``4 * T`` bytes per entry, and answers everything with
    BLAS products on it: rows of ``A`` for a batch of entries (:meth:`rows`,
    ~0.6 ms per row at E = 78K, T = 512 in batches of 64), Eq. 4 densities
    (:meth:`densities`) and member vectors for Eq. 5 (:meth:`vectors`).
    """

    def __init__(self, X: sp.spmatrix | np.ndarray, radius: float):
        X = as_activations(X)
        self.n_queries, self.n_entries = X.shape
        self.radius = float(radius)
        self.level = level_for_radius(self.radius, self.n_queries)
        self.freq = selection_counts(X)
        self.eligible = np.flatnonzero(self.freq >= self.level)
        self.eligible_mask = self.freq >= self.level
        self._pos = np.full(self.n_entries, -1, dtype=np.int64)
        self._pos[self.eligible] = np.arange(len(self.eligible))
        sub = X[:, self.eligible].tocsr()
        self._dense = dense_rows(sub)
        csc = X.tocsc()
        self._queries_of = (csc.indptr, csc.indices)  # the queries selecting each entry
        self._in_query = (sub.indptr, sub.indices.astype(np.int64))  # eligible positions

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
        """Entries j != entry with ``d < r``, nearest first (ties: lower id).

        ``row`` is ``rows([entry])[0]`` when the caller already has it (it is
        modified).  An ineligible entry has none.
        """
        if not self.is_eligible(entry):
            return np.empty(0, np.int64)
        counts = self.row(entry) if row is None else row
        counts[self._pos[entry]] = -1.0
        near = np.flatnonzero(counts >= self.level)
        # distance ascending = count descending; a stable (radix) sort keeps id order
        gap = (self.n_queries - counts[near]).astype(
            np.uint16 if self.n_queries < 65536 else np.uint32
        )
        return self.eligible[near[np.argsort(gap, kind="stable")]]

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
            near = rows >= self.level
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
