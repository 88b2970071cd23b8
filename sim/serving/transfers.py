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

SSD ops carry the piece's byte ranges on the SSD (one per offload block
and layer, :mod:`sim.serving.layout`) split into I/Os of the design's I/O
size, capped by one range (one offload block of one layer is contiguous):
the plan's ``extents``, so the CPU cost of the software path
(:meth:`sim.hw.machine.Machine.cpu_seconds`) is paid per I/O and the real
backend replays the very same ranges.  At most ``max_transfers`` ops are in
flight at once over all jobs.

The pieces come from the block manager as plain data
(:class:`sim.serving.jobs.Transfer`); a :class:`Job` is their executor-side
twin, holding the events and the ops that completed each piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from hwprofiles import HardwareProfile
from sim.serving.designs import DesignParams
from sim.serving.jobs import Piece, Transfer
from sim.serving.online import OnlineOps


@dataclass
class Job:
    """A transfer in flight: ``piece_done[i]`` fires with the op that completed
    piece ``i``; ``done`` when every piece has arrived."""

    transfer: Transfer
    piece_done: list[simpy.Event]
    done: simpy.Event
    layer_done: dict[int, simpy.Event] = field(default_factory=dict)
    op: list[int] = field(default_factory=list)  # per piece, the op that completed it

    def ops(self, layer: int | None = None) -> list[int]:
        pieces = zip(self.transfer.pieces, self.op, strict=True)
        return [o for p, o in pieces if layer is None or p.layer == layer]


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
        self.io_bytes = int(min(design.io_bytes(), layer_bytes))
        self.layer_bytes = layer_bytes
        self.bounce = bounce
        self.slots = simpy.Resource(self.env, capacity=design.max_transfers)
        self.workers: dict[tuple[str, str], simpy.Resource] = {}

    # ---- public ----------------------------------------------------------------
    def start(self, t: Transfer) -> Job:
        """Start moving ``t``'s pieces now, grouped into streams by device on its
        ``by`` end ('src' for loads, 'dst' for stores); returns the job."""
        pieces, by = t.pieces, t.by
        events = [self.env.event() for _ in pieces]
        job = Job(t, events, self.env.all_of(events), op=[-1] * len(pieces))
        for layer in sorted({p.layer for p in pieces}):
            job.layer_done[layer] = self.env.all_of(
                [ev for p, ev in zip(pieces, events, strict=True) if p.layer == layer]
            )
        streams: dict[str, list[int]] = {}
        for i, p in enumerate(pieces):
            key = getattr(p, by) if self.design.parallel else "all"
            streams.setdefault(key, []).append(i)
        for key, stream in streams.items():
            worker = self.workers.setdefault((by, key), simpy.Resource(self.env, capacity=1))
            self.env.process(self._stream(job, stream, worker))
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

    def _fields(self, kind: str, src: str, dst: str, p: Piece) -> dict:
        if kind == "copy":
            return {"nbytes": int(round(p.nbytes)), "n_ios": 1}
        covered = int(p.extents[:, 1].sum())
        if covered != int(round(p.nbytes)):  # pragma: no cover - a layout bug
            raise RuntimeError(f"{src}->{dst}: extents cover {covered} of {p.nbytes} B")
        direct = self.gpu in (src, dst)
        return {
            "extents": p.extents,
            "io_bytes": self.io_bytes,
            "io_path": "gds" if direct else self.io_path,
            "queue_depth": self.design.queue_depth,
        }

    def _op(self, kind: str, src: str, dst: str, p: Piece, deps: list[int], job: Job):
        t = job.transfer
        with self.slots.request() as slot:
            yield slot
            op, ev = self.ops.submit(
                kind,
                src,
                dst,
                depends_on=deps,
                step=t.rid,
                layer=p.layer,
                tag=t.tag,
                **self._fields(kind, src, dst, p),
            )
            yield ev
        return op

    def _stream(self, job: Job, stream: list[int], worker: simpy.Resource):
        """One job's pieces on one device's worker, which serves jobs in turn."""
        with worker.request() as turn:
            yield turn
            yield from self._pieces(job, stream)

    def _pieces(self, job: Job, stream: list[int]):
        prev_first: list[int] = []
        prev_second: simpy.Process | None = None
        for i in stream:
            p = job.transfer.pieces[i]
            stages = self._stages(p)
            kind, src, dst = stages[0]
            first = yield from self._op(kind, src, dst, p, prev_first, job)
            prev_first = [first]
            if len(stages) == 1:
                self._done(job, i, first)
                continue
            prev_second = self.env.process(self._second(job, i, stages[1], first, prev_second))

    def _second(self, job: Job, i: int, stage, first: int, before: simpy.Process | None):
        deps = [first]
        if before is not None:
            deps.append((yield before))
        kind, src, dst = stage
        op = yield from self._op(kind, src, dst, job.transfer.pieces[i], deps, job)
        self._done(job, i, op)
        return op

    @staticmethod
    def _done(job: Job, i: int, op: int) -> None:
        job.op[i] = op
        job.piece_done[i].succeed(op)
