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
* **Threshold.**  ``d < r`` iff ``A - c (f_i + f_j) > 0`` with ``c = s / (1 + s)``;
  two extra columns make one BLAS product compute that left side
  (:func:`_augmented`), a float32 test with a margin keeps a superset, and the
  survivors' exact ``A`` (bit-packed popcounts) is decided by
  :func:`jaccard_distance` in float64 on the exact
  integer counts: the same expression, hence the same bits, as the row-wise
  path.  So the graph is exact, not an approximation.

Cost: ``2 T`` flops per pair in the band (BLAS) plus a comparison and a
``nonzero`` pass over it, blocks spread over the cores (:data:`_THREADS`);
memory: the augmented vectors (``2 E (T + 2)`` float32), the bits (``T / 8``
bytes per entry), one block of at most :data:`_CELLS` float32 per thread and
the kept pairs (32 bytes each, both directions).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

_ROWS = 1024  # rows per band block at most
_CELLS = 1 << 25  # float32 cells per block at most (128 MB): fewer rows where the band is wide
_EPS = float(np.finfo(np.float32).eps)
_THREADS = min(4, os.cpu_count() or 1)  # blocks in flight: the threshold passes are serial
_SLACK = 1e-9  # relative widening of the size band (float64 rounding of f_i / s)


