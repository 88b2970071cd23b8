"""A worker lending KV memory to the master at run time (seed 002 §3.4-3.5).

The clockless policies (:mod:`sim.serving.swift`) decide; this module owns
time.  One :class:`Lending` per worker engine:

* **ScaleUp on demand.**  Every request the worker releases goes through
  :meth:`~sim.serving.swift.coordinator.WorkerCoordinator.on_request`
  (Algorithm 1, lines 10-19) before the worker checks that it fits, so a
  request longer than the worker's current cache reclaims units first.
* **N_i.**  Algorithm 1 compares a request's blocks with "N_i: Current #KV
  blocks for i-th worker".  ``n_i: own`` (default) reads it as written: the
  worker's whole cache, so ScaleDown keeps only the longest single request
  of the window and concurrent requests queue behind each other.  ``n_i:
  free`` reads it as the blocks not yet committed (free and evictable, less
  what queued requests need): ScaleUp then reclaims whenever the worker's
  concurrent demand outgrows its cache, and ScaleDown keeps the blocks in use
  plus one longest request.  ``n_i: idle`` counts only *idle* blocks, as
  the seed words it ("When a worker is lightly loaded, it donates idle cache
  blocks to the master", §3.1; "its idle cache blocks can be borrowed by the
  master", §3.5): N_i is the blocks holding no KV (not the worker's own
  prefix cache of finished requests) less what queued requests need, in
  ScaleDown and ScaleUp alike, so lending never evicts the worker's cached
  conversations and a request that does not fit in idle blocks reclaims
  rather than evicting them.
* **ScaleDown, periodic.**  A simpy process calls ``scale_down`` every
  ``check_interval_s`` while any engine of the run has requests left.
* **The master's block table.**  Each resize is a Lend or Reclaim message;
  it reaches the master's :class:`~sim.serving.swift.coordinator.MasterBlockTable`
  ``control_latency_s`` later, and the master's ``peer`` tier capacity on
  that worker's GPU follows the table: ``slots x master block bytes``.
  Blocks in revoked slots are lost (dropped from the master's index, LRU
  first), not migrated.
* **Layout.**  ``block-major``: a resize moves nothing.  ``layer-major``:
  :func:`~sim.serving.swift.elastic.resize_copies`' copies run as HBM
  kernels on the worker's GPU, one after another (``hbm_bytes = 2 x
  nbytes``, tag ``kv_resize``), sharing its compute flow with the worker's
  own kernels.  Memory changes hands when they end: a reclaim's blocks
  count in the worker's cache at once (so the request that caused it is not
  rejected) but stay reserved until the copies end; the master's slots
  appear only after a lend's copies.
* **The worker's cache.**  Lending shrinks its GPU cache at once: unused
  prefix-cache blocks are evicted (LRU) to make room; when the blocks in use
  leave too little, the lend is called off (the units stay with the worker).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.serving.execute.engine import Engine
from sim.serving.swift.coordinator import MasterBlockTable, Message, Reclaim, WorkerCoordinator
from sim.serving.swift.elastic import ElasticCache, ElasticParams, resize_copies
from sim.serving.swift.meu import block_bytes, model_elastic_unit
from sim.serving.tiers.blocks import OffloadTier


@dataclass(frozen=True)
class ElasticSpec:
    """A worker's elastic cache settings (scenario key ``elastic``)."""

    layout: str = "block-major"  # block-major | layer-major
    window_s: float = 60.0  # ScaleDown's look-back ("e.g., 1 minute", §3.5)
    check_interval_s: float = 10.0  # ScaleDown period (the paper: "periodically")
    control_latency_s: float = 0.0  # worker -> master message delay (ZeroMQ in the seed)
    # Algorithm 1's N_i ("current #KV blocks for i-th worker"): "own" = the worker's whole
    # cache, as written; "free" = its blocks not committed to running or queued requests;
    # "idle" = its blocks holding no KV (not its prefix cache) and not committed
    n_i: str = "own"


