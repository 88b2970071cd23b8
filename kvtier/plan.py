"""Transfer plans: the contract between policies and executors.

A plan is a table of ops, one row each (Parquet via pyarrow on disk):

============  ==========  ==================================================
column        type        meaning
============  ==========  ==================================================
op_id         int64       0..N-1, the row number; dependencies refer to it
step          int32       decode step / round / request id the op belongs to
layer         int32       model layer, -1 where not applicable
kind          string      read (SSD -> memory), write (memory -> SSD),
                          copy (memory <-> memory, GPU <-> GPU), compute
src, dst      string      node names of the profile (``ssd3``, ``dram0``,
                          ``gpu1``); a compute op names where it runs in
                          ``dst``, a GPU or ``cpu`` (the host CPU, see
                          below), and leaves ``src`` empty
bytes         int64       payload bytes (0 for compute)
n_ios         int64       number of I/Os the bytes are split into (>= 1 for
                          read/write; an I/O is ``bytes / n_ios`` long)
queue_depth   int32       I/Os kept in flight by this op; 0 = device maximum
io_path       string      kernel_fs | io_uring | passthrough | gds | none
offset        int64       byte offset of the first I/O in the device's file
stride        int64       distance between consecutive I/Os; 0 = contiguous
extents       list<struct<offset int64, length int64>>
                          scattered geometry: the byte ranges the op
                          touches, in submission order; empty = the regular
                          pattern of ``offset``/``stride``/``n_ios``
io_bytes      int64       scattered ops: each range is issued as I/Os of at
                          most this many bytes (the design's I/O size, its
                          path's maximum transfer); 0 = one I/O per range
flops         float64     compute op: floating-point operations
hbm_bytes     float64     compute op: bytes the op moves to/from its device's
                          memory (HBM for a GPU, host DRAM for ``cpu``)
threads       int32       ``cpu`` compute op: host cores it runs on (>= 1);
                          0 for every other op
release_s     float64     the op may not start before this time (arrivals)
depends_on    list<int64> ops that must finish before this one starts
tag           string      free label for reports (``kv_fetch``, ``attn``)
============  ==========  ==================================================

Geometry.  Every read/write op names exactly the byte ranges it touches in
its device's file, in one of two forms:

* regular: ``n_ios`` I/Os of ``bytes / n_ios`` (whole 4 KiB blocks, the first
  ``bytes/4096 mod n_ios`` of them one block longer), I/O ``i`` at ``offset +
  i * stride``, or right after I/O ``i - 1`` when ``stride`` is 0;
* scattered: the ``extents`` list of byte ranges, each issued as one I/O, or
  with ``io_bytes`` > 0 as ``ceil(length / io_bytes)`` I/Os of ``io_bytes``
  (the last one shorter; an I/O never crosses two ranges); then ``n_ios`` is
  that I/O count, ``bytes`` the ranges' total length, ``offset`` the first
  range's offset and ``stride`` 0 (:func:`validate_plan` checks all four).
  Adjacent ranges are never merged by an executor: a design that lays data
  out contiguously gives one long range, and that is what makes large I/Os.

A design's layout decides these ranges; :func:`io_extents` expands either form
into one (op, offset, length) row per I/O, which is what the real backend
issues and what the simulator counts I/Os and sizes from.

Host-CPU compute.  A compute op with ``dst = "cpu"`` (:data:`CPU`) runs on
``threads`` cores of the profile's CPU (more threads than the machine has
cores time-share them: the op gets at most all its cores): it moves ``hbm_bytes`` from host DRAM and
executes ``flops`` there (e.g. a design scoring its query against a
DRAM-resident index).  A GPU compute op has ``threads`` 0.

Policies build plans with :class:`PlanBuilder` (or whole columns at once with
:func:`plan_from_columns`); executors take the table as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvtier.geometry import (  # re-exported: the plan's geometry is part of its contract
    BLOCK,
    NO_EXTENTS,
    IOExtents,
    extent_totals,
    extents_columns,
    extents_csr,
    implied_columns,
    io_extents,
    split_extents,
)

__all__ = [
    "BLOCK",
    "CPU",
    "EXTENT",
    "IO_PATHS",
    "KINDS",
    "PLAN_SCHEMA",
    "IOExtents",
    "PlanBuilder",
    "PlanError",
    "depends_csr",
    "extent_totals",
    "extents_columns",
    "extents_csr",
    "io_extents",
    "plan_from_columns",
    "read_plan",
    "split_extents",
    "validate_plan",
    "write_plan",
]

KINDS = ("read", "write", "copy", "compute")
CPU = "cpu"  # the ``dst`` of a compute op that runs on the host CPU
IO_PATHS = ("kernel_fs", "io_uring", "passthrough", "gds", "none")

EXTENT = pa.struct([("offset", pa.int64()), ("length", pa.int64())])

PLAN_SCHEMA = pa.schema(
    [
        ("op_id", pa.int64()),
        ("step", pa.int32()),
        ("layer", pa.int32()),
        ("kind", pa.string()),
        ("src", pa.string()),
        ("dst", pa.string()),
        ("bytes", pa.int64()),
        ("n_ios", pa.int64()),
        ("queue_depth", pa.int32()),
        ("io_path", pa.string()),
        ("offset", pa.int64()),
        ("stride", pa.int64()),
        ("extents", pa.list_(EXTENT)),
        ("io_bytes", pa.int64()),
        ("flops", pa.float64()),
        ("hbm_bytes", pa.float64()),
        ("threads", pa.int32()),
        ("release_s", pa.float64()),
        ("depends_on", pa.list_(pa.int64())),
        ("tag", pa.string()),
    ]
)

_DEFAULTS: dict[str, Any] = {
    "step": 0,
    "layer": -1,
    "src": "",
    "bytes": 0,
    "n_ios": 0,
    "queue_depth": 0,
    "io_path": "none",
    "offset": 0,
    "stride": 0,
    "io_bytes": 0,
    "flops": 0.0,
    "hbm_bytes": 0.0,
    "threads": 0,
    "release_s": 0.0,
    "tag": "",
}


class PlanError(ValueError):
    """A plan is malformed; the message names the op and the column."""


class PlanBuilder:
    """Append ops one at a time; ``add`` returns the new op's id.

    A read/write given ``extents`` (an ``(n, 2)`` array of (offset, length), one
    I/O each) takes its ``bytes``, ``n_ios``, ``offset`` and ``stride`` from them.
    """

    def __init__(self) -> None:
        self._cols: dict[str, list[Any]] = {f.name: [] for f in PLAN_SCHEMA}
        self._ext: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._cols["op_id"])

    def add(
        self,
        kind: str,
        dst: str,
        *,
        depends_on: Iterable[int] = (),
        extents: np.ndarray | None = None,
        **fields: Any,
    ) -> int:
        op_id = len(self)
        unknown = set(fields) - set(_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown plan column(s): {sorted(unknown)}")
        row = {**_DEFAULTS, **fields, "op_id": op_id, "kind": kind, "dst": dst}
        ext = NO_EXTENTS if extents is None else np.asarray(extents, dtype=np.int64).reshape(-1, 2)
        if len(ext):
            row.update(implied_columns(ext, int(row["io_bytes"])))
        row["depends_on"] = list(depends_on)
        row["extents"] = None
        for name, col in self._cols.items():
            col.append(row[name])
        self._ext.append(ext)
        return op_id

    def read(self, ssd: str, dst: str, nbytes: int = 0, n_ios: int = 0, **kw: Any) -> int:
        """A read of ``nbytes`` in ``n_ios`` I/Os, or of ``extents=`` (then leave both 0)."""
        return self.add("read", dst, src=ssd, bytes=nbytes, n_ios=n_ios, **kw)

    def write(self, src: str, ssd: str, nbytes: int = 0, n_ios: int = 0, **kw: Any) -> int:
        """A write of ``nbytes`` in ``n_ios`` I/Os, or of ``extents=`` (then leave both 0)."""
        return self.add("write", ssd, src=src, bytes=nbytes, n_ios=n_ios, **kw)

    def copy(self, src: str, dst: str, nbytes: int, **kw: Any) -> int:
        return self.add("copy", dst, src=src, bytes=nbytes, n_ios=kw.pop("n_ios", 1), **kw)

    def compute(self, gpu: str, flops: float, hbm_bytes: float, **kw: Any) -> int:
        """A kernel on ``gpu`` (roofline of ``flops`` and ``hbm_bytes``)."""
        return self.add("compute", gpu, flops=flops, hbm_bytes=hbm_bytes, **kw)

    def cpu_compute(self, flops: float, dram_bytes: float, threads: int, **kw: Any) -> int:
        """Work on ``threads`` host cores: ``flops`` over ``dram_bytes`` read from DRAM."""
        return self.add("compute", CPU, flops=flops, hbm_bytes=dram_bytes, threads=threads, **kw)

    def table(self) -> pa.Table:
        cols = {k: v for k, v in self._cols.items() if k not in ("op_id", "depends_on", "extents")}
        dep_ptr = np.cumsum([0] + [len(d) for d in self._cols["depends_on"]], dtype=np.int64)
        deps = [x for d in self._cols["depends_on"] for x in d]
        ext_ptr = np.cumsum([0] + [len(e) for e in self._ext], dtype=np.int64)
        ext = np.concatenate(self._ext) if self._ext else NO_EXTENTS
        return plan_from_columns(cols, dep_ptr, deps, (ext_ptr, ext))


def plan_from_columns(
    columns: dict[str, Any],
    depends_offsets: Sequence[int] | None = None,
    depends_values: Sequence[int] | None = None,
    extents: tuple[np.ndarray, np.ndarray] | None = None,
) -> pa.Table:
    """Build a plan from whole columns (numpy arrays or lists).

    ``op_id`` defaults to 0..N-1 and missing columns to their defaults.
    Dependencies come as CSR: op i depends on
    ``depends_values[depends_offsets[i]:depends_offsets[i+1]]``.  Extents too:
    ``extents = (ptr, table)``, op i's being the ``(n, 2)`` rows
    ``table[ptr[i]:ptr[i+1]]`` of (offset, length); give ``bytes``, ``n_ios``,
    ``offset`` and ``stride`` consistent with them (:func:`extents_columns`).
    """
    n = len(columns["kind"])
    cols: dict[str, Any] = {"op_id": np.arange(n, dtype=np.int64)}
    for field in PLAN_SCHEMA:
        name = field.name
        if name in ("op_id", "depends_on", "extents"):
            continue
        if name in columns:
            cols[name] = columns[name]
        elif name in _DEFAULTS:
            cols[name] = (
                np.full(n, _DEFAULTS[name])
                if not isinstance(_DEFAULTS[name], str)
                else [_DEFAULTS[name]] * n
            )
        else:
            raise PlanError(f"plan column '{name}' is required")
    unknown = set(columns) - {f.name for f in PLAN_SCHEMA}
    if unknown:
        raise PlanError(f"unknown plan column(s): {sorted(unknown)}")
    if depends_offsets is None:
        offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
        values = pa.array(np.zeros(0, dtype=np.int64))
    else:
        offsets = pa.array(np.asarray(depends_offsets, dtype=np.int32))
        values = pa.array(np.asarray(depends_values, dtype=np.int64))
    if extents is None:
        ext_ptr, ext = np.zeros(n + 1, dtype=np.int64), NO_EXTENTS
    else:
        ext_ptr = np.asarray(extents[0], dtype=np.int64)
        ext = np.asarray(extents[1], dtype=np.int64).reshape(-1, 2)
    structs = pa.StructArray.from_arrays(
        [pa.array(ext[:, 0]), pa.array(ext[:, 1])], fields=list(EXTENT)
    )
    arrays = []
    for field in PLAN_SCHEMA:
        if field.name == "depends_on":
            arrays.append(pa.ListArray.from_arrays(offsets, values).cast(field.type))
        elif field.name == "extents":
            arrays.append(pa.ListArray.from_arrays(pa.array(ext_ptr, pa.int32()), structs))
        else:
            arrays.append(pa.array(cols[field.name], type=field.type))
    return pa.Table.from_arrays(arrays, schema=PLAN_SCHEMA)


def depends_csr(plan: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of the depends_on column as numpy arrays."""
    col = plan.column("depends_on").combine_chunks()
    offsets = np.asarray(col.offsets, dtype=np.int64)
    values = np.asarray(col.values, dtype=np.int64)
    return offsets - offsets[0], values[offsets[0] : offsets[-1]] if len(values) else values


