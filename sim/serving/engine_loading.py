"""The serving engine's loads that start before the forward pass.

``async_load: schedule`` starts a request's load at admission and parks it
until the load ends (vLLM's WAITING_FOR_REMOTE_KVS); ``arrival`` (LMCache's
AsyncKV) prefetches on arrival: SSD hits are read into host memory while the
request queues (:mod:`sim.serving.asyncload`), and the host -> GPU leg stays
in its forward pass (:meth:`LoadingMixin._load`).  A prefetch never takes GPU
blocks that the requests queued ahead of it will need.  Mixed into
:class:`sim.serving.engine.Engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serving.asyncload import split_prefetch
from sim.serving.jobs import Piece, Transfer
from sim.serving.objcost import retrieval_cpu_s

if TYPE_CHECKING:
    from collections import deque

    import simpy

    from sim.models import ModelCard
    from sim.serving.designs import DesignParams
    from sim.serving.engine_config import EngineConfig
    from sim.serving.manager import BlockManager, Seq
    from sim.serving.stores import Offloader


class LoadingMixin:
    """Prefetch on arrival, loads at admission, and the forward pass's load."""

    # the engine's state these methods use (set by Engine.__init__)
    env: simpy.Environment
    cfg: EngineConfig
    design: DesignParams
    card: ModelCard
    mgr: BlockManager
    offload: Offloader
    waiting: deque[Seq]
    parked: list[Seq]
    running: list[Seq]
    _ssds: frozenset[str]
    _bounce: dict[str, str]
    _gds: bool
    _forward: dict[Seq, list[Piece]]

    if TYPE_CHECKING:  # methods of the engine's other parts (stubs for the type checker only)

        def _kick(self) -> None: ...  # the engine's: wake its loop
        def _target(self, s: Seq) -> int: ...  # the engine's (PreemptMixin)

    def _prefetch(self, s: Seq) -> None:
        """Asynchronous loading on arrival, if the GPU can spare the blocks."""
        hit = self.mgr.lookup(s)
        n_load = sum([h[3] for h in hit.lower])  # blocks of the lower hits
        if not n_load:
            return
        gpu = self.mgr.gpu
        ahead = sum(self._target(q) - len(q.blocks) - q.private for q in self.waiting if q is not s)
        if gpu.free + len(gpu.evictable) - n_load < ahead:
            return
        if self.mgr.acquire(s, hit, n_load):
            self._start_async(s)

    def _object_cpu(self, lowers: list) -> list[float]:
        return retrieval_cpu_s(self.design, lowers, self.card.layers, self._ssds)

    def _start_async(self, s: Seq) -> None:
        assert s.lookup is not None
        transfer = self.mgr.load(s, self.design.layerwise)
        if self.design.async_load == "arrival" and not self._gds:
            self._prefetch_to_host(s, transfer)
            return
        cpu = sum(self._object_cpu([s.lookup.lower]))  # the loader's per-object work
        job = self.offload.load(transfer)

        def landed(_e) -> None:
            self.mgr.on_loaded(s)
            if s in self.parked:
                self.parked.remove(s)
                self.running.append(s)
            self._kick()

        if cpu:  # the objects' CPU work after the bytes, before the request joins
            job.done.callbacks.append(lambda _e: self.env.timeout(cpu).callbacks.append(landed))
        else:
            job.done.callbacks.append(landed)

    def _prefetch_to_host(self, s: Seq, transfer: Transfer) -> None:
        """AsyncKV (:mod:`sim.serving.asyncload`): SSD hits are read into host
        memory now, the request is parked until they are in; the copies to the
        GPU (and the per-object work) stay in its forward pass."""
        arrival, self._forward[s] = split_prefetch(
            transfer.pieces, self._ssds, self._bounce, self.cfg.gpu
        )
        if not arrival:  # every hit already in host memory: nothing to wait for
            s.load = None
            return
        s.load = Transfer("load", "src", s.req.rid, arrival)

        def landed(_e) -> None:
            s.load = None
            if s in self.parked:
                self.parked.remove(s)
                self.running.append(s)
            self._kick()

        self.offload.load(s.load).done.callbacks.append(landed)

    def _load(self, s: Seq) -> Transfer:
        """The forward pass's load for ``s``: the AsyncKV host -> GPU leg if it
        was prefetched, else all of its hits."""
        forward = self._forward.pop(s, None)
        if forward is None:
            return self.mgr.load(s, self.design.layerwise)
        s.load = Transfer("load", "src", s.req.rid, forward)
        return s.load
