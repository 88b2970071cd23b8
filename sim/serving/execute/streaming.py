"""The SwiftCache master's layer stream cache on the clock (seed 002 §3.3).

A master engine with a :class:`LayerStream` admits on ``N_RC + N_LSC``
blocks (its :class:`~sim.serving.tiers.blocks.GpuCache` capacity, set by
:func:`sim.serving.execute.multi.build_instances`).  In every iteration, prefill and
decode alike, whose batch reaches past the regular cache
(:func:`sim.serving.swift.stream.stream_io`), the engine hands the iteration
to :meth:`LayerStream.iterate`, which issues per layer ``l``:

* ``qkv_l`` (compute) after ``ffn_{l-1}``;
* ``store_l``: the new KV beyond the regular cache, one copy master ->
  worker per worker, as soon as ``qkv_l`` has ended ("asynchronously
  transferred to the worker GPU without blocking subsequent computation");
* ``attn_l`` (compute) once ``qkv_l`` and ``load_l`` have ended;
* ``ffn_l`` (compute, with the output head on the last layer) after
  ``attn_l``;
* ``load_{l+1}``: one copy worker -> master per worker, once ``attn_l`` and
  ``store_l`` have ended (the slots must not be overwritten before the
  attention read them and the store sent them back), so it overlaps
  ``ffn_l``.  ``load_0`` starts with the iteration ("immediately after the
  scheduling phase").

Each layer's bytes split over the workers by the peer tier's ratios (the
bandwidth of each worker's path to the master), and every copy is charged to
both GPUs' HBM through the mover's ``on_copy`` hook like any peer copy.  The
iteration's prefix-cache loads (hits in lower tiers) are waited for before
its first layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from sim.models import LayerCost, ModelCard
from sim.serving.swift.stream import StreamIO, split_layer, stream_io


class PeerRegion:
    """One elastic region per worker (seed 002 §3.1, §3.4): the blocks a worker
    lends hold the master's prefix cache (the ``peer`` tier) *and* the KV its
    layer stream cache streams, so the peer tier's capacity on each worker is
    what the worker lends (``lent``, set by its Algorithm 1) less the bytes the
    running batch streams from it (``streamed``, set every iteration).  When the
    stream grows, the tier drops its LRU blocks that no longer fit, as a
    reclaim does (:meth:`sim.serving.execute.lending.Lending._sync_tier`)."""

    def __init__(self, tier):
        self.tier = tier
        self.lent = list(tier.capacity)
        self.streamed = [0] * len(tier.devices)

    def set_lent(self, gpu: str, nbytes: int) -> None:
        i = self.tier.devices.index(gpu)
        self.lent[i] = nbytes
        self._apply(i)

    def set_streamed(self, by_gpu: dict[str, int]) -> None:
        for i, gpu in enumerate(self.tier.devices):
            n = by_gpu.get(gpu, 0)
            if n != self.streamed[i]:
                self.streamed[i] = n
                self._apply(i)

    def _apply(self, i: int) -> None:
        cap = max(self.lent[i] - self.streamed[i], 0)
        shrink = cap < self.tier.capacity[i]
        self.tier.capacity[i] = cap
        if shrink and self.tier.used[i] > cap:
            self.tier.make_room([0] * len(self.tier.devices), None)  # LRU blocks dropped


class LayerStream:
    """Streams the master's borrowed KV layer by layer (module docstring).

    Attributes:
        n_rc: regular-cache blocks (full layers, local).
        n_lsc: blocks streamed through the LSC (kept whole on the workers).
        workers: the worker GPUs holding the streamed blocks.
        ratios: each worker's share of a layer's bytes (sums to 1).
        loaded, stored: bytes moved so far, for the run's stats.
        region: the workers' one elastic region (:class:`PeerRegion`), when the
            streamed blocks live in the blocks lent to the peer tier; None
            when they have an area of their own (``stream_bytes``).
    """

    def __init__(
        self, engine, n_rc: int, n_lsc: int, workers: Sequence[str], ratios: Sequence[float]
    ):
        self.e = engine
        self.card: ModelCard = engine.card
        self.n_rc, self.n_lsc = n_rc, n_lsc
        self.workers, self.ratios = list(workers), list(ratios)
        self.loaded = self.stored = 0.0
        self.iterations = 0
        self.region: PeerRegion | None = None

    def io(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> StreamIO:
        """What each layer of this batch streams (falsy: nothing, the plain path)."""
        before = sum(c for _, c in prefills) + sum(decodes)
        new = sum(t for t, _ in prefills) + len(decodes)
        io = stream_io(self.card, self.e.B, self.n_rc, before, new)
        if self.region is not None:  # the batch's streamed KV, all layers, holds region room
            held = (io.load_bytes + io.store_bytes) * self.card.layers if io else 0
            pairs = zip(self.workers, self.ratios, strict=True)
            self.region.set_streamed({w: int(round(held * r)) for w, r in pairs})
        return io

    def _copies(self, src_is_worker: bool, nbytes: int, deps: list[int], layer: int):
        """One copy per worker of its share of ``nbytes``; (op ids, their events)."""
        e, ops, evs = self.e, [], []
        for w, r in zip(self.workers, self.ratios, strict=True):
            n = int(round(nbytes * r))
            if n <= 0:
                continue
            src, dst = (w, e.cfg.gpu) if src_is_worker else (e.cfg.gpu, w)
            tag = "lsc_load" if src_is_worker else "lsc_store"
            op, ev = e.ops.submit("copy", src, dst, nbytes=n, n_ios=1, depends_on=deps,
                                  step=e.iterations, layer=layer, tag=tag)  # fmt: skip
            if e.offload.mover.on_copy is not None:
                e.offload.mover.on_copy(src, dst, n)
            ops.append(op)
            evs.append(ev)
        return ops, evs

    def _compute(self, cost: LayerCost, deps: list[int], layer: int, tag: str):
        e = self.e
        return e.ops.submit("compute", "", e.cfg.gpu, flops=cost.flops, hbm_bytes=cost.hbm_bytes,
                            depends_on=deps, step=e.iterations, layer=layer, tag=tag)  # fmt: skip

    def _load_after(self, waits: list[simpy.Event], deps: list[int], io: StreamIO, layer: int):
        """A process: once ``waits`` have ended, load ``layer`` and wait for it;
        its value is the load's op ids."""
        env = self.e.env
        if waits:
            yield env.all_of(waits)
        ops, evs = self._copies(True, io.load_bytes, deps, layer)
        self.loaded += io.load_bytes
        if evs:
            yield env.all_of(evs)
        return ops

    def iterate(self, io: StreamIO, prefills, decodes, head: LayerCost, deps: list[int]):
        """The iteration's layers with streaming (a generator for the engine's
        process); returns the last op (the last layer's FFN and head)."""
        env, n_layers = self.e.env, self.card.layers
        qkv_c, attn_c, ffn_c = split_layer(self.card, prefills, decodes)
        load = env.process(self._load_after([], list(deps), io, 0))
        after = list(deps)
        for li in range(n_layers):
            q_op, q_ev = self._compute(qkv_c, after, li, "qkv")
            yield q_ev
            s_ops, s_evs = self._copies(False, io.store_bytes, [q_op], li)
            self.stored += io.store_bytes
            load_ops = yield load
            a_op, a_ev = self._compute(attn_c, [q_op, *load_ops], li, "attn")
            yield a_ev
            if li + 1 < n_layers:
                load = env.process(self._load_after(s_evs, [a_op, *s_ops], io, li + 1))
            cost = ffn_c + head if li == n_layers - 1 else ffn_c
            f_op, f_ev = self._compute(cost, [a_op], li, "ffn")
            yield f_ev
            after = [f_op]
        self.iterations += 1
        return f_op