def validate_plan(
    plan: pa.Table, nodes: Iterable[str], ssds: Iterable[str], gpus: Iterable[str]
) -> None:
    """Check a plan against the schema and a profile's node names.

    Raises :class:`PlanError` with one line naming the first bad op and column.
    """
    if not plan.schema.equals(PLAN_SCHEMA, check_metadata=False):
        missing = [f.name for f in PLAN_SCHEMA if f.name not in plan.schema.names]
        raise PlanError(f"plan does not match the plan schema (missing: {missing or 'types'})")
    nodes, ssds, gpus = set(nodes), set(ssds), set(gpus)
    n = plan.num_rows
    op_id = plan.column("op_id").to_numpy()
    if not np.array_equal(op_id, np.arange(n)):
        bad = int(np.argmax(op_id != np.arange(n)))
        raise PlanError(f"op row {bad}: op_id must equal the row number, got {op_id[bad]}")
    for col in ("flops", "hbm_bytes", "release_s"):  # inf would never finish, NaN never order
        arr = plan.column(col).to_numpy(zero_copy_only=False)
        if len(arr) and not np.isfinite(arr).all():
            i = int(np.argmax(~np.isfinite(arr)))
            raise PlanError(f"op {i}: {col} must be a finite number, got {arr[i]}")
    kind = plan.column("kind")
    nbytes = plan.column("bytes").to_numpy()
    n_ios = plan.column("n_ios").to_numpy()
    flops = plan.column("flops").to_numpy()
    hbm = plan.column("hbm_bytes").to_numpy()
    # string columns stay in Arrow: masks are computed there, values read per checked row
    io = _mask(pc.is_in(kind, value_set=pa.array(["read", "write"])))
    _check_extents(plan, io, nbytes, n_ios)
    on_cpu = _mask(pc.equal(kind, "compute")) & _mask(pc.equal(plan.column("dst"), CPU))
    _check_threads(plan, on_cpu)
    for i in _first_of_each_shape(plan, nbytes, n_ios, flops, hbm):
        i = int(i)
        _check_row(
            i,
            kind[i].as_py(),
            plan.column("src")[i].as_py(),
            plan.column("dst")[i].as_py(),
            int(nbytes[i]),
            int(n_ios[i]),
            plan.column("io_path")[i].as_py(),
            float(flops[i]),
            float(hbm[i]),
            nodes,
            ssds,
            gpus,
        )
    offsets, values = depends_csr(plan)
    owner = np.repeat(np.arange(n), np.diff(offsets))
    bad = np.nonzero((values < 0) | (values >= owner))[0]
    if len(bad):
        j = int(bad[0])
        raise PlanError(f"op {owner[j]}: depends_on {values[j]} must name an earlier op")
    for col in ("queue_depth", "offset", "stride", "release_s", "flops", "hbm_bytes"):
        arr = plan.column(col).to_numpy()
        if len(arr) and (arr < 0).any():
            raise PlanError(f"op {int(np.argmax(arr < 0))}: {col} must be >= 0")


