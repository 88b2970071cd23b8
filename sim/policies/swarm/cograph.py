"""All neighbour pairs ``d_ij < r`` of one layer at once, exactly (the r-neighbour graph).

Algorithm 1 needs, for every entry that may become a medoid, its exact
density (Eq. 4) and its candidate queue (the eligible ``j`` with ``d_ij < r``,
nearest first).  Row by row that is one ``E``-long co-activation row and its
Jaccard distances per medoid; here it is computed for all eligible entries
in blocked float32 products, keeping only the pairs inside r:

* **Size filter (exact).**  Jaccard ``J = A/(f_i + f_j - A) <= min(f_i, f_j) /
  max(f_i, f_j)`` since ``A <= min(f_i, f_j)``, so ``d_ij < r`` (``J > s``,
  ``s = 1 - r``) needs ``f_j < f_i / s`` for ``f_i <= f_j``.  With the
  eligible entries sorted by ``f``, each block of rows meets only the
  columns from its own first row up to that bound: the upper triangle of a
  band around the diagonal.
* **Threshold.**  ``d < r`` iff ``A (1 + s) > s (f_i + f_j)``; a float32
  pre-filter with a margin keeps a superset, and the survivors are decided by
  :func:`jaccard_distance` in float64 on the exact
  integer counts: the same expression, hence the same bits, as the row-wise
  path.  So the graph is exact, not an approximation.

Cost: ``T`` flops per pair in the band (BLAS), plus a few float32 passes
over it; memory: the band block and the kept pairs (12 bytes each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_ROWS = 1024  # rows per band block
_MARGIN = 1e-5  # float32 pre-filter slack per unit of count (float32 eps ~6e-8)
_SLACK = 1e-9  # relative widening of the size band (float64 rounding of f_i / s)


@dataclass
class NeighbourGraph:
    """CSR over entry ids: row i lists j != i with ``d_ij < r``, nearest first (ties:
    lower id); ``dist`` holds those distances (float64)."""

    indptr: np.ndarray  # int64, length N + 1
    indices: np.ndarray  # int64
    dist: np.ndarray  # float64

    def row(self, entry: int) -> np.ndarray:
        return self.indices[self.indptr[entry] : self.indptr[entry + 1]]

    def degree(self) -> np.ndarray:
        """Eq. 4 densities, exact: ``rho_i`` = neighbours within r."""
        return np.diff(self.indptr)


def neighbour_graph(
    dense: np.ndarray,
    eligible: np.ndarray,
    freq: np.ndarray,
    radius: float,
    n_entries: int,
    max_pairs: int,
) -> NeighbourGraph | None:
    """The exact r-neighbour graph of the eligible entries (module doc).

    ``dense`` is the ``E x T`` float32 selection vectors of ``eligible``
    (``freq`` their counts, indexed by entry id).  None when the band holds
    more than ``max_pairs`` pairs, or more than ``max_pairs / 8`` of them are
    neighbours (a radius so wide that nearly all pairs are: the caller keeps
    its row-wise path).
    """
    s = 1.0 - radius
    order = np.argsort(freq[eligible], kind="stable")
    fs = freq[eligible][order].astype(np.float64)
    n_el = len(order)
    hi = _band_ends(fs, s, n_el)
    if int((hi - np.arange(n_el)).sum()) > max_pairs:
        return None
    vs = dense[order]
    empty = np.empty(0, np.int64)
    rows, cols, dists, kept = [empty], [empty], [np.empty(0)], 0
    for a in range(0, n_el, _ROWS):
        b = min(a + _ROWS, n_el)
        c1 = int(hi[b - 1])
        g = vs[a:b] @ vs[a:c1].T  # A over the band block, exact integers in float32
        i, j = _candidates(g, fs[a:b], fs[a:c1], s)
        up = j > i  # each unordered pair once, j after i in f order
        i, j = i[up], j[up]
        d = jaccard_distance(g[i, j], fs[a + i], fs[a + j])
        near = d < radius
        rows.append(i[near] + a)
        cols.append(j[near] + a)
        dists.append(d[near])
        kept += int(near.sum())
        if kept > max_pairs // 8:  # too many neighbours to hold: the caller's row path
            return None
    i, j = (eligible[order[np.concatenate(x)]] for x in (rows, cols))
    return _symmetric_csr(i, j, np.concatenate(dists), n_entries)


def jaccard_distance(a: np.ndarray, fi: np.ndarray, fj: np.ndarray) -> np.ndarray:
    """``1 - a / (fi + fj - a)`` in float64 (broadcasting); 1 where the union is empty."""
    a = np.asarray(a, dtype=np.float64)
    union = np.asarray(fi, dtype=np.float64) + np.asarray(fj, dtype=np.float64) - a
    return 1.0 - np.divide(a, union, out=np.zeros(np.broadcast(a, union).shape), where=union > 0)


def _band_ends(fs: np.ndarray, s: float, n_el: int) -> np.ndarray:
    """Per sorted row: one past the last column with ``f_j < f_i / s`` (all when s <= 0)."""
    if s <= 0.0:
        return np.full(n_el, n_el, dtype=np.int64)
    bound = fs / s * (1.0 + _SLACK)  # a superset of the exact band, against rounding
    return np.searchsorted(fs, bound, side="left").astype(np.int64)


def _candidates(g: np.ndarray, fr: np.ndarray, fc: np.ndarray, s: float):
    """(row, col) of the block where ``A (1 + s) > s (f_i + f_j)`` may hold (a superset)."""
    t = g * np.float32(1.0 + s)
    t -= (s * fc).astype(np.float32)[None, :]
    margin = _MARGIN * (1.0 + fr + fc[-1])  # float32 rounding of sums up to ~f_i + f_j
    return np.nonzero(t > (s * fr - margin).astype(np.float32)[:, None])


def _symmetric_csr(i: np.ndarray, j: np.ndarray, d: np.ndarray, n_entries: int):
    """Both directions of the pairs, each row sorted by (distance, id)."""
    src = np.concatenate([i, j]).astype(np.int64)
    dst = np.concatenate([j, i]).astype(np.int64)
    d = np.concatenate([d, d])  # jaccard_distance is symmetric bit for bit
    key = np.lexsort((dst, d, src))
    indptr = np.zeros(n_entries + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_entries), out=indptr[1:])
    return NeighbourGraph(indptr, dst[key], d[key])
