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
                          ``gpu1``); a compute op names its GPU in ``dst``
                          and leaves ``src`` empty
bytes         int64       payload bytes (0 for compute)
n_ios         int64       number of I/Os the bytes are split into (>= 1 for
                          read/write; an I/O is ``bytes / n_ios`` long)
queue_depth   int32       I/Os kept in flight by this op; 0 = device maximum
io_path       string      kernel_fs | io_uring | passthrough | gds | none
offset        int64       byte offset of the first I/O in the device's file
stride        int64       distance between consecutive I/Os; 0 = contiguous
flops         float64     compute op: floating-point operations
hbm_bytes     float64     compute op: bytes moved to/from HBM
release_s     float64     the op may not start before this time (arrivals)
depends_on    list<int64> ops that must finish before this one starts
tag           string      free label for reports (``kv_fetch``, ``attn``)
============  ==========  ==================================================

Policies build plans with :class:`PlanBuilder` (or whole columns at once with
:func:`plan_from_columns`); executors take the table as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KINDS = ("read", "write", "copy", "compute")
IO_PATHS = ("kernel_fs", "io_uring", "passthrough", "gds", "none")

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
        ("flops", pa.float64()),
        ("hbm_bytes", pa.float64()),
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
    "flops": 0.0,
    "hbm_bytes": 0.0,
    "release_s": 0.0,
    "tag": "",
}


class PlanError(ValueError):
    """A plan is malformed; the message names the op and the column."""


class PlanBuilder:
    """Append ops one at a time; ``add`` returns the new op's id."""

    def __init__(self) -> None:
        self._cols: dict[str, list[Any]] = {f.name: [] for f in PLAN_SCHEMA}

    def __len__(self) -> int:
        return len(self._cols["op_id"])

    def add(self, kind: str, dst: str, *, depends_on: Iterable[int] = (), **fields: Any) -> int:
        op_id = len(self)
        unknown = set(fields) - set(_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown plan column(s): {sorted(unknown)}")
        row = {**_DEFAULTS, **fields, "op_id": op_id, "kind": kind, "dst": dst}
        row["depends_on"] = list(depends_on)
        for name, col in self._cols.items():
            col.append(row[name])
        return op_id

    def read(self, ssd: str, dst: str, nbytes: int, n_ios: int, **kw: Any) -> int:
        return self.add("read", dst, src=ssd, bytes=nbytes, n_ios=n_ios, **kw)

    def write(self, src: str, ssd: str, nbytes: int, n_ios: int, **kw: Any) -> int:
        return self.add("write", ssd, src=src, bytes=nbytes, n_ios=n_ios, **kw)

    def copy(self, src: str, dst: str, nbytes: int, **kw: Any) -> int:
        return self.add("copy", dst, src=src, bytes=nbytes, n_ios=kw.pop("n_ios", 1), **kw)

    def compute(self, gpu: str, flops: float, hbm_bytes: float, **kw: Any) -> int:
        return self.add("compute", gpu, flops=flops, hbm_bytes=hbm_bytes, **kw)

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self._cols, schema=PLAN_SCHEMA)


def plan_from_columns(
    columns: dict[str, Any],
    depends_offsets: Sequence[int] | None = None,
    depends_values: Sequence[int] | None = None,
) -> pa.Table:
    """Build a plan from whole columns (numpy arrays or lists).

    ``op_id`` defaults to 0..N-1 and missing columns to their defaults.
    Dependencies come as CSR: op i depends on
    ``depends_values[depends_offsets[i]:depends_offsets[i+1]]``.
    """
    n = len(columns["kind"])
    cols: dict[str, Any] = {"op_id": np.arange(n, dtype=np.int64)}
    for field in PLAN_SCHEMA:
        name = field.name
        if name in ("op_id", "depends_on"):
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
    arrays = []
    for field in PLAN_SCHEMA:
        if field.name == "depends_on":
            arrays.append(pa.ListArray.from_arrays(offsets, values).cast(field.type))
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
    kind = plan.column("kind").to_pylist()
    src = plan.column("src").to_pylist()
    dst = plan.column("dst").to_pylist()
    nbytes = plan.column("bytes").to_numpy()
    n_ios = plan.column("n_ios").to_numpy()
    io_path = plan.column("io_path").to_pylist()
    flops = plan.column("flops").to_numpy()
    hbm = plan.column("hbm_bytes").to_numpy()
    for i in range(n):
        _check_row(
            i,
            kind[i],
            src[i],
            dst[i],
            int(nbytes[i]),
            int(n_ios[i]),
            io_path[i],
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
    for col in ("queue_depth", "offset", "stride", "release_s"):
        arr = plan.column(col).to_numpy()
        if len(arr) and (arr < 0).any():
            raise PlanError(f"op {int(np.argmax(arr < 0))}: {col} must be >= 0")


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
        if dst not in gpus:
            raise PlanError(f"op {i}: compute dst must be a GPU of the profile, got {dst!r}")
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


def write_plan(plan: pa.Table, path: str | Path) -> None:
    pq.write_table(plan, path)


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