def _mask(arr: pa.ChunkedArray) -> np.ndarray:
    """An Arrow boolean column as a numpy mask (null: False)."""
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool)


def _first_of_each_shape(
    plan: pa.Table, nbytes: np.ndarray, n_ios: np.ndarray, flops: np.ndarray, hbm: np.ndarray
) -> np.ndarray:
    """Rows that start each distinct combination of what :func:`_check_row`
    decides on (kind, src, dst, io_path, bytes > 0, n_ios > 0, has work), in
    row order: a row passes or fails as the first of its combination does, so
    checking these finds the first bad op, without a Python loop over all ops."""
    cols = {
        c: pc.dictionary_encode(plan.column(c), null_encoding="encode")
        .combine_chunks()
        .indices.to_numpy()
        for c in ("kind", "src", "dst", "io_path")
    }
    cols.update(b=nbytes > 0, n=n_ios > 0, w=(flops > 0) | (hbm > 0))
    return pd.DataFrame(cols).drop_duplicates().index.to_numpy()


def _check_extents(plan: pa.Table, io: np.ndarray, nbytes: np.ndarray, n_ios: np.ndarray):
    """Scattered ops: read/write only (``io``: the op is one), extents positive and
    consistent with the columns."""
    ptr, ext = extents_csr(plan)
    count = np.diff(ptr)
    owner = np.repeat(np.arange(len(count)), count)
    bad = (ext[:, 0] < 0) | (ext[:, 1] <= 0)
    if bad.any():
        j = int(np.argmax(bad))
        raise PlanError(
            f"op {owner[j]}: extent ({ext[j, 0]}, {ext[j, 1]}) needs offset >= 0 and length > 0"
        )
    has = count > 0
    if (has & ~io).any():
        raise PlanError(f"op {int(np.argmax(has & ~io))}: only read/write ops carry extents")
    io_bytes = plan.column("io_bytes").to_numpy().astype(np.int64)
    if (io_bytes < 0).any() or (io_bytes[~has] != 0).any():
        i = int(np.argmax((io_bytes < 0) | (~has & (io_bytes != 0))))
        raise PlanError(f"op {i}: io_bytes {int(io_bytes[i])} needs extents and must be >= 0")
    implied = extents_columns(ptr, ext, io_bytes)
    offset = plan.column("offset").to_numpy()
    stride = plan.column("stride").to_numpy()
    for col, arr in (("bytes", nbytes), ("n_ios", n_ios), ("offset", offset), ("stride", stride)):
        wrong = has & (np.asarray(arr, dtype=np.int64) != implied[col])
        if wrong.any():
            i = int(np.argmax(wrong))
            raise PlanError(
                f"op {i}: {col} {int(arr[i])} disagrees with its extents ({int(implied[col][i])})"
            )


