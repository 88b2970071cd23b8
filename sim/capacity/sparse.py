"""The designs a capacity plan compares on the ``sparse_decode`` workload.

Sparse decoding (:mod:`sim.scenarios.sparse_decode`) reads the same share of
the KV every step from the one tier it lives in; a plan's design names that
tier.  Each is registered in :data:`sim.registry.SPARSE_DECODE_DESIGNS` as a
preset of :class:`SparseDesignParams`, and :func:`sim.capacity.evaluate.sparse_scenario`
builds the workload's ``tier`` from it.  (The ``peer`` tier, a peer GPU's HBM,
needs two GPUs; the plan's sparse workload runs on one, so no design names it.)
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.registry import SPARSE_DECODE_DESIGNS


@dataclass(frozen=True)
class SparseDesignParams:
    tier: str  # where the KV lives: SparseDecodeParams.tier (ssd | dram), checked there


SPARSE_DECODE_DESIGNS.register("sparse-ssd", SparseDesignParams, preset={"tier": "ssd"})
SPARSE_DECODE_DESIGNS.register("sparse-dram", SparseDesignParams, preset={"tier": "dram"})
