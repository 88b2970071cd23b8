"""The transfer plan's columns, their defaults and their Parquet form.

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
gpu_s         float64     GPU compute op: its seconds as a measured source
                          timed them (:mod:`sim.hw.measured`); 0 = the
                          roofline of ``flops`` and ``hbm_bytes``
threads       int32       ``cpu`` compute op: host cores it runs on (>= 1);
                          0 for every other op
core_gbps     float64     ``cpu`` compute op: the DRAM bytes one thread of its
                          kernel moves per second where a measurement gives
                          it (``index_copy_``: ``analysis/host_copy.csv``),
                          at most the profile's ``cpu.core_mem_gbps``; 0 =
                          that per-core rate
release_s     float64     the op may not start before this time (arrivals)
depends_on    list<int64> ops that must finish before this one starts
tag           string      free label for reports (``kv_fetch``, ``attn``)
============  ==========  ==================================================

Host-CPU compute.  A compute op with ``dst = "cpu"`` (:data:`CPU`) runs on
``threads`` cores of the profile's CPU (more threads than the machine has
cores time-share them: the op gets at most all its cores): it moves ``hbm_bytes`` from host DRAM and
executes ``flops`` there (e.g. a design scoring its query against a
DRAM-resident index).  A GPU compute op has ``threads`` 0.

:func:`plan_from_columns` builds the table from whole columns (CSR
dependencies and extents); :func:`write_plan` / :func:`read_plan` store it.
:mod:`kvtier.contracts.plan` is the plan's public face (builder, validation, geometry).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import parquet_options
from kvtier.contracts.geometry import NO_EXTENTS

KINDS = ("read", "write", "copy", "compute")
CPU = "cpu"  # the ``dst`` of a compute op that runs on the host CPU
IO_PATHS = ("kernel_fs", "io_uring", "passthrough", "gds", "none")
# a host-to-device copy issued as ``n_ios`` CUDA copy calls (copy ops only)
COPY_IO_PATHS = ("cuda_copy",)

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
        ("gpu_s", pa.float64()),
        ("threads", pa.int32()),
        ("core_gbps", pa.float64()),
        ("release_s", pa.float64()),
        ("depends_on", pa.list_(pa.int64())),
        ("tag", pa.string()),
    ]
)

OP_IDENTITY = ("step", "layer", "kind", "src", "dst", "bytes", "n_ios", "tag")
"""The columns that say which op a record is of, the plan's own values copied into
every op record (:data:`kvtier.contracts.records.OP_RECORD_SCHEMA`, after ``op_id``)
by both backends; an online run keeps only these of the ops it issued."""

# what a column holds when an op does not give it (op_id, kind, dst, depends_on
# and extents have none: every op names them, or they are derived)
COLUMN_DEFAULTS: dict[str, Any] = {
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
    "gpu_s": 0.0,
    "threads": 0,
    "core_gbps": 0.0,
    "release_s": 0.0,
    "tag": "",
}


class PlanError(ValueError):
    """A plan is malformed; the message names the op and the column."""


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
        elif name in COLUMN_DEFAULTS:
            cols[name] = (
                np.full(n, COLUMN_DEFAULTS[name])
                if not isinstance(COLUMN_DEFAULTS[name], str)
                else [COLUMN_DEFAULTS[name]] * n
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


def write_plan(plan: pa.Table | Iterable[pa.Table], path: str | Path) -> None:
    """Write a plan: one table, or consecutive tables of whole ops (a large
    plan built chunk by chunk, each written as it comes: one row group each)."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (here: a serving run reads and writes no file)

    if isinstance(plan, pa.Table):
        pq.write_table(plan, path, **parquet_options(plan.schema))
        return
    with pq.ParquetWriter(path, PLAN_SCHEMA, **parquet_options(PLAN_SCHEMA)) as writer:
        for chunk in plan:
            writer.write_table(chunk.cast(PLAN_SCHEMA))


def read_plan(path: str | Path) -> pa.Table:
    import pyarrow.parquet as pq  # noqa: PLC0415  (here: a serving run reads and writes no file)

    if not Path(path).exists():
        raise PlanError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise PlanError(f"{path}: cannot read plan: {exc}") from None
    for col in ("gpu_s", "core_gbps"):  # a plan written before the column existed
        if col not in table.column_names:
            table = table.append_column(col, pa.array(np.zeros(table.num_rows)))
    try:
        return table.select([f.name for f in PLAN_SCHEMA]).cast(PLAN_SCHEMA)
    except (KeyError, pa.ArrowInvalid) as exc:
        raise PlanError(f"{path}: not a transfer plan: {exc}") from None