def _check_threads(plan: pa.Table, on_cpu: np.ndarray) -> None:
    """``threads``: >= 1 on a ``cpu`` compute op (``on_cpu``), 0 on every other op."""
    threads = plan.column("threads").to_numpy().astype(np.int64)
    bad = np.where(on_cpu, threads < 1, threads != 0)
    if bad.any():
        i = int(np.argmax(bad))
        need = ">= 1 on a cpu compute op" if on_cpu[i] else "0 (not a cpu op)"
        raise PlanError(f"op {i}: threads {int(threads[i])} must be {need}")


def _check_row(
    i: int,
    kind: str,
    src: str,
    dst: str,
    nbytes: int,
    n_ios: int,
    io_path: str,
    flops: float,
    hbm: float,
    nodes: set[str],
    ssds: set[str],
    gpus: set[str],
) -> None:
    if kind not in KINDS:
        raise PlanError(f"op {i}: kind must be one of {KINDS}, got {kind!r}")
    if io_path not in IO_PATHS:
        raise PlanError(f"op {i}: io_path must be one of {IO_PATHS}, got {io_path!r}")
    if kind == "compute":
        if dst not in gpus and dst != CPU:
            raise PlanError(
                f"op {i}: compute dst must be a GPU of the profile or {CPU!r}, got {dst!r}"
            )
        if not (flops > 0 or hbm > 0):
            raise PlanError(f"op {i}: compute needs flops or hbm_bytes > 0")
        return
    for col, node in (("src", src), ("dst", dst)):
        if node not in nodes:
            raise PlanError(f"op {i}: {col} {node!r} is not a node of the profile")
    for col, value in (("bytes", nbytes), ("n_ios", n_ios)):
        if value <= 0:
            raise PlanError(f"op {i}: {kind} needs {col} > 0, got {value}")
    if kind == "read" and src not in ssds:
        raise PlanError(f"op {i}: read src must be an SSD, got {src!r}")
    if kind == "write" and dst not in ssds:
        raise PlanError(f"op {i}: write dst must be an SSD, got {dst!r}")
    if kind == "copy":
        for col, node in (("src", src), ("dst", dst)):
            if node in ssds:
                raise PlanError(f"op {i}: copy {col} {node!r} is an SSD (use read/write)")
    if kind in ("read", "write") and io_path == "none":
        raise PlanError(f"op {i}: {kind} needs an io_path other than 'none'")


def write_plan(plan: pa.Table | Iterable[pa.Table], path: str | Path) -> None:
    """Write a plan: one table, or consecutive tables of whole ops (a large
    plan built chunk by chunk, each written as it comes: one row group each)."""
    if isinstance(plan, pa.Table):
        pq.write_table(plan, path)
        return
    with pq.ParquetWriter(path, PLAN_SCHEMA) as writer:
        for chunk in plan:
            writer.write_table(chunk.cast(PLAN_SCHEMA))


def read_plan(path: str | Path) -> pa.Table:
    if not Path(path).exists():
        raise PlanError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise PlanError(f"{path}: cannot read plan: {exc}") from None
    try:
        return table.select([f.name for f in PLAN_SCHEMA]).cast(PLAN_SCHEMA)
    except (KeyError, pa.ArrowInvalid) as exc:
        raise PlanError(f"{path}: not a transfer plan: {exc}") from None
