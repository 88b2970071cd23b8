"""One iteration's forward pass: its loads, compute ops and all-reduces.

One compute op of roofline time (:mod:`sim.serving.costs`) after every load
of the batch has landed; with layer-wise loads one op per layer, layer l
starting once layer l's KV is in; a SwiftCache master's iterations that
reach past its regular cache run per-layer ops around the layer stream
cache's loads and stores (:mod:`sim.serving.streaming`).  Per-object
retrieval work (:mod:`sim.serving.objcost`) is CPU time after the bytes.
Mixed into :class:`sim.serving.engine.Engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serving.costs import iteration_cost

if TYPE_CHECKING:
    import simpy

    from sim.models import ModelCard
    from sim.serving.designs import DesignParams
    from sim.serving.engine_config import EngineConfig
    from sim.serving.jobs import Transfer
    from sim.serving.manager import BlockManager, Seq
    from sim.serving.online import OnlineOps
    from sim.serving.stores import Offloader
    from sim.serving.streaming import LayerStream
    from sim.serving.tp import TensorParallel
    from sim.serving.transfers import Job


class ForwardMixin:
    """The engine's forward pass over a batch of (request, tokens)."""

    # the engine's state these methods use (set by Engine.__init__)
    env: simpy.Environment
    cfg: EngineConfig
    design: DesignParams
    card: ModelCard
    mgr: BlockManager
    offload: Offloader
    ops: OnlineOps
    stream: LayerStream | None
    tp: TensorParallel | None
    prev_compute: int | None
    iterations: int

    if TYPE_CHECKING:  # methods of the engine's other parts (stubs for the type checker only)

        def _load(self, s: Seq) -> Transfer: ...  # LoadingMixin's
        def _object_cpu(self, lowers: list) -> list[float]: ...  # LoadingMixin's

    def _iterate(self, batch: list[tuple[Seq, int]]):
        prefills = [(c, s.cached_tokens + s.prefilled) for s, c in batch if s.prefill_left > 0]
        decodes = [s.req.input_tokens + s.generated - 1 for s, _ in batch if s.prefill_left == 0]
        outputs = len(decodes) + sum(1 for s, c in batch if 0 < s.prefill_left == c)
        layer, head = iteration_cost(self.card, prefills, decodes, outputs)
        n_tok = sum(t for t, _ in prefills) + len(decodes)
        loading = [s for s, _ in batch if s.lookup is not None]
        jobs: list[Job] = [self.offload.load(self._load(s)) for s in loading]
        deps = [self.prev_compute] if self.prev_compute is not None else []
        step, gpu, n_layers = self.iterations, self.cfg.gpu, self.card.layers
        cpu = self._object_cpu([s.lookup.lower for s in loading if s.lookup is not None])
        stream = self.stream.io(prefills, decodes) if self.stream is not None else None
        if stream and self.stream is not None:  # a master's LSC (sim.serving.streaming)
            if jobs:
                yield self.env.all_of([j.done for j in jobs])
                yield self.env.timeout(sum(cpu))
                deps += [op for j in jobs for op in j.ops()]
            op = yield from self.stream.iterate(stream, prefills, decodes, head, deps)
        elif not (jobs and self.design.layerwise):
            if jobs:
                yield self.env.all_of([j.done for j in jobs])
                yield self.env.timeout(sum(cpu))  # per-object retrieval work (objcost)
                deps += [op for j in jobs for op in j.ops()]
            total = layer * n_layers + head
            op, ev = self.ops.compute(
                gpu, total.flops, total.hbm_bytes, deps, step, -1, "iteration"
            )
            yield ev
            if self.tp is not None:
                op, ev = self.tp.allreduce(self.ops, op, n_tok, n_layers, step, -1)
                yield ev
        else:
            for li in range(n_layers):
                ready = [j.layer_done[li] for j in jobs if li in j.layer_done]
                if ready:
                    yield self.env.all_of(ready)
                if cpu[li]:
                    yield self.env.timeout(cpu[li])
                cost = layer + head if li == n_layers - 1 else layer
                deps += [o for j in jobs for o in j.ops(li)]
                op, ev = self.ops.compute(
                    gpu, cost.flops, cost.hbm_bytes, deps, step, li, "iteration"
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
