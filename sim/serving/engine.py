"""The serving engine: iteration-level continuous batching as a simpy process.

Serving is closed loop (when a request is admitted depends on when its
blocks finished loading), so nothing is planned ahead: the engine drives the
machine's flow network op by op through :class:`sim.serving.online.OnlineOps`
and writes every op down as it goes.

* **Client.**  Requests are sent at their ``arrival_s``, a session's turns in
  order (a user sends turn t+1 only after reading reply t), and with
  ``max_inflight`` at most that many outstanding (a closed-loop benchmark
  client such as LMCache's long-document QA).
* **Admission** (FCFS, vLLM-style): the head of the queue is looked up in
  every tier and admitted if the GPU can hold its whole context (prompt plus
  output: blocks are reserved for its lifetime, so no preemption is needed);
  otherwise the queue waits.  A request larger than the GPU cache is
  rejected.  With ``preempt`` (vLLM v1's scheduler) a request reserves only
  its prompt's blocks and takes one more each time its decodes fill one;
  when none is free the newest running request is preempted (vLLM v1's
  only mode, RECOMPUTE: its blocks are freed, it goes back to the head of
  the queue and prefills its prompt again, hitting whatever the GPU prefix
  cache or the offload tiers still hold of it; the recompute of its
  generated tokens is not charged).
* **Loading.**  ``async_load: off``: the hits are loaded by the forward pass
  of the request's first iteration, which waits for them (all of them, or
  layer by layer with layer-wise pipelining: layer l computes as soon as
  layer l's KV is in).  ``schedule``: loads start at admission, the request
  is parked until they end (vLLM's WAITING_FOR_REMOTE_KVS).  ``arrival``
  (LMCache's AsyncKV): SSD hits are read into host memory when the request
  arrives, overlapping its queueing, and the request is parked until they
  are in; the copies to the GPU stay in its forward pass, layer by layer with
  layer-wise pipelining (:mod:`sim.serving.asyncload`; with GPUDirect the
  whole load is done at arrival); a
  prefetch never takes GPU blocks that the requests queued ahead of it will
  need, so it cannot block them.
* **Decisions and time.**  The block manager decides (lookups, loads,
  stores, evictions, demotions: plain data, no clock); the engine, the
  :class:`sim.serving.stores.Offloader` and the
  :class:`sim.serving.transfers.Mover` own time and turn those decisions
  into ops, telling the manager when each transfer ends.
* **Iteration.**  Decodes first (one token each), then prefill chunks within
  ``max_batched_tokens`` (0 = whole prompts, no chunking).  One compute op
  of roofline time (:mod:`sim.serving.costs`); with layer-wise loads one op
  per layer.  The iteration that finishes a prompt emits its first token.
  A SwiftCache master's iterations that reach past its regular cache run
  QKV / attention / FFN ops per layer around the layer stream cache's loads
  and stores (:mod:`sim.serving.streaming`, the ``stream`` hook).

The engine's parts: loads before the forward pass
(:mod:`sim.serving.engine_loading`), the forward pass
(:mod:`sim.serving.engine_forward`) and vLLM v1's incremental allocation and
preemption (:mod:`sim.serving.engine_preempt`), mixed into :class:`Engine`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from itertools import groupby

import simpy

from sim.engine.drain import drain
from sim.hw.machine import Machine
from sim.models import ModelCard
from sim.serving.blocks import GpuCache, OffloadTier
from sim.serving.designs import DesignParams
from sim.serving.engine_config import EngineConfig  # noqa: F401 (re-exported)
from sim.serving.engine_forward import ForwardMixin
from sim.serving.engine_loading import LoadingMixin
from sim.serving.engine_preempt import PreemptMixin
from sim.serving.gcpolicy import relaxed_gc
from sim.serving.jobs import Piece
from sim.serving.manager import BlockManager, Seq
from sim.serving.metrics import RequestLog, ServingRecords, Timeline, request_records
from sim.serving.online import OnlineOps
from sim.serving.requests import Request
from sim.serving.stores import Offloader
from sim.serving.streaming import LayerStream
from sim.serving.tp import TensorParallel
from sim.serving.transfers import Mover

Progress = Callable[[float, int, int], None]  # (simulated s, requests done, requests)
PROGRESS_STEPS = 20_000  # simulation events between two progress reports


class Engine(LoadingMixin, ForwardMixin, PreemptMixin):
    """One serving run: requests through a design on a machine."""

    def __init__(
        self,
        machine: Machine,
        card: ModelCard,
        design: DesignParams,
        tiers: list[OffloadTier],
        bounce: dict[str, str],
        cfg: EngineConfig,
        requests: list[Request],
        preload: list[Request] = (),  # type: ignore[assignment]
    ):
        self.env = machine.env
        self.card, self.design, self.cfg = card, design, cfg
        self.B = cfg.block_tokens
        self.ops = OnlineOps(machine, cfg.keep_plan)
        layer_bytes = design.offload_factor(self.B) * self.B * card.kv_bytes_per_token_layer
        mover = Mover(self.ops, design, machine.profile, layer_bytes, bounce, cfg.gpu)
        self._ssds = frozenset(machine.profile.ssd_names)
        self._bounce, self._gds = bounce, mover.gds
        self._forward: dict[Seq, list[Piece]] = {}  # AsyncKV: host -> GPU leg, per request
        gpu = GpuCache(cfg.gpu_blocks, cfg.prefix_cache)
        self.mgr = BlockManager(gpu, tiers, design, self.B, cfg.gpu)
        self.offload = Offloader(self.mgr, mover, self._released)
        for r in preload:
            self.mgr.preload(r)
        self.seqs = [
            Seq(r, math.ceil((r.input_tokens + r.output_tokens) / self.B)) for r in requests
        ]
        self.finished = {s: self.env.event() for s in self.seqs}
        self.row = {s: i for i, s in enumerate(self.seqs)}  # the request's row in the log
        self.log = RequestLog(len(self.seqs))
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.parked: list[Seq] = []
        self.remaining = len(self.seqs)
        self.inflight = simpy.Resource(self.env, cfg.max_inflight) if cfg.max_inflight else None
        self._slots: dict[int, simpy.Request] = {}
        self._wake = self.env.event()
        self.prev_compute: int | None = None
        self.tp: TensorParallel | None = None  # rank 0 of tensor parallelism (build_engine)
        # a SwiftCache master's layer stream cache: iterations reaching past its regular
        # cache stream borrowed KV layer by layer (sim.serving.streaming, multi.build_instances)
        self.stream: LayerStream | None = None
        self.iterations = 0
        self.timeline = Timeline()
        self._row: tuple[int, ...] = ()  # the timeline's last row of counts
        # called with each request as it is released, before the fit check (a lending
        # worker's ScaleUp, sim.serving.lending)
        self.on_release: list[Callable[[Seq], None]] = []

    # ---- lifecycle ------------------------------------------------------------------
    def run(self, progress: Progress | None = None) -> ServingRecords:
        """Serve every request; ``progress(now_s, done, total)`` is called every
        :data:`PROGRESS_STEPS` simulation events (the events are the same with
        or without it: it only watches).  Alone on its machine: several engines
        sharing one start (:meth:`start`), run the environment once, then
        :meth:`collect` (:mod:`sim.serving.multi`)."""
        self.start()
        with relaxed_gc():
            if progress is None:
                drain(self.env)
            else:
                self._run_watched(progress)
        return self.collect()

    def start(self) -> None:
        """Register the client processes (one per session) and the iteration loop
        on the machine's environment; nothing runs until the environment does."""
        by_session = sorted(self.seqs, key=lambda s: (_session_key(s.req), s.req.turn))
        for _, group in groupby(by_session, key=lambda s: _session_key(s.req)):
            self.env.process(self._client(list(group)))
        self.env.process(self._loop())

    def collect(self) -> ServingRecords:
        """The run's records, once the environment has run out of events."""
        if self.remaining:  # pragma: no cover - a scheduling bug
            raise RuntimeError(f"serving engine stalled with {self.remaining} requests left")
        return self._records()

    def _run_watched(self, progress: Progress) -> None:
        """``env.run()`` (steps until no event is left), reporting as it goes."""
        total = len(self.seqs)
        drain(
            self.env,
            PROGRESS_STEPS,
            lambda: progress(self.env.now, total - self.remaining, total),
        )

    def _released(self) -> None:
        """A store let go of GPU blocks: a waiting request may fit now."""
        if self.waiting:
            self._kick()

    def _kick(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _client(self, seqs: list[Seq]):
        prev = None
        for s in seqs:
            wait = s.req.arrival_s - self.env.now
            if wait > 0:
                yield self.env.timeout(wait)
            if prev is not None:
                yield self.finished[prev]
            if self.inflight is not None:
                slot = self._slots[s.req.rid] = self.inflight.request()
                yield slot
            self._release(s)
            prev = s

    def _release(self, s: Seq) -> None:
        i = self.row[s]
        self.log.release_s[i] = self.env.now
        for hook in self.on_release:
            hook(s)
        if s.total_blocks > self.mgr.gpu.capacity:
            self.log.rejected[i] = True
            self._finish(s)
            return
        self.waiting.append(s)
        if self.design.async_load == "arrival":
            self._prefetch(s)
        self._kick()

    def _finish(self, s: Seq) -> None:
        i = self.row[s]
        self.log.finish_s[i] = self.env.now
        self.log.set_hits(i, s.req.hits)
        if not self.log.rejected[i]:
            if self.cfg.cache_replies != "off":  # KV exists for all but the last token
                kv = s.req.input_tokens + s.generated - 1
                self.offload.store(self.mgr.computed(s, kv, self.cfg.cache_replies == "store"))
            self.mgr.release(s)
            self.running.remove(s)
        if self.inflight is not None:
            self.inflight.release(self._slots.pop(s.req.rid))
        self.remaining -= 1
        self.finished[s].succeed()

    # ---- admission -------------------------------------------------------------------
    def _admit(self) -> None:
        while self.waiting and len(self.running) + len(self.parked) < self.cfg.max_batch:
            s = self.waiting[0]
            if s.blocks or s.private:  # prefetched on arrival
                if not self.mgr.grow(s, self._target(s) - len(s.blocks) - s.private):
                    return
            else:
                hit = self.mgr.lookup(s)
                if not self.mgr.acquire(s, hit, self._target(s) - len(hit.gpu)):
                    return
                if s.lookup is not None and self.design.async_load != "off":
                    self._start_async(s)
            self.waiting.popleft()
            if not s.req.preemptions:  # the first admission; a preempted one is re-admitted
                self.log.admit_s[self.row[s]] = self.env.now
            (self.parked if s.load is not None else self.running).append(s)

    # ---- iterations -----------------------------------------------------------------
    def _loop(self):
        while self.remaining:
            self._admit()
            batch = self._batch()
            self._sample()
            if not batch:
                self._wake = self.env.event()
                yield self._wake
                continue
            yield from self._iterate(batch)
            self._advance(batch)

    def _batch(self) -> list[tuple[Seq, int]]:
        budget = self.cfg.max_batched_tokens or math.inf
        batch = [(s, 1) for s in self.running if s.prefill_left == 0]
        budget -= len(batch)
        for s in self.running:
            left = s.prefill_left
            if left > 0 and budget > 0:
                chunk = int(min(left, budget))
                batch.append((s, chunk))
                budget -= chunk
        return batch

    def _advance(self, batch: list[tuple[Seq, int]]) -> None:
        now = self.env.now
        for s, chunk in batch:
            if s.prefill_left > 0:
                s.prefilled += chunk
                self.log.computed_tokens[self.row[s]] += chunk
                self.offload.store(self.mgr.computed(s))
                if s.prefill_left == 0 and s.generated == 0:  # not a preempted one's recompute
                    self.log.first_token_s[self.row[s]] = now
                    s.generated = 1
            else:
                s.generated += 1
            if s.prefill_left == 0 and s.generated >= s.req.output_tokens:
                self._finish(s)
        if self.cfg.preempt:
            self._grow_or_preempt()

    # ---- results --------------------------------------------------------------------
    def _sample(self) -> None:
        """A timeline row when the counts changed since the last one (the same
        rows :meth:`Timeline.sample` keeps, with one tuple compare per iteration)."""
        row = (len(self.waiting), len(self.parked), len(self.running), self.mgr.gpu.used)
        if row != self._row:
            self._row = row
            self.timeline.sample(self.env.now, *row)

    def _records(self) -> ServingRecords:
        self._sample()
        base = self.ops.records(
            {
                "iterations": self.iterations,
                "gpu_blocks": self.mgr.gpu.capacity,
                "gpu_evictions": self.mgr.gpu.evictions,
                **{f"{t.name}_evictions": t.evictions for t in self.mgr.tiers},
            }
        )
        return ServingRecords(
            ops=base.ops,
            devices=base.devices,
            stats=base.stats,
            plan_store=self.ops.store if self.cfg.keep_plan else None,
            requests=request_records([s.req for s in self.seqs], self.log, base.ops),
            timeline=self.timeline.table(),
            gpus=(self.cfg.gpu,),
        )


def _session_key(r: Request) -> tuple[int, int]:
    """Requests of one known session share a client; the others each have one."""
    return (0, r.session) if r.session >= 0 else (1, r.rid)
