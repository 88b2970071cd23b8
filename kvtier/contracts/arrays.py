"""Arrow arrays from numpy arrays and lists of strings, without importing pandas.

``pyarrow.array`` asks, for every input, whether it is a pandas object; the
first question imports pandas (pyarrow's ``_PandasAPIShim._check_import``,
``pyarrow/pandas-shim.pxi``, pyarrow 26), which costs 0.16-0.22 CPU s
(measured 2026-12-03 on this machine, three runs: ``import pandas`` after numpy
and pyarrow) -- a fifth of the fixed cost of a serving benchmark command
that never uses pandas.  :func:`arrow_array` builds the same array from its
buffers (``pyarrow.Array.from_buffers``), which asks nothing: numbers and
booleans from one numpy buffer, strings from offsets and UTF-8 bytes.

What it takes is what the records and traces hold: numeric or boolean
values (a numpy array or a sequence of numbers) of a fixed-width Arrow
type, or a sequence of ``str`` (no nulls) for ``string``.  Values are
converted as ``pyarrow.array(values, type)`` converts them (its safe
default): a float or integer that the target type does not hold exactly
is refused (ValueError), not cut.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

# the fixed-width Arrow types built from one numpy buffer, by their numpy dtype
_NUMPY = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
    pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64,
}  # fmt: skip


def arrow_array(values: np.ndarray | Sequence, type: pa.DataType) -> pa.Array:  # noqa: A002
    """``values`` as an Arrow array of ``type`` (module docstring): what
    ``pyarrow.array(values, type)`` gives for them."""
    if type == pa.string():
        return _strings(values)
    if type == pa.bool_():
        x = np.asarray(values)
        if x.dtype != np.bool_:
            raise ValueError(f"booleans expected, got {x.dtype}")
        bits = np.packbits(x, bitorder="little")
        return pa.Array.from_buffers(type, len(x), [None, pa.py_buffer(bits)])
    dt = _NUMPY.get(type)
    if dt is None:
        raise ValueError(f"arrow_array builds fixed-width numbers, booleans, strings: not {type}")
    x = np.asarray(values)
    y = np.ascontiguousarray(x, dtype=dt)
    if x.dtype != y.dtype and len(x) and not _exact(x, y):
        raise ValueError(f"values of {x.dtype} do not fit {type} exactly")
    return pa.Array.from_buffers(type, len(y), [None, pa.py_buffer(y)])


def _exact(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether converting ``x`` to ``y`` kept every value (NaN kept as NaN)."""
    same = x == y
    if y.dtype.kind == "f" and x.dtype.kind == "f":
        same |= np.isnan(x) & np.isnan(y)
    return bool(np.all(same))


def _strings(values: Sequence[str]) -> pa.Array:
    """A ``string`` array of ``values`` (each a ``str``): int32 offsets over
    their UTF-8 bytes, each distinct value encoded once."""
    distinct = dict.fromkeys(values)
    if any(not isinstance(v, str) for v in distinct):
        raise ValueError("strings expected (no nulls)")
    enc = {v: v.encode() for v in distinct}
    n, parts = len(values), list(map(enc.__getitem__, values))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("strings over 2 GiB: not one string array")
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(parts))]
    return pa.Array.from_buffers(pa.string(), n, buffers)


def to_numpy(col: pa.Array | pa.ChunkedArray, fill: float | None = None) -> np.ndarray:
    """A column of fixed-width numbers or booleans as a numpy array, read from
    its buffers (``to_numpy`` would import pandas: module docstring); a
    ``string`` column as an object array of ``str``.  Nulls become ``fill``;
    without one, a column holding nulls is refused (ValueError)."""
    t = col.type
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if t == pa.string():
        if fill is None and col.null_count:
            raise ValueError("a string column with nulls")
        return np.array(col.to_pylist(), dtype=object)
    if t == pa.bool_():
        dt: type = np.bool_
    else:
        dt = _NUMPY.get(t)
        if dt is None:
            raise ValueError(f"to_numpy reads fixed-width numbers, booleans, strings: not {t}")
    parts = []
    for c in chunks:
        x = _values(c, dt)
        if c.null_count:
            if fill is None:
                raise ValueError(f"a {t} column with nulls and no fill value")
            x = np.where(nulls(c), np.asarray(fill, dtype=dt), x)
        parts.append(x)
    if not parts:
        return np.zeros(0, dtype=dt)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def nulls(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which rows of ``col`` are null (a bool array), from its validity bitmaps."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts = [np.zeros(len(c), dtype=np.bool_) if c.null_count == 0 else
             ~_bits(c.buffers()[0], c.offset, len(c)) for c in chunks]  # fmt: skip
    if not parts:
        return np.zeros(0, dtype=np.bool_)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _values(c: pa.Array, dt: type) -> np.ndarray:
    """One chunk's values (nulls' slots as stored), a read-only view for numbers."""
    buf = c.buffers()[1]
    if dt is np.bool_:
        return _bits(buf, c.offset, len(c))
    if buf is None:  # an empty array may have no data buffer
        return np.zeros(0, dtype=dt)
    return np.frombuffer(buf, dtype=dt)[c.offset : c.offset + len(c)]


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits ``offset .. offset + n`` of an Arrow bitmap (least significant first)."""
    if n == 0 or buf is None:
        return np.zeros(n, dtype=np.bool_)
    raw = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little", count=offset + n)[offset:].astype(np.bool_)


def parquet_options(schema: pa.Schema) -> dict[str, object]:
    """How kvtier writes its large tables (plans, op records, requests):
    dictionary pages for the string columns only, LZ4 pages.  On the
    whole-trace fleet run's plan and op records (1.6 M rows each, measured
    2026-12-03 on this machine, the best of three writes) this writes the plan in
    0.31 CPU s and 45.5 MB against pyarrow's default (dictionaries for every
    column, Snappy) 0.51 s and 46.0 MB, the op records in 0.19 s and 51.8 MB
    against 0.33 s and 54.7 MB: the numeric columns' dictionaries cost time and
    saved nothing once compressed.  Any Parquet reader reads both."""
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    return {"use_dictionary": strings, "compression": "lz4"}


def write_parquet(table: pa.Table, path: object) -> None:
    """``pyarrow.parquet.write_table`` with :func:`parquet_options`."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (a serving run that writes no file skips it)

    pq.write_table(table, str(path), **parquet_options(table.schema))