@dataclass
class NeighbourGraph:
    """CSR over entry ids: row i holds the j != i with ``d_ij < r`` (unordered) and
    ``dist`` their distances (float64); :meth:`row` reads one nearest first."""

    indptr: np.ndarray  # int64, length N + 1
    indices: np.ndarray  # int64
    dist: np.ndarray  # float64

    def row(self, entry: int) -> np.ndarray:
        """Entry's neighbours, nearest first (ties: lower id): its candidate queue."""
        lo, hi = self.indptr[entry], self.indptr[entry + 1]
        ids = self.indices[lo:hi]
        return ids[np.lexsort((ids, self.dist[lo:hi]))]

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
    max_kept: int = 1 << 26,
) -> NeighbourGraph | None:
    """The exact r-neighbour graph of the eligible entries (module doc).

    ``dense`` is the ``E x T`` float32 selection vectors of ``eligible``
    (``freq`` their counts, indexed by entry id).  None when the band holds
    more than ``max_pairs`` pairs, or more than ``max_kept`` of them are
    neighbours (2 GB of pairs by default: a radius so wide that nearly all
    pairs are): the caller keeps its row-wise path.
    """
    s = 1.0 - radius
    order = np.argsort(freq[eligible], kind="stable")
    fs = freq[eligible][order].astype(np.float64)
    n_el = len(order)
    hi = _band_ends(fs, s, n_el)
    if int((hi - np.arange(n_el)).sum()) > max_pairs:
        return None
    left, right = _augmented(dense[order], fs, s)
    bits = packed_bits(dense[order])

    def block(ab: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Neighbour pairs (sorted positions i < j, distance) of rows a..b-1."""
        a, b = ab
        c1 = int(hi[b - 1])
        # (A - c f_i - c f_j) over the band block, c = s / (1 + s): > 0 iff d < r
        g = left[a:b] @ right[a:c1].T
        # float32 rounding: at most (T + 2) eps x the sum of |terms| <= 2 (f_i + f_j)
        margin = left.shape[1] * _EPS * 2.0 * (1.0 + fs[b - 1] + fs[c1 - 1])
        i, j = np.divmod(np.flatnonzero(g > -margin), g.shape[1])  # row-major, as nonzero
        up = j > i  # each unordered pair once, j after i in f order
        i, j = i[up] + a, j[up] + a
        a_ij = np.bitwise_count(bits[i] & bits[j]).sum(axis=1, dtype=np.int64)
        d = jaccard_distance(a_ij, fs[i], fs[j])
        near = d < radius
        return i[near], j[near], d[near]

    empty = np.empty(0, np.int64)
    rows, cols, dists, kept = [empty], [empty], [np.empty(0)], 0
    # numpy and BLAS release the GIL: the blocks run on _THREADS threads, each
    # product on one BLAS thread (a threaded BLAS inside each block would put
    # _THREADS x cores threads on the cores, spinning on one another)
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(_THREADS) as pool:
        for i, j, d in pool.map(block, _blocks(hi)):
            rows.append(i)
            cols.append(j)
            dists.append(d)
            kept += len(d)
            if kept > max_kept:  # too many neighbours to hold: the caller's row path
                pool.shutdown(cancel_futures=True)
                return None
    i, j = (eligible[order[np.concatenate(x)]] for x in (rows, cols))
    return _symmetric_csr(i, j, np.concatenate(dists), n_entries)


def _blocks(hi: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [a, b) of at most ``_ROWS`` rows and about ``_CELLS`` band cells."""
    out, a, n = [], 0, len(hi)
    while a < n:
        width = int(hi[min(a + _ROWS, n) - 1]) - a
        b = min(n, a + max(16, min(_ROWS, _CELLS // max(width, 1))))
        out.append((a, b))
        a = b
    return out


def _augmented(vs: np.ndarray, fs: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
    """Row vectors ``[x_i, -c f_i, -c]`` and ``[x_j, 1, f_j]`` (float32, ``c = s / (1 + s)``):
    their dot product is ``A_ij - c (f_i + f_j)``, the threshold in one BLAS product."""
    c = s / (1.0 + s)
    n, t = vs.shape
    left = np.empty((n, t + 2), dtype=np.float32)
    right = np.empty((n, t + 2), dtype=np.float32)
    left[:, :t] = vs
    right[:, :t] = vs
    left[:, t], left[:, t + 1] = -c * fs, -c
    right[:, t], right[:, t + 1] = 1.0, fs
    return left, right


def packed_bits(vs: np.ndarray) -> np.ndarray:
    """Selection vectors as bits, in uint64 words: ``A_ij`` = popcount of the AND."""
    bits = np.packbits(vs > 0, axis=1)
    pad = -bits.shape[1] % 8
    bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


def jaccard_distance(a: np.ndarray, fi: np.ndarray, fj: np.ndarray) -> np.ndarray:
    """``1 - a / (fi + fj - a)`` in float64 (broadcasting); 1 where the union is empty."""
    a = np.asarray(a, dtype=np.float64)
    union = np.add(fi, fj, dtype=np.float64)
    if union.shape == np.broadcast_shapes(union.shape, a.shape):
        union -= a  # in place: the same float64 subtraction, one array fewer
    else:
        union = union - a
    out = np.zeros(union.shape)
    np.divide(a, union, out=out, where=union > 0)
    np.subtract(1.0, out, out=out)
    return out if out.ndim else out[()]


def _band_ends(fs: np.ndarray, s: float, n_el: int) -> np.ndarray:
    """Per sorted row: one past the last column with ``f_j < f_i / s`` (all when s <= 0)."""
    if s <= 0.0:
        return np.full(n_el, n_el, dtype=np.int64)
    bound = fs / s * (1.0 + _SLACK)  # a superset of the exact band, against rounding
    return np.searchsorted(fs, bound, side="left").astype(np.int64)


def _symmetric_csr(i: np.ndarray, j: np.ndarray, d: np.ndarray, n_entries: int):
    """Both directions of the pairs, grouped by row (rows are sorted when read)."""
    src = np.concatenate([i, j]).astype(np.int64)
    # a stable sort is one permutation whatever the dtype; the narrowest one that holds
    # every id makes numpy's stable argsort a radix sort (16 bits and fewer)
    key = np.argsort(src.astype(np.min_scalar_type(max(n_entries - 1, 0))), kind="stable")
    dst = np.concatenate([j, i]).astype(np.int64)[key]
    d = np.concatenate([d, d])[key]  # jaccard_distance is symmetric bit for bit
    indptr = np.zeros(n_entries + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_entries), out=indptr[1:])
    return NeighbourGraph(indptr, dst, d)