class Lending:
    """One worker's elastic cache driven by the simulation clock (module docstring)."""

    def __init__(
        self,
        worker: Engine,
        master: Engine,
        tier: OffloadTier,
        table: MasterBlockTable,
        spec: ElasticSpec,
        lent_blocks: int,
        engines: list[Engine],
    ):
        self.worker, self.master, self.tier, self.table = worker, master, tier, table
        self.spec, self.engines = spec, engines
        self.gpu = worker.cfg.gpu
        self.dev = tier.devices.index(self.gpu)
        wb, mb = worker.cfg.block_tokens, master.cfg.block_tokens
        unit = model_elastic_unit(master.card, worker.card, mb, wb)
        total = worker.mgr.gpu.capacity + lent_blocks
        self.cache = ElasticCache(ElasticParams(total, wb, unit.meu_worker, unit.meu_master,
                                                spec.window_s, spec.check_interval_s))  # fmt: skip
        self.cache.lent_units = lent_blocks // unit.meu_worker
        worker.mgr.gpu.capacity = self.cache.own_blocks  # the MEU-rounded split
        self.master_block_bytes = block_bytes(master.card, mb)
        self.worker_layer_block = wb * worker.card.kv_bytes_per_token_layer
        self.coord = WorkerCoordinator(self.gpu, self.cache)
        table.register(self.gpu, total * block_bytes(worker.card, wb), self.master_block_bytes)
        table.apply(self.coord.initial(0.0))
        tier.capacity[self.dev] = table.slots(self.gpu) * self.master_block_bytes  # whole bytes
        self.region = None  # the master's PeerRegion when its LSC streams from this region
        self.copied_bytes = 0
        self.resizes: list[tuple[float, int, int]] = []  # (s, worker blocks +/-, copied bytes)
        worker.on_release.append(self._on_release)

    def start(self) -> None:
        self.worker.env.process(self._periodic())

    # ---- Algorithm 1 driven by the clock ------------------------------------------------
    def _n_i(self) -> int | None:
        """Algorithm 1's ``N_i`` (``ElasticSpec.n_i``): None = the worker's whole
        cache; ``free``: free and evictable blocks less what queued requests need;
        ``idle``: the blocks holding no KV (not its prefix cache) less the same."""
        if self.spec.n_i == "own":
            return None
        w, gpu = self.worker, self.worker.mgr.gpu
        queued = sum(w._target(q) - len(q.blocks) - q.private for q in w.waiting)
        cached = 0 if self.spec.n_i == "idle" else len(gpu.evictable)
        return max(gpu.free + cached - queued, 0)

    def _on_release(self, s) -> None:
        before = self.cache.own_blocks
        need = s.req.input_tokens + s.req.output_tokens
        msgs = self.coord.on_request(self.worker.env.now, need, self._n_i())
        if msgs:
            self._resize(before, msgs)

    def _periodic(self):
        env = self.worker.env
        while any(e.remaining for e in self.engines):
            yield env.timeout(self.spec.check_interval_s)
            before = self.cache.own_blocks
            msgs = self.coord.scale_down(env.now, self._n_i())
            if not msgs:
                continue
            gpu, give = self.worker.mgr.gpu, before - self.cache.own_blocks
            if not gpu.allocate(give):  # blocks in use: call the lend off
                self.coord.withdraw(msgs[-1])
                continue
            gpu.private -= give
            gpu.capacity -= give
            self._resize(before, msgs)

    def _resize(self, before: int, msgs: list[Message]) -> None:
        after = self.cache.own_blocks
        copies = resize_copies(self.spec.layout, self.worker.card.layers, before, after,
                               self.worker_layer_block)  # fmt: skip
        moved = sum(c.nbytes for c in copies)
        self.copied_bytes += moved
        self.resizes.append((self.worker.env.now, after - before, moved))
        grow = max(after - before, 0)
        self.worker.mgr.gpu.capacity += grow  # reclaimed blocks count at once,
        held = grow if copies else 0  # held until the copies end (none: free now)
        self.worker.mgr.gpu.private += held
        self.worker.env.process(self._carry_out(copies, held, msgs))

    def _carry_out(self, copies, grow: int, msgs: list[Message]):
        env = self.worker.env
        for c in copies:
            _, ended = self.worker.ops.submit("compute", "", self.gpu, hbm_bytes=2.0 * c.nbytes,
                                              layer=c.layer, tag="kv_resize")  # fmt: skip
            yield ended
        if grow:
            self.worker.mgr.gpu.private -= grow
            self.worker._kick()
        if self.spec.control_latency_s > 0:
            yield env.timeout(self.spec.control_latency_s)
        for m in msgs:
            self.table.apply(m)
        self._sync_tier(any(isinstance(m, Reclaim) for m in msgs))
        self.master._kick()

    def _sync_tier(self, shrink: bool) -> None:
        cap = self.table.slots(self.gpu) * self.master_block_bytes  # whole bytes
        if self.region is not None:  # the stream's share of the region stays out of the tier
            self.region.set_lent(self.gpu, cap)
            return
        self.tier.capacity[self.dev] = cap
        if shrink and self.tier.used[self.dev] > cap:
            need = [0] * len(self.tier.devices)
            self.tier.make_room(need, None)  # drops LRU blocks: reclaimed memory is lost
