"""Transfer plans: the contract between policies and executors.

This module is the plan's public face, and everything below is importable
from it (``from kvtier.contracts.plan import X``); its parts live in

* :mod:`kvtier.contracts.plan_schema` -- the columns (a table of what each means), their
  defaults, :func:`plan_from_columns` and the Parquet form
  (:func:`write_plan`, :func:`read_plan`);
* :mod:`kvtier.contracts.plan_check` -- :func:`validate_plan`;
* :mod:`kvtier.contracts.geometry` -- the byte ranges and I/Os of read/write ops;
* here -- :class:`PlanBuilder`.

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

Policies build plans with :class:`PlanBuilder` (or whole columns at once with
:func:`plan_from_columns`); executors take the table as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.geometry import (  # re-exported: the plan's geometry is part of its contract
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
from kvtier.contracts.plan_check import validate_plan
from kvtier.contracts.plan_schema import (
    COLUMN_DEFAULTS,
    COPY_IO_PATHS,
    CPU,
    EXTENT,
    IO_PATHS,
    KINDS,
    PLAN_SCHEMA,
    PlanError,
    depends_csr,
    plan_from_columns,
    read_plan,
    write_plan,
)

__all__ = [
    "BLOCK",
    "COPY_IO_PATHS",
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
        unknown = set(fields) - set(COLUMN_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown plan column(s): {sorted(unknown)}")
        row = {**COLUMN_DEFAULTS, **fields, "op_id": op_id, "kind": kind, "dst": dst}
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
        """Work on ``threads`` host cores: ``flops`` over ``dram_bytes`` read from DRAM
        (``core_gbps=``: its kernel's measured per-thread rate, where one is known)."""
        return self.add("compute", CPU, flops=flops, hbm_bytes=dram_bytes, threads=threads, **kw)

    def table(self) -> pa.Table:
        cols = {k: v for k, v in self._cols.items() if k not in ("op_id", "depends_on", "extents")}
        dep_ptr = np.cumsum([0] + [len(d) for d in self._cols["depends_on"]], dtype=np.int64)
        deps = [x for d in self._cols["depends_on"] for x in d]
        ext_ptr = np.cumsum([0] + [len(e) for e in self._ext], dtype=np.int64)
        ext = np.concatenate(self._ext) if self._ext else NO_EXTENTS
        return plan_from_columns(cols, dep_ptr, deps, (ext_ptr, ext))
