"""Plan geometry: the byte ranges a plan's read/write ops touch, and their I/Os.

The two forms and their meaning are described in :mod:`kvtier.contracts.plan` (regular
``offset``/``stride``/``n_ios``; scattered ``extents`` cut at ``io_bytes``).
These functions compute with them, vectorised: what an extents list implies
for the regular columns (:func:`extents_columns`, :func:`extent_totals`), how
ranges are cut into I/Os (:func:`split_extents`), and every I/O of a plan
(:func:`io_extents`), which is what the real backend issues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

BLOCK = 4096  # the granularity of regular-pattern I/O sizes (and of O_DIRECT on 4Kn devices)

NO_EXTENTS = np.zeros((0, 2), dtype=np.int64)


def _pieces(length: np.ndarray, io_bytes: np.ndarray | int) -> np.ndarray:
    """I/Os each range of ``length`` bytes is issued as (one where io_bytes is 0)."""
    iob = np.asarray(io_bytes, dtype=np.int64)
    return np.where(iob > 0, -(-length // np.maximum(iob, 1)), 1).astype(np.int64)


def expand_runs(runs: np.ndarray) -> np.ndarray:
    """The (n, 2) extents of ``runs``: a run (offset, length, count, stride) is
    ``count`` ranges of ``length`` bytes, the ``i``-th at ``offset + i * stride``
    (how a serving run keeps its plan's extents, :mod:`sim.serving.planstore`)."""
    runs = np.asarray(runs, dtype=np.int64).reshape(-1, 4)
    count = runs[:, 2]
    total = int(count.sum())
    if total == 0:
        return NO_EXTENTS
    owner = np.repeat(np.arange(len(runs)), count)
    first = np.cumsum(count) - count
    i = np.arange(total, dtype=np.int64) - first[owner]
    out = np.empty((total, 2), dtype=np.int64)
    out[:, 0] = runs[owner, 0] + i * runs[owner, 3]
    out[:, 1] = runs[owner, 1]
    return out


def split_extents(ranges: np.ndarray, io_bytes: np.ndarray | int) -> np.ndarray:
    """Each (offset, length) range cut into I/Os of ``io_bytes`` (per range, or one
    value; 0 = the range whole), the last of a range shorter; (n, 2) int64."""
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    iob = np.broadcast_to(np.asarray(io_bytes, dtype=np.int64), (len(ranges),))
    count = _pieces(ranges[:, 1], iob)
    owner = np.repeat(np.arange(len(ranges)), count)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    i = np.arange(int(count.sum()), dtype=np.int64) - first[owner]
    step = np.where(iob > 0, iob, ranges[:, 1])[owner]
    out = np.empty((len(owner), 2), dtype=np.int64)
    out[:, 0] = ranges[owner, 0] + i * step
    out[:, 1] = np.minimum(step, ranges[owner, 1] - i * step)
    return out


def extent_totals(ext: np.ndarray, io_bytes: int = 0) -> tuple[int, int]:
    """(bytes, n_ios) of an op with these (n, 2) extents and ``io_bytes``."""
    ext = np.asarray(ext, dtype=np.int64).reshape(-1, 2)
    return int(ext[:, 1].sum()), int(_pieces(ext[:, 1], io_bytes).sum())


def implied_columns(ext: np.ndarray, io_bytes: int = 0) -> dict[str, int]:
    """The regular columns an extents list implies (see the module docstring)."""
    return {
        "bytes": int(ext[:, 1].sum()),
        "n_ios": int(_pieces(ext[:, 1], io_bytes).sum()),
        "offset": int(ext[0, 0]),
        "stride": 0,
    }


def extents_columns(
    ptr: np.ndarray, ext: np.ndarray, io_bytes: np.ndarray | int = 0
) -> dict[str, np.ndarray]:
    """Per op, the ``bytes``, ``n_ios``, ``offset`` and ``stride`` its extents imply
    given its ``io_bytes`` (ops without extents get 0s: fill those from their
    regular pattern)."""
    ptr = np.asarray(ptr, dtype=np.int64)
    ext = np.asarray(ext, dtype=np.int64).reshape(-1, 2)
    count = np.diff(ptr)
    has = count > 0
    iob = np.broadcast_to(np.asarray(io_bytes, dtype=np.int64), count.shape)
    cum = np.concatenate([[0], np.cumsum(ext[:, 1])]).astype(np.int64)
    nbytes = cum[ptr[1:]] - cum[ptr[:-1]]
    ios = np.concatenate([[0], np.cumsum(_pieces(ext[:, 1], np.repeat(iob, count)))])
    first = np.zeros(len(count), dtype=np.int64)
    first[has] = ext[ptr[:-1][has], 0]
    n_ios = (ios[ptr[1:]] - ios[ptr[:-1]]).astype(np.int64)
    return {"bytes": nbytes, "n_ios": n_ios, "offset": first, "stride": np.zeros_like(count)}


def extents_csr(plan: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, table) of the extents column: op i's (offset, length) rows are
    ``table[ptr[i]:ptr[i+1]]``."""
    col = plan.column("extents").combine_chunks()
    ptr = np.asarray(col.offsets, dtype=np.int64)
    vals = col.values
    off = np.asarray(vals.field("offset"), dtype=np.int64)[ptr[0] : ptr[-1]]
    length = np.asarray(vals.field("length"), dtype=np.int64)[ptr[0] : ptr[-1]]
    return ptr - ptr[0], np.stack([off, length], axis=1) if len(off) else NO_EXTENTS


@dataclass(frozen=True)
class IOExtents:
    """Every I/O of a plan's read/write ops, in op order and, within an op, in
    submission order: I/O ``k`` of op ``op[k]`` touches ``length[k]`` bytes at
    ``offset[k]`` of the op's device; op i's I/Os are rows ``ptr[i]:ptr[i+1]``."""

    ptr: np.ndarray
    op: np.ndarray
    offset: np.ndarray
    length: np.ndarray


def io_extents(plan: pa.Table, ops: np.ndarray | None = None) -> IOExtents:
    """Expand both geometry forms (module docstring) into one row per I/O,
    for all read/write ops or the ids ``ops`` of some (vectorised)."""
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    ids = np.nonzero(np.isin(kind, ["read", "write"]))[0] if ops is None else np.asarray(ops)
    ptr, ext = extents_csr(plan)
    nbytes = plan.column("bytes").to_numpy()[ids].astype(np.int64)
    n_ios = np.maximum(plan.column("n_ios").to_numpy()[ids].astype(np.int64), 1)
    offset = plan.column("offset").to_numpy()[ids].astype(np.int64)
    stride = plan.column("stride").to_numpy()[ids].astype(np.int64)
    scattered = np.diff(ptr)[ids] > 0
    iob_all = plan.column("io_bytes").to_numpy().astype(np.int64)
    implied = extents_columns(ptr, ext, iob_all)["n_ios"][ids]
    count = np.where(scattered, implied, n_ios)
    out_ptr = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    total = int(out_ptr[-1])
    op = np.repeat(ids.astype(np.int64), count)
    i = np.arange(total, dtype=np.int64) - np.repeat(out_ptr[:-1], count)  # I/O index in op
    # regular pattern: whole blocks where the bytes allow it, else bytes
    unit = np.where((nbytes % BLOCK == 0) & (nbytes // BLOCK >= n_ios), BLOCK, 1)
    units = nbytes // unit
    base, extra = units // n_ios, units % n_ios
    r = lambda a: np.repeat(a, count)  # noqa: E731
    length = (r(base) + (i < r(extra))) * r(unit)
    start = np.where(
        r(stride) > 0,
        r(offset) + i * r(stride),
        r(offset) + (i * r(base) + np.minimum(i, r(extra))) * r(unit),
    )
    sc = r(scattered)
    if sc.any():
        sids = ids[scattered]
        nrange = np.diff(ptr)[sids]
        rows = np.repeat(ptr[:-1][sids], nrange) + (
            np.arange(int(nrange.sum())) - np.repeat(np.cumsum(nrange) - nrange, nrange)
        )
        iob = np.repeat(iob_all[sids], nrange)
        pieces = split_extents(ext[rows], iob)
        if len(pieces) != int(sc.sum()):
            raise ValueError("n_ios disagrees with the extents (validate the plan first)")
        start[sc] = pieces[:, 0]
        length[sc] = pieces[:, 1]
    return IOExtents(out_ptr, op, start, length)
