"""The serving engine: iteration-level continuous batching as a simpy process.

Serving is closed loop (when a request is admitted depends on when its
blocks finished loading), so nothing is planned ahead: the engine drives the
machine's flow network op by op through :class:`sim.serving.execute.online.OnlineOps`
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
  is parked until they end (vLLM's WAITING_FOR_REMOTE_KVS; with ``stores:
  step`` the end is seen at the next step boundary, ``finished_recving``).  ``arrival``
  (LMCache's AsyncKV): SSD hits are read into host memory when the request
  arrives, overlapping its queueing, and the request is parked until they
  are in; the copies to the GPU stay in its forward pass, layer by layer with
  layer-wise pipelining (:mod:`sim.serving.policy.asyncload`; with GPUDirect the
  whole load is done at arrival); a
  prefetch never takes GPU blocks that the requests queued ahead of it will
  need, so it cannot block them.
* **Prefilled elsewhere.**  A request accepted with ``remote`` (a GPU: a
  disaggregated decode instance, :mod:`sim.fleet.disagg`) fetches
  its prompt's KV from that GPU at admission, one copy on the machine's
  network, and is parked until it is in (:meth:`Engine._fetch`); one accepted
  with ``hold`` keeps its blocks after it finishes until they have been read
  (:meth:`Engine.release_held`).
* **Step boundaries.**  The top of the iteration loop is vLLM's scheduler step
  boundary: with ``stores: step`` (:mod:`sim.serving.execute.stores`) the
  stores and loads that ended during the step are seen there, each request
  of the step that ended offers its new full blocks to the offload tiers
  after it, and a finished request's blocks are freed once its stores end.
* **Decisions and time.**  The block manager decides (lookups, loads,
  stores, evictions, demotions: plain data, no clock); the engine, the
  :class:`sim.serving.execute.stores.Offloader` and the
  :class:`sim.serving.execute.transfers.Mover` own time and turn those decisions
  into ops, telling the manager when each transfer ends.
* **Iteration.**  Decodes first (one token each), then prefill chunks within
  ``max_batched_tokens`` (0 = whole prompts, no chunking).  One compute op
  of roofline time (:mod:`sim.serving.policy.costs`), or with ``gpu_time:
  measured`` of the time measured kernel tables give the batch
  (:mod:`sim.hw.measured`, the op's ``gpu_s``); with layer-wise loads one op
  per layer (a measured time split evenly over the layers).  The iteration
  that finishes a prompt emits its first token.
  A SwiftCache master's iterations that reach past its regular cache run
  QKV / attention / FFN ops per layer around the layer stream cache's loads
  and stores (:mod:`sim.serving.execute.streaming`, the ``stream`` hook).

Per-object retrieval work (:mod:`sim.serving.policy.objcost`) is CPU time after
the bytes of a load.  :class:`Engine` holds, in this order: the client,
admission and the iteration loop; the loads that start before the forward
pass; the forward pass; vLLM v1's incremental allocation and preemption.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from itertools import groupby

import simpy

from sim.engine.drain import drain
from sim.hw.machine import Machine
from sim.hw.measured import resolve
from sim.models import LayerCost, ModelCard
from sim.serving.designs import DesignParams
from sim.serving.execute.engine_config import EngineConfig  # noqa: F401 (re-exported)
from sim.serving.execute.gcpolicy import relaxed_gc
from sim.serving.execute.online import OnlineOps
from sim.serving.execute.stores import Offloader
from sim.serving.execute.streaming import LayerStream
from sim.serving.execute.tp import TensorParallel
from sim.serving.execute.transfers import Job, Mover
from sim.serving.metrics import RequestLog, ServingRecords, Timeline, request_records
from sim.serving.policy.asyncload import split_prefetch
from sim.serving.policy.costs import IterationCost
from sim.serving.policy.jobs import Piece, Transfer
from sim.serving.policy.manager import BlockManager, Seq
from sim.serving.policy.objcost import retrieval_cpu_s
from sim.serving.requests import Request, check_one_space
from sim.serving.tiers.blocks import GpuCache, OffloadTier

Progress = Callable[[float, int, int], None]  # (simulated s, requests done, requests)
PROGRESS_STEPS = 20_000  # simulation events between two progress reports


class Engine:
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
        tp: TensorParallel | None = None,
    ):
        self.env = machine.env
        self.card, self.design, self.cfg = card, design, cfg
        self.costs = IterationCost(card)  # each iteration's FLOPs and HBM bytes
        self.B = cfg.block_tokens
        self.ops = OnlineOps(machine, cfg.keep_plan)
        # measured iteration times (None: the roofline) and what times them (run.json);
        # with tensor parallelism one rank's of the whole model (sim.hw.measured)
        self.step_time, self.gpu_time_source = resolve(
            machine.profile, tp.card if tp else card, cfg.gpu_time, tp.tp if tp else 1
        )
        # rank 0 of tensor parallelism (``card``: the rank's share), its all-reduces
        # timed by the same source as the step
        self.tp = tp.timed_by(self.step_time) if tp else None
        layer_bytes = design.offload_factor(self.B) * self.B * card.kv_bytes_per_token_layer
        mover = Mover(self.ops, design, machine.profile, layer_bytes, bounce, cfg.gpu)
        self._ssds = frozenset(machine.profile.ssd_names)
        self._bounce, self._gds = bounce, mover.gds
        self._forward: dict[Seq, list[Piece]] = {}  # AsyncKV: host -> GPU leg, per request
        self._loaded: list[Seq] = []  # stores step: loads ended, seen at the next boundary
        check_one_space([*requests, *preload])  # block keys: ids of one space
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
        # a SwiftCache master's layer stream cache: iterations reaching past its regular
        # cache stream borrowed KV layer by layer (sim.serving.execute.streaming,
        # multi.build_instances)
        self.stream: LayerStream | None = None
        self.iterations = 0
        self.timeline = Timeline()
        self._row: tuple[int, ...] = ()  # the timeline's last row of counts
        # called with each request as it is released, before the fit check (a lending
        # worker's ScaleUp, sim.serving.execute.lending)
        self.on_release: list[Callable[[Seq], None]] = []
        # called with each request as it finishes or is rejected (a router's bookkeeping,
        # sim.fleet.routed)
        self.on_finish: list[Callable[[Seq], None]] = []
        # called with each request as its first token is out (here, or a disaggregated
        # decode's fetch landing), for the same bookkeeping
        self.on_first: list[Callable[[Seq], None]] = []
        # disaggregation (sim.fleet.disagg): prefilled requests whose blocks are
        # kept at their finish until a decode instance has read them (vLLM NixlConnector's
        # delay_free_blocks), by request id, and the hooks told when a fetch here lands
        self.holding: set[int] = set()
        self.held: dict[int, Seq] = {}
        self.on_fetched: list[Callable[[Seq], None]] = []

    # ---- lifecycle ------------------------------------------------------------------
    def run(self, progress: Progress | None = None) -> ServingRecords:
        """Serve every request; ``progress(now_s, done, total)`` is called every
        :data:`PROGRESS_STEPS` simulation events (the events are the same with
        or without it: it only watches).  Alone on its machine: several engines
        sharing one start (:meth:`start`), run the environment once, then
        :meth:`collect` (:mod:`sim.serving.execute.multi`)."""
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

    # ---- requests a router hands over (sim.fleet.routed) --------------------
    def hold_open(self) -> None:
        """Keep the iteration loop alive while a router may still send requests."""
        self.remaining += 1

    def close(self) -> None:
        """The router has sent its last request (undoes :meth:`hold_open`)."""
        self.remaining -= 1
        self._kick()

    def accept(self, req: Request, remote: str | None = None, hold: bool = False) -> Seq:
        """Release ``req`` now: a request routed here on arrival, not in the list
        the engine was built with (its log must have a row free for it).  With
        ``remote`` (a GPU) its prompt was prefilled there: at admission the
        prompt's KV that no tier here holds is fetched from it (:meth:`_fetch`).
        With ``hold`` its blocks stay taken after it finishes, until
        :meth:`release_held` (a decode instance has read them)."""
        s = Seq(req, math.ceil((req.input_tokens + req.output_tokens) / self.B))
        s.remote = remote
        if hold:
            self.holding.add(req.rid)
        self.row[s] = len(self.seqs)
        self.seqs.append(s)
        self.finished[s] = self.env.event()
        self.remaining += 1
        self._release(s)
        return s

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
                self.offload.after_step(s, kv, self.cfg.cache_replies == "store")
            if s.req.rid in self.holding:  # read later by a decode instance
                self.held[s.req.rid] = s
            elif self.offload.step:  # vLLM's delay_free_blocks (sim.serving.execute.stores)
                self.offload.release_after(s.req.rid, lambda: self.mgr.release(s))
            else:
                self.mgr.release(s)
            self.running.remove(s)
        self.holding.discard(s.req.rid)
        if self.inflight is not None:
            self.inflight.release(self._slots.pop(s.req.rid))
        self.remaining -= 1
        for hook in self.on_finish:
            hook(s)
        self.finished[s].succeed()

    def release_held(self, rid: int) -> None:
        """Free the blocks of held request ``rid`` (:meth:`accept`'s ``hold``): its
        KV has been read; a waiting request may fit now."""
        self.mgr.release(self.held.pop(rid))
        self._released()

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
                if s.remote is not None:
                    self._fetch(s)
                elif s.lookup is not None and self.design.async_load != "off":
                    self._start_async(s)
            self.waiting.popleft()
            if not s.req.preemptions:  # the first admission; a preempted one is re-admitted
                self.log.admit_s[self.row[s]] = self.env.now
            parked = s.load is not None or s.remote is not None
            (self.parked if parked else self.running).append(s)

    # ---- iterations -----------------------------------------------------------------
    def _loop(self):
        offload = self.offload
        while self.remaining:
            if offload.step:  # step-synchronous stores: a boundary to see them at
                self._boundary()
            if self.waiting:
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
        running = self.running
        batch = [(s, 1) for s in running if s.prefill_left == 0]
        if len(batch) == len(running):  # every running request decodes
            return batch
        budget = (self.cfg.max_batched_tokens or math.inf) - len(batch)
        for s in running:
            left = s.prefill_left
            if left > 0 and budget > 0:
                chunk = int(min(left, budget))
                batch.append((s, chunk))
                budget -= chunk
        return batch

    def _boundary(self) -> None:
        """A scheduler step boundary (stores ``step``, vLLM's offloading
        connector): the stores and loads that ended since the last one are
        seen now (:meth:`Offloader.boundary`; a loaded request joins the
        running ones, vLLM's ``finished_recving``)."""
        if not self.offload.step:
            return
        self.offload.boundary()
        if self._loaded:
            loaded, self._loaded = self._loaded, []
            for s in loaded:
                self._joined(s)

    def _advance(self, batch: list[tuple[Seq, int]]) -> None:
        step = self.offload.step
        for s, chunk in batch:
            if s.prefill_left > 0:
                s.prefilled += chunk
                self.log.computed_tokens[self.row[s]] += chunk
                self.offload.after_step(s)
                if s.prefill_left == 0 and s.generated == 0:  # not a preempted one's recompute
                    self.log.first_token_s[self.row[s]] = self.env.now
                    s.generated = 1
                    for hook in self.on_first:
                        hook(s)
            else:
                if step and s.unstored:  # a store not prepared is tried again
                    self.offload.after_step(s)
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
                "gpu_time": self.gpu_time_source,
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

    # ---- loads before the forward pass ------------------------------------------------
    # async_load schedule (vLLM's WAITING_FOR_REMOTE_KVS) and arrival (LMCache's
    # AsyncKV, sim.serving.policy.asyncload); a prefetch never takes GPU blocks that
    # the requests queued ahead of it will need

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

    def _object_work(self, core_s: float) -> simpy.Event:
        """The objects' CPU work (``core_s`` on one thread) on the host's cores, on
        the design's ``object_threads``: it shares them with the I/O paths' CPU
        flows (none: a zero wait, as before a load's compute)."""
        if core_s <= 0:
            return self.env.timeout(0)
        return self.ops.cpu_work(core_s, self.design.object_threads)

    def _start_async(self, s: Seq) -> None:
        assert s.lookup is not None
        transfer = self.mgr.load(s, self.design.layerwise)
        if self.design.async_load == "arrival" and not self._gds:
            self._prefetch_to_host(s, transfer)
            return
        cpu = sum(self._object_cpu([s.lookup.lower]))  # the loader's per-object work
        job = self.offload.load(transfer)

        def landed(_e) -> None:
            if self.offload.step:  # seen at the next step boundary (_boundary)
                self._loaded.append(s)
            else:
                self._joined(s)
            self._kick()

        if cpu:  # the objects' CPU work after the bytes, before the request joins
            job.done.callbacks.append(lambda _e: self._object_work(cpu).callbacks.append(landed))
        else:
            job.done.callbacks.append(landed)

    def _fetch(self, s: Seq) -> None:
        """Disaggregated decode (:mod:`sim.fleet.disagg`): the prompt's
        KV beyond what this instance's GPU prefix cache holds (the scenario
        refuses designs with offload tiers), whole blocks, is copied from
        the prefill GPU ``s.remote`` as one transfer (vLLM's NixlConnector reads
        the blocks after the prefill ends; Dynamo: NIXL, VRAM to VRAM), issued
        at admission, when the blocks it lands in are allocated; the request is
        parked until it ends (WAITING_FOR_REMOTE_KVS), then joins the running
        ones with its prompt done and the prefill's token counted
        (``generated`` 1), and the prompt's blocks are hashed here."""
        assert s.remote is not None
        blocks = math.ceil(s.req.input_tokens / self.B) - s.cached_tokens // self.B
        nbytes = blocks * self.B * self.card.kv_bytes_per_token_layer * self.card.layers
        src = s.remote  # kept until the KV is in: the request stays parked

        def landed(_op: int) -> None:
            s.remote = None
            s.prefilled = s.req.input_tokens - s.cached_tokens
            s.generated = 1
            self.log.first_token_s[self.row[s]] = self.env.now  # the decode side's start
            for hook in self.on_first:
                hook(s)
            self.offload.after_step(s)
            if s in self.parked:
                self.parked.remove(s)
                self.running.append(s)
            for hook in self.on_fetched:
                hook(s)
            self._kick()

        self.ops.issue("copy", src, self.cfg.gpu, int(nbytes), blocks, [], landed,
                       step=s.req.rid, tag="kv_transfer")  # fmt: skip

    def _joined(self, s: Seq) -> None:
        """``s``'s load is done: its blocks ready, it joins the running requests."""
        self.mgr.on_loaded(s)
        if s in self.parked:
            self.parked.remove(s)
            self.running.append(s)

    def _prefetch_to_host(self, s: Seq, transfer: Transfer) -> None:
        """AsyncKV (:mod:`sim.serving.policy.asyncload`): SSD hits are read into host
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

    # ---- the forward pass: its loads, compute ops and all-reduces ---------------------

    def _iterate(self, batch: list[tuple[Seq, int]]):
        # one walk of the batch: prefill chunks (tokens, context before them: the prompt
        # less what is left of it), decodes (context before the new token), the
        # sequences emitting a token (each decode, each prefill's last chunk), tokens
        prefills: list[tuple[int, int]] = []
        decodes: list[int] = []
        loading: list[Seq] = []  # requests whose hits this forward pass loads
        outputs = n_tok = 0
        for s, c in batch:
            left = s.prefill_left
            if left > 0:
                prefills.append((c, s.req.input_tokens - left))
                n_tok += c
                if left == c:
                    outputs += 1
            else:
                decodes.append(s.req.input_tokens + s.generated - 1)
            if s.lookup is not None:
                loading.append(s)
        outputs += len(decodes)
        n_tok += len(decodes)
        n_layers = self.card.layers
        # one layer's FLOPs and HBM bytes, and the output head's
        lf, lb, hf, hb = self.costs.work(prefills, decodes, outputs)
        flops, hbm = lf * n_layers + hf, lb * n_layers + hb  # the whole forward pass
        gpu_s = 0.0  # 0: the roofline of the op's FLOPs and bytes
        if self.step_time is not None:
            gpu_s = self.step_time.seconds(prefills, decodes, flops, hbm)
        jobs: list[Job] = [self.offload.load(self._load(s)) for s in loading] if loading else []
        deps = [self.prev_compute] if self.prev_compute is not None else []
        step, gpu = self.iterations, self.cfg.gpu
        # the loads' per-object retrieval work (objcost), per layer; read only with loads
        cpu = (
            self._object_cpu([s.lookup.lower for s in loading if s.lookup is not None])
            if loading
            else []
        )
        stream = self.stream.io(prefills, decodes) if self.stream is not None else None
        if stream and self.stream is not None:  # a master's LSC (sim.serving.execute.streaming)
            if jobs:
                yield self.env.all_of([j.done for j in jobs])
                yield self._object_work(sum(cpu))
                deps += [op for j in jobs for op in j.ops()]
            head = LayerCost(hf, hb)
            op = yield from self.stream.iterate(stream, prefills, decodes, head, deps)
        elif not (jobs and self.design.layerwise):
            if jobs:
                yield self.env.all_of([j.done for j in jobs])
                yield self._object_work(sum(cpu))  # per-object retrieval work (objcost)
                deps += [op for j in jobs for op in j.ops()]
            op, ev = self.ops.compute(gpu, flops, hbm, deps, step, -1, "iteration", gpu_s)
            yield ev
            if self.tp is not None:
                op, ev = self.tp.allreduce(self.ops, op, n_tok, n_layers, step, -1)
                yield ev
        else:
            layer, head = LayerCost(lf, lb), LayerCost(hf, hb)
            for li in range(n_layers):
                ready = [j.layer_done[li] for j in jobs if li in j.layer_done]
                if ready:
                    yield self.env.all_of(ready)
                if cpu[li]:
                    yield self._object_work(cpu[li])
                cost = layer + head if li == n_layers - 1 else layer
                deps += [o for j in jobs for o in j.ops(li)]
                op, ev = self.ops.compute(
                    gpu, cost.flops, cost.hbm_bytes, deps, step, li, "iteration", gpu_s / n_layers
                )
                yield ev
                if self.tp is not None:
                    op, ev = self.tp.allreduce(self.ops, op, n_tok, 1, step, li)
                    yield ev
                deps = [op]
        for s in loading:
            self.mgr.on_loaded(s)
        self.prev_compute = op
        self.iterations += 1

    # ---- vLLM v1's incremental allocation and RECOMPUTE preemption --------------------
    # (vllm/v1/core/sched/scheduler.py, Scheduler.schedule: self.running.pop())

    def _target(self, s: Seq) -> int:
        """GPU blocks ``s`` takes at admission: its whole context, or with
        ``preempt`` its prompt and any tokens it generated before a preemption
        (vLLM v1 allocates as tokens arrive and recomputes them all)."""
        if not self.cfg.preempt:
            return s.total_blocks
        return math.ceil((s.req.input_tokens + s.generated) / self.B)  # + tokens it had made

    def _grow_or_preempt(self) -> None:
        """Give each running request (oldest first) the block its next token
        needs; when none is free, preempt the newest running request until it
        is (vLLM v1 ``Scheduler.schedule``: ``self.running.pop()``)."""
        B, running, grow = self.B, self.running, self.mgr.grow
        i = 0
        while i < len(running):  # preemption only shortens the tail: index i stays put
            s = running[i]
            i += 1
            if s.prefill_left > 0:
                continue
            held = len(s.blocks) + s.private
            more = -(-(s.req.input_tokens + s.generated) // B) - held  # after next decode
            while more > 0 and not grow(s, more):
                victim = running[-1]
                self._preempt(victim)
                if victim is s:
                    break

    def _preempt(self, s: Seq) -> None:
        """RECOMPUTE preemption: free ``s``'s blocks, requeue it at the head."""
        self.mgr.release(s)
        if self.running[-1] is s:  # the newest: always, from _grow_or_preempt
            self.running.pop()
        else:
            self.running.remove(s)
        s.cached_tokens = s.prefilled = s.stored_groups = 0
        s.unstored = False
        s.lookup = s.load = None
        self._forward.pop(s, None)
        s.req.preemptions += 1
        self.waiting.appendleft(s)


def _session_key(r: Request) -> tuple[int, int]:
    """Requests of one known session share a client; the others each have one."""
    return (0, r.session) if r.session >= 0 else (1, r.rid)
