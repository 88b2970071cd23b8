"""Moving KV blocks between the GPU, host-memory modules and SSDs.

A transfer job's :class:`Piece` s are grouped into *streams*, one per
worker thread: a design with ``parallel`` I/O has a worker per device (seed
004 §IV-A3: "each pool device has its own worker thread"), a serialized
design (LMCache) one worker for everything but a write-through's copy on to
the tier below, which runs on that tier's own worker (LMCache's storage
manager hands each backend its puts; the local disk backend writes them on its
own event-loop thread).  A worker serves one job's
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
and layer, :mod:`sim.serving.tiers.layout`) split into I/Os of the design's I/O
size, capped by one range (one offload block of one layer is contiguous):
the plan's ``extents``, so the CPU cost of the software path
(:meth:`sim.hw.machine.Machine.cpu_seconds`) is paid per I/O and the real
backend replays the very same ranges.  An op's bytes and I/O count come
from the piece's range count and common length; the ranges themselves are
read (and a deferred piece's made, :meth:`sim.serving.policy.jobs.Piece.deferred`)
only when the run keeps its plan.  At most ``max_transfers`` ops are in
flight at once over all jobs.

The pieces come from the block manager as plain data
(:class:`sim.serving.policy.jobs.Transfer`); a :class:`Job` is their executor-side
twin, holding the events and the ops that completed each piece.

Everything here is driven by callbacks, not simpy processes: an op's end
(the one simpy event :meth:`OnlineOps.issue` makes per op) releases its
transfer slot, completes its piece and issues what follows at the same
instant, in the order a process per stream would have (a stream's next
read before this piece's copy; the copy before the worker's next job).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from hwprofiles import HardwareProfile
from kvtier.contracts.plan import extent_totals
from sim.serving.designs import DesignParams
from sim.serving.execute.online import OnlineOps
from sim.serving.policy.jobs import Piece, Transfer

Stage = tuple[str, str, str]  # (kind, src, dst) of one op


class Job:
    """A transfer in flight: ``done`` fires when every piece has arrived,
    ``layer_done[l]`` when every piece of layer ``l`` has (made only when
    ``layers``: a store's nobody waits for, and an event fired with no
    callback changes nothing but the cost); ``op[i]`` is the op that
    completed piece ``i`` (-1 until it has)."""

    __slots__ = ("transfer", "done", "layer_done", "op", "_left", "_layer_left")

    def __init__(self, env: simpy.Environment, transfer: Transfer, layers: bool = True):
        self.transfer = transfer
        pieces = transfer.pieces
        self.done = env.event()
        self.op = [-1] * len(pieces)
        self._left = len(pieces)
        self._layer_left: dict[int, int] = {}
        self.layer_done: dict[int, simpy.Event] = {}
        if layers:  # else nobody waits for a layer (a store): no events to fire
            for p in pieces:
                self._layer_left[p.layer] = self._layer_left.get(p.layer, 0) + 1
            self.layer_done = {layer: env.event() for layer in sorted(self._layer_left)}
        if not pieces:
            self.done.succeed()

    def ops(self, layer: int | None = None) -> list[int]:
        pieces = zip(self.transfer.pieces, self.op, strict=True)
        return [o for p, o in pieces if layer is None or p.layer == layer]

    def finish(self, i: int, op: int) -> None:
        """Piece ``i`` arrived with ``op``: fire what it completes (the job first)."""
        self.op[i] = op
        self._left -= 1
        if self._left == 0:
            self.done.succeed()
        if not self.layer_done:  # made without them
            return
        layer = self.transfer.pieces[i].layer
        self._layer_left[layer] -= 1
        if self._layer_left[layer] == 0:
            self.layer_done[layer].succeed()


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
        self._keep = ops.store.keep_plan  # the plan is written down: ops carry their ranges
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
        self._free = design.max_transfers  # transfer slots left
        self._queued: deque[Callable[[], None]] = deque()  # issues waiting for a slot
        self._workers: dict[tuple[str, str], deque[_Stream]] = {}  # busy ones: queued streams
        self._stage_cache: dict[tuple[str, str], list[Stage]] = {}
        # called (src, dst, bytes) with each copy issued (sim.serving.execute.multi.PeerHbm)
        self.on_copy: Callable[[str, str, int], None] | None = None

    # ---- public ----------------------------------------------------------------
    def start(self, t: Transfer, layers: bool = True) -> Job:
        """Start moving ``t``'s pieces now, grouped into streams by device on its
        ``by`` end ('src' for loads, 'dst' for stores); returns the job
        (with its ``layer_done`` events when ``layers``)."""
        job = Job(self.env, t, layers)
        by, parallel, pieces = t.by, self.design.parallel, t.pieces
        # a serialized design's one worker; a write-through's copy on to the tier below
        # runs on that tier's own (LMCache: every backend's batched_submit_put_task, the
        # disk's on its own event-loop thread: lmcache/v1/storage_backend/
        # local_disk_backend.py, asyncio.run_coroutine_threadsafe(..., self.loop))
        whole = "all" if t.src is None or t.tag != "store" else t.dst.name
        if len(pieces) == 1:  # one stream (a drain's store or demotion)
            streams = {getattr(pieces[0], by) if parallel else whole: [0]}
        else:
            streams = {}
            for i, p in enumerate(pieces):
                key = getattr(p, by) if parallel else whole
                streams.setdefault(key, []).append(i)
        for key, idx in streams.items():
            stream = _Stream(self, job, idx, (by, key))
            queue = self._workers.get(stream.worker)
            if queue is None:  # an idle worker: it starts now
                self._workers[stream.worker] = deque()
                stream.issue_first()
            else:
                queue.append(stream)
        return job

    # ---- workers and slots -------------------------------------------------------
    def worker_free(self, worker: tuple[str, str]) -> None:
        """``worker`` finished a stream: the next queued one (FCFS) starts."""
        queue = self._workers[worker]
        if queue:
            queue.popleft().issue_first()
        else:
            del self._workers[worker]

    def acquire(self, issue: Callable[[], None]) -> None:
        """Run ``issue`` when one of ``max_transfers`` slots is free (FIFO)."""
        if self._free:
            self._free -= 1
            issue()
        else:
            self._queued.append(issue)

    def release(self) -> None:
        if self._queued:
            self._queued.popleft()()
        else:
            self._free += 1

    # ---- ops ---------------------------------------------------------------------
    def stages(self, p: Piece) -> list[Stage]:
        """(kind, src, dst) of the ops that move ``p``."""
        key = (p.src, p.dst)
        stages = self._stage_cache.get(key)
        if stages is None:
            stages = self._stage_cache[key] = self._route(p.src, p.dst)
        return stages

    def _route(self, src: str, dst: str) -> list[Stage]:
        src_ssd, dst_ssd = src in self.ssds, dst in self.ssds
        if src_ssd and dst_ssd:  # pragma: no cover - no design moves SSD to SSD
            raise ValueError("SSD to SSD transfer")
        if src_ssd:
            if dst != self.gpu or self.gds:
                return [("read", src, dst)]
            return [("read", src, self.bounce[src]), ("copy", self.bounce[src], dst)]
        if dst_ssd:
            if src != self.gpu or self.gds:
                return [("write", src, dst)]
            return [("copy", src, self.bounce[dst]), ("write", self.bounce[dst], dst)]
        return [("copy", src, dst)]

    def issue(self, stage: Stage, p: Piece, deps: list[int], t: Transfer, on_done) -> None:
        """Issue one op of piece ``p`` now; ``on_done(op)`` when it ends."""
        kind, src, dst = stage
        if kind == "copy":
            self.ops.issue(kind, src, dst, int(round(p.nbytes)), 1, deps, on_done,
                           step=t.rid, layer=p.layer, tag=t.tag)  # fmt: skip
            if self.on_copy is not None:
                self.on_copy(src, dst, int(round(p.nbytes)))
            return
        iob = self.io_bytes
        # the ranges are read only to be written down (as runs where the piece was
        # made as runs: a store's), or when their lengths differ
        runs = p.runs() if self._keep and p.length > 0 else None
        ext = p.extents if runs is None and (self._keep or p.length <= 0) else None
        nbytes, n_ios = _totals(ext, p.ranges, p.length, iob)
        if nbytes != int(round(p.nbytes)):  # pragma: no cover - a layout bug
            raise RuntimeError(f"{src}->{dst}: extents cover {nbytes} of {p.nbytes} B")
        self.ops.issue(
            kind, src, dst, nbytes, n_ios, deps, on_done,
            queue_depth=self.design.queue_depth,
            io_path="gds" if self.gpu in (src, dst) else self.io_path,
            extents=ext if ext is not None and len(ext) else None, io_bytes=iob,
            step=t.rid, layer=p.layer, tag=t.tag,
            runs=runs if runs is not None and len(runs) else None,
        )  # fmt: skip


def _totals(ext: np.ndarray | None, n: int, length: int, io_bytes: int) -> tuple[int, int]:
    """Bytes and I/O count of ``n`` ranges ``ext`` cut into I/Os of ``io_bytes``
    (0 = one I/O per range): from Python ints when every range is ``length``
    long (``ext`` then need not be made), else reduced over the array
    (:func:`kvtier.contracts.plan.extent_totals`)."""
    if length > 0:
        return n * length, n * (-(-length // io_bytes)) if io_bytes > 0 else n
    return extent_totals(ext, io_bytes)


class _Stream:
    """One job's pieces on one worker: a piece's first op, when it ends the
    next piece's; second stages (bounce-buffer copies or writes) in piece
    order, each after its own first stage and the previous second stage."""

    __slots__ = ("mover", "job", "idx", "worker", "k", "prev_first", "pending", "busy", "last",
                 "cur")  # fmt: skip

    def __init__(self, mover: Mover, job: Job, idx: list[int], worker: tuple[str, str]):
        self.mover, self.job, self.idx, self.worker = mover, job, idx, worker
        self.k = 0  # position in idx of the piece whose first op is next
        self.prev_first: list[int] = []
        # (piece, first op, stage) of first stages done, made with the first second stage
        self.pending: deque[tuple[int, int, Stage]] | None = None
        self.busy = False  # a second stage is in flight
        self.last: int | None = None  # the previous second stage's op
        # the piece whose first op is in flight (one at a time) and its second stage
        self.cur: tuple[int, Stage | None] = (-1, None)

    def issue_first(self) -> None:
        i = self.idx[self.k]
        p = self.job.transfer.pieces[i]
        stages = self.mover.stages(p)
        self.cur = (i, stages[1] if len(stages) > 1 else None)
        # bound per op, not kept on the stream (that would be a cycle: the stream
        # and its job would wait for the garbage collector rather than go at once)
        deps, mover, ended = self.prev_first, self.mover, self._first_ended
        if mover._free:  # mover.acquire, without its deferred call
            mover._free -= 1
            mover.issue(stages[0], p, deps, self.job.transfer, ended)
        else:
            mover.acquire(lambda: mover.issue(stages[0], p, deps, self.job.transfer, ended))

    def _first_ended(self, op: int) -> None:
        i, second = self.cur
        self._first_done(i, op, second)

    def _first_done(self, i: int, op: int, second: Stage | None) -> None:
        self.mover.release()
        if second is None:
            self.job.finish(i, op)
        else:
            if self.pending is None:
                self.pending = deque()
            self.pending.append((i, op, second))
        self.prev_first = [op]
        self.k += 1
        if self.k < len(self.idx):
            self.issue_first()
            self._try_second()
        else:
            self._try_second()
            self.mover.worker_free(self.worker)

    def _try_second(self) -> None:
        if self.busy or not self.pending:  # (None: no second stage yet)
            return
        i, first, stage = self.pending.popleft()
        self.busy = True
        deps = [first] if self.last is None else sorted({first, self.last})
        p, t = self.job.transfer.pieces[i], self.job.transfer

        def ended(op: int) -> None:
            self.mover.release()
            self.last, self.busy = op, False
            self.job.finish(i, op)
            self._try_second()

        self.mover.acquire(lambda: self.mover.issue(stage, p, deps, t, ended))
