"""Submit plan ops one at a time to a running simulation (closed loop).

A serving engine cannot precompute its plan: when a request is admitted
depends on when earlier loads finished.  :class:`OnlineOps` gives the engine
the same transfer machinery as :class:`sim.executor.PlanExecutor` (the very
same :func:`sim.executor.op_physics` and :func:`sim.executor.launch` on the
machine's flow networks) one op at a time: :meth:`OnlineOps.submit` starts
an op now and returns a simpy event that fires when it ends.

Every submitted op is also written down as a plan row (``release_s`` = the
time it was issued, ``depends_on`` = the ops whose completion the engine
waited for before issuing it), so the run can be replayed open loop: the
plan executor, or the real backend, started on :meth:`OnlineOps.plan` issues
every op at the same instant the engine did (tests check the simulator
reproduces the same end times).  A read/write given ``extents`` (one
(offset, length) per I/O on its SSD) is written down with them, so the
replay touches the byte ranges the design's layout chose; its bytes and
I/O count, and so its physics, are the extents' total and number.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import simpy

from kvtier.plan import PlanBuilder, extent_totals
from kvtier.records import Records, op_records
from sim.executor import OpPhysics, device_records, launch, op_physics
from sim.hw.machine import Machine


class OnlineOps:
    """Ops issued while the simulation runs, and their records."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self.env = machine.env
        self.builder = PlanBuilder()
        self.start_s: list[float] = []
        self.end_s: list[float] = []
        self.cpu_s: list[float] = []
        self.flows = 0
        self._cache: dict[tuple, OpPhysics] = {}
        self._plan: pa.Table | None = None

    def __len__(self) -> int:
        return len(self.builder)

    def submit(
        self,
        kind: str,
        src: str,
        dst: str,
        *,
        nbytes: int = 0,
        n_ios: int = 0,
        queue_depth: int = 0,
        io_path: str = "none",
        flops: float = 0.0,
        hbm_bytes: float = 0.0,
        depends_on: Iterable[int] = (),
        extents: np.ndarray | None = None,
        **fields: Any,
    ) -> tuple[int, simpy.Event]:
        """Start an op now; returns (op id, event that fires when it ends).

        ``extents``: a read/write's (n, 2) byte ranges (offset, length), cut
        into I/Os of ``io_bytes`` (a plan column in ``fields``; 0 = one I/O per
        range); they set ``nbytes`` and ``n_ios``.  ``fields`` are the plan's free columns
        (``step``, ``layer``, ``tag``).
        """
        now = self.env.now
        deps = sorted(set(depends_on))
        if extents is not None and len(extents):
            nbytes, n_ios = extent_totals(extents, int(fields.get("io_bytes", 0)))
        else:
            extents = None
        op = self.builder.add(
            kind,
            dst,
            src=src,
            bytes=int(nbytes),
            n_ios=int(n_ios) if kind != "compute" else 0,
            queue_depth=queue_depth,
            io_path=io_path,
            flops=float(flops),
            hbm_bytes=float(hbm_bytes),
            release_s=now,
            depends_on=deps,
            extents=extents,
            **fields,
        )
        phys = self._physics(kind, src, dst, nbytes, n_ios, queue_depth, io_path, flops, hbm_bytes)
        done = self.env.event()
        left = [0]

        def part_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                self.end_s[op] = self.env.now
                done.succeed(op)

        self.start_s.append(now)
        self.end_s.append(float("nan"))
        self.cpu_s.append(phys.cpu_s)
        left[0] = launch(self.machine, phys, part_done)
        self.flows += left[0]
        return op, done

    def _physics(self, kind, src, dst, nbytes, n_ios, qd, io_path, flops, hbm) -> OpPhysics:
        if kind == "compute":
            return op_physics(self.machine, kind, "", dst, 0, 0, 0, "none", flops, hbm)
        key = (kind, src, dst, int(nbytes), int(n_ios), qd, io_path)
        phys = self._cache.get(key)
        if phys is None:
            phys = op_physics(self.machine, kind, src, dst, nbytes, n_ios, qd, io_path, 0.0, 0.0)
            self._cache[key] = phys
        return phys

    # ---- results ---------------------------------------------------------------
    def plan(self) -> pa.Table:
        """The ops issued so far, as a plan (built once per number of ops)."""
        if self._plan is None or self._plan.num_rows != len(self):
            self._plan = self.builder.table()
        return self._plan

    def records(self, stats: dict[str, Any] | None = None) -> Records:
        """Records of every op issued so far (all must have ended)."""
        plan = self.plan()
        makespan = max(self.end_s) if self.end_s else 0.0
        ops = op_records(plan, self.start_s, self.start_s, self.end_s, self.cpu_s, "sim")
        devices = device_records(plan, self.machine, makespan)
        m = self.machine
        base = {
            "ops": len(self),
            "flows": self.flows,
            "reratings": m.net.reratings + m.cpu_net.reratings + m.gpu_net.reratings,
            "makespan_s": makespan,
        }
        return Records(ops=ops, devices=devices, stats={**base, **(stats or {})})
