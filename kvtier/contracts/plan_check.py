"""Validation of a transfer plan against its schema, its geometry and a profile.

:func:`validate_plan` raises :class:`~kvtier.contracts.plan_schema.PlanError` with one
line naming the first bad op and column.  It is vectorised: masks over whole
columns, and the per-row rules (:func:`_check_row`) run only on the first row
of each distinct combination of what they decide on, so a 1M-op plan costs no
Python loop over its ops.  A scattered op must agree with its extents:
``n_ios`` their I/O count, ``bytes`` their total length, ``offset`` the first
range's offset and ``stride`` 0 (:mod:`kvtier.contracts.geometry`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from kvtier.contracts.geometry import extents_columns, extents_csr
from kvtier.contracts.plan_schema import (
    COPY_IO_PATHS,
    CPU,
    IO_PATHS,
    KINDS,
    PLAN_SCHEMA,
    PlanError,
    depends_csr,
)


def validate_plan(
    plan: pa.Table, nodes: Iterable[str], ssds: Iterable[str], gpus: Iterable[str]
) -> None:
    """Check a plan against the schema and a profile's node names.

    Raises :class:`PlanError` with one line naming the first bad op and column.
    """
    if not plan.schema.equals(PLAN_SCHEMA, check_metadata=False):
        missing = [f.name for f in PLAN_SCHEMA if f.name not in plan.schema.names]
        raise PlanError(f"plan does not match the plan schema (missing: {missing or 'types'})")
    import pyarrow.compute as pc  # noqa: PLC0415  (here: a serving run checks no plan)

    nodes, ssds, gpus = set(nodes), set(ssds), set(gpus)
    _check_ids_and_numbers(plan)
    kind = plan.column("kind")
    nbytes = plan.column("bytes").to_numpy()
    n_ios = plan.column("n_ios").to_numpy()
    flops = plan.column("flops").to_numpy()
    hbm = plan.column("hbm_bytes").to_numpy()
    # string columns stay in Arrow: masks are computed there, values read per checked row
    io = _mask(pc.is_in(kind, value_set=pa.array(["read", "write"])))
    _check_extents(plan, io, nbytes, n_ios)
    compute = _mask(pc.equal(kind, "compute"))
    on_cpu = compute & _mask(pc.equal(plan.column("dst"), CPU))
    _check_threads(plan, on_cpu)
    _check_gpu_s(plan, compute & ~on_cpu)
    _check_core_gbps(plan, on_cpu)
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
    _check_depends_and_signs(plan)


def _check_ids_and_numbers(plan: pa.Table) -> None:
    """``op_id`` is the row number; flops, hbm_bytes, gpu_s, core_gbps and release_s are finite."""
    n = plan.num_rows
    op_id = plan.column("op_id").to_numpy()
    if not np.array_equal(op_id, np.arange(n)):
        bad = int(np.argmax(op_id != np.arange(n)))
        raise PlanError(f"op row {bad}: op_id must equal the row number, got {op_id[bad]}")
    # inf would never finish, NaN never order
    for col in ("flops", "hbm_bytes", "gpu_s", "core_gbps", "release_s"):
        arr = plan.column(col).to_numpy(zero_copy_only=False)
        if len(arr) and not np.isfinite(arr).all():
            i = int(np.argmax(~np.isfinite(arr)))
            raise PlanError(f"op {i}: {col} must be a finite number, got {arr[i]}")


def _check_depends_and_signs(plan: pa.Table) -> None:
    """Every dependency names an earlier op; counts, positions and times are >= 0."""
    offsets, values = depends_csr(plan)
    owner = np.repeat(np.arange(plan.num_rows), np.diff(offsets))
    bad = np.nonzero((values < 0) | (values >= owner))[0]
    if len(bad):
        j = int(bad[0])
        raise PlanError(f"op {owner[j]}: depends_on {values[j]} must name an earlier op")
    cols = ("queue_depth", "offset", "stride", "release_s", "flops", "hbm_bytes", "gpu_s")
    for col in (*cols, "core_gbps"):
        arr = plan.column(col).to_numpy()
        if len(arr) and (arr < 0).any():
            raise PlanError(f"op {int(np.argmax(arr < 0))}: {col} must be >= 0")


def _mask(arr: pa.ChunkedArray) -> np.ndarray:
    """An Arrow boolean column as a numpy mask (null: False)."""
    import pyarrow.compute as pc  # noqa: PLC0415  (here: a serving run checks no plan)

    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool)


def _first_of_each_shape(
    plan: pa.Table, nbytes: np.ndarray, n_ios: np.ndarray, flops: np.ndarray, hbm: np.ndarray
) -> np.ndarray:
    """Rows that start each distinct combination of what :func:`_check_row`
    decides on (kind, src, dst, io_path, bytes > 0, n_ios > 0, has work), in
    row order: a row passes or fails as the first of its combination does, so
    checking these finds the first bad op, without a Python loop over all ops."""
    import pyarrow.compute as pc  # noqa: PLC0415  (here: a serving run checks no plan)

    cols = {
        c: pc.dictionary_encode(plan.column(c), null_encoding="encode")
        .combine_chunks()
        .indices.to_numpy()
        for c in ("kind", "src", "dst", "io_path")
    }
    cols.update(b=nbytes > 0, n=n_ios > 0, w=(flops > 0) | (hbm > 0))
    combos = np.stack([c.astype(np.int64) for c in cols.values()], axis=1)
    first = np.unique(combos, axis=0, return_index=True)[1]  # each combination's first row
    return np.sort(first)


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


def _check_core_gbps(plan: pa.Table, on_cpu: np.ndarray) -> None:
    """``core_gbps`` (a kernel's measured per-thread rate) only on a ``cpu`` compute op."""
    rate = plan.column("core_gbps").to_numpy()
    bad = ~on_cpu & (rate != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise PlanError(f"op {i}: core_gbps {rate[i]} must be 0 (not a cpu compute op)")


def _check_gpu_s(plan: pa.Table, on_gpu: np.ndarray) -> None:
    """``gpu_s`` (a measured time) only on a GPU compute op (``on_gpu``)."""
    gpu_s = plan.column("gpu_s").to_numpy()
    bad = ~on_gpu & (gpu_s != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise PlanError(f"op {i}: gpu_s {gpu_s[i]} must be 0 (not a GPU compute op)")


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
    if io_path not in IO_PATHS + COPY_IO_PATHS:
        raise PlanError(
            f"op {i}: io_path must be one of {IO_PATHS + COPY_IO_PATHS}, got {io_path!r}"
        )
    if io_path in COPY_IO_PATHS and kind != "copy":
        raise PlanError(f"op {i}: io_path {io_path!r} is for copy ops, not {kind!r}")
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
