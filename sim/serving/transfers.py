"""Moving KV blocks between the GPU, host-memory modules and SSDs.

A transfer job's :class:`Piece` s are grouped into *streams*, one per
worker thread: a design with ``parallel`` I/O has a worker per device (seed
004 §IV-A3: "each pool device has its own worker thread"), a serialized
design (LMCache) one worker for everything.  A worker serves one job's
stream at a time, first come first served (LMCache retrieves request by
request), and within it issues a piece, waits for it, issues the next;
loads and stores have separate workers.

A piece becomes one or two plan ops, by route:

* host memory <-> GPU: a ``copy``;
* SSD <-> GPU with GPUDirect: a ``read``/``write`` straight to the GPU on
  the ``gds`` path;
* SSD <-> GPU without it: through a bounce buffer in host memory, a
  ``read`` into it then a ``copy`` to the GPU (or a ``copy`` then a
  ``write``).  The two stages pipeline: the stream's next read may start
  while this piece is copied, and the copies go in order;
* host memory -> SSD (demotion, write-through): a ``write``.

SSD ops carry ``n_ios`` I/Os of the design's I/O size, capped by one
extent (one offload block of one layer is contiguous), so the CPU cost of
the software path (:meth:`sim.hw.machine.Machine.cpu_seconds`) is paid per
I/O.  At most ``max_transfers`` ops are in flight at once over all jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from hwprofiles import HardwareProfile
from sim.serving.designs import DesignParams
from sim.serving.online import OnlineOps


@dataclass
class Piece:
    """``nbytes`` from ``src`` to ``dst``; ``layer`` -1 = all layers."""

    src: str
    dst: str
    nbytes: float
    layer: int = -1
    done: simpy.Event | None = None
    op: int = -1  # the op that completed it


@dataclass
class Job:
    """A transfer in flight: ``done`` fires when every piece has arrived."""

    pieces: list[Piece]
    done: simpy.Event
    layer_done: dict[int, simpy.Event] = field(default_factory=dict)

    def ops(self, layer: int | None = None) -> list[int]:
        return [p.op for p in self.pieces if layer is None or p.layer == layer]


class Mover:
    """Issues the ops of transfer jobs on an :class:`OnlineOps`."""

    def __init__(
        self,
        ops: OnlineOps,
        design: DesignParams,
        profile: HardwareProfile,
        layer_bytes: float,
        bounce: dict[str, str],
        gpu: str,
    ):
        self.ops = ops
        self.env = ops.env
        self.design = design
        self.gpu = gpu
        self.ssds = set(profile.ssd_names)
        self.gds = design.gds and profile.software.gpudirect
        # KvikIO without GPUDirect falls back to POSIX reads into a host buffer
        path = design.io_path
        self.io_path = "kernel_fs" if path == "gds" and not self.gds else path
        self.io_bytes = min(design.io_bytes(), layer_bytes)
        self.layer_bytes = layer_bytes
        self.bounce = bounce
        self.slots = simpy.Resource(self.env, capacity=design.max_transfers)
        self.workers: dict[tuple[str, str], simpy.Resource] = {}

    # ---- public ----------------------------------------------------------------
    def start(self, pieces: list[Piece], by: str, step: int, tag: str) -> Job:
        """Start moving ``pieces`` now, grouped into streams by device (``by``
        = 'src' for loads, 'dst' for stores); returns the job."""
        for p in pieces:
            p.done = self.env.event()
        job = Job(pieces, self.env.all_of([p.done for p in pieces]))
        for layer in sorted({p.layer for p in pieces}):
            job.layer_done[layer] = self.env.all_of([p.done for p in pieces if p.layer == layer])
        streams: dict[str, list[Piece]] = {}
        for p in pieces:
            key = getattr(p, by) if self.design.parallel else "all"
            streams.setdefault(key, []).append(p)
        for key, stream in streams.items():
            worker = self.workers.setdefault((by, key), simpy.Resource(self.env, capacity=1))
            self.env.process(self._stream(stream, worker, step, tag))
        return job

    # ---- stages ------------------------------------------------------------------
    def _stages(self, p: Piece) -> list[tuple[str, str, str]]:
        """(kind, src, dst) of the ops that move ``p``."""
        src_ssd, dst_ssd = p.src in self.ssds, p.dst in self.ssds
        if src_ssd and dst_ssd:  # pragma: no cover - no design moves SSD to SSD
            raise ValueError("SSD to SSD transfer")
        if src_ssd:
            if p.dst != self.gpu or self.gds:
                return [("read", p.src, p.dst)]
            return [("read", p.src, self.bounce[p.src]), ("copy", self.bounce[p.src], p.dst)]
        if dst_ssd:
            if p.src != self.gpu or self.gds:
                return [("write", p.src, p.dst)]
            return [("copy", p.src, self.bounce[p.dst]), ("write", self.bounce[p.dst], p.dst)]
        return [("copy", p.src, p.dst)]

    def _fields(self, kind: str, src: str, dst: str, nbytes: float) -> dict:
        if kind == "copy":
            return {"nbytes": int(round(nbytes)), "n_ios": 1}
        extents = max(1, round(nbytes / self.layer_bytes))
        n_ios = extents * math.ceil(self.layer_bytes / self.io_bytes)
        direct = self.gpu in (src, dst)
        return {
            "nbytes": int(round(nbytes)),
            "n_ios": n_ios,
            "io_path": "gds" if direct else self.io_path,
            "queue_depth": self.design.queue_depth,
        }

    def _op(self, kind: str, src: str, dst: str, nbytes: float, deps: list[int], **fields):
        with self.slots.request() as slot:
            yield slot
            op, ev = self.ops.submit(
                kind, src, dst, depends_on=deps, **self._fields(kind, src, dst, nbytes), **fields
            )
            yield ev
        return op

    def _stream(self, pieces: list[Piece], worker: simpy.Resource, step: int, tag: str):
        """One job's pieces on one device's worker, which serves jobs in turn."""
        with worker.request() as turn:
            yield turn
            yield from self._pieces(pieces, step, tag)

    def _pieces(self, pieces: list[Piece], step: int, tag: str):
        prev_first: list[int] = []
        prev_second: simpy.Process | None = None
        for p in pieces:
            stages = self._stages(p)
            kind, src, dst = stages[0]
            first = yield from self._op(
                kind, src, dst, p.nbytes, prev_first, step=step, layer=p.layer, tag=tag
            )
            prev_first = [first]
            if len(stages) == 1:
                p.op = first
                p.done.succeed(first)
                continue
            prev_second = self.env.process(
                self._second(p, stages[1], first, prev_second, step, tag)
            )

    def _second(self, p: Piece, stage, first: int, before: simpy.Process | None, step, tag):
        deps = [first]
        if before is not None:
            deps.append((yield before))
        kind, src, dst = stage
        op = yield from self._op(kind, src, dst, p.nbytes, deps, step=step, layer=p.layer, tag=tag)
        p.op = op
        p.done.succeed(op)
        return op
