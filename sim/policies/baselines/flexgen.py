"""FlexGen (seed 003 §7.3 (a), §9.1): layer-wise full transfer.

"At each decoding step, the KV cache of an entire layer is transferred from
SSD to HBM ... attention computation, and immediately evicts them back to
disk after use."  Here:

* layout: positions striped over the SSDs in chunks of ``chunk_entries``
  (No Cluster's :class:`Stripe`); decode tokens continue the stripe (the
  formula is positional);
* selection: none: attention is dense, every visible entry is selected (so
  recall is 1 and the budget is not spent: FlexGen reads everything);
* I/O: every visible entry is read from SSD every step, each stripe chunk's
  run one range (``entry_reads``): per-step I/O is exactly the layer's KV,
  ``visible x entry_bytes``.  Nothing is cached in DRAM or HBM; the write
  back of the new token is not modelled (one entry per step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.baselines.nocluster import Stripe, entry_reads, io_rounds
from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.registry import ParamError


@dataclass(frozen=True)
class Params:
    chunk_entries: int = 256  # stripe chunk: consecutive entries on one SSD
    ios_per_round: int = 64

    def __post_init__(self) -> None:
        for name in ("chunk_entries", "ios_per_round"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")


class FlexGen(DesignBase):
    """The whole layer's KV read from SSD every step; no index, no cache."""

    name = "flexgen"
    params_type = Params
    score_device = "gpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        self.start(keys, layout, keep_keys=False)
        self.stripe = Stripe(self.params.chunk_entries, layout.n_ssd)

    def ssd_bytes(self) -> np.ndarray:
        return self.stripe.slots_used(self.visible) * self.layout.entry_bytes

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        every = np.arange(self.advance(t, new_key), dtype=np.int64)
        extents = entry_reads(every, self.stripe, self.layout.entry_bytes)
        return StepDecision(
            selected=every,
            dram_entries=0,
            ssd_extents=extents,
            rounds=io_rounds(extents, self.params.ios_per_round),
            info={"read_entries": float(self.visible)},
        )


register("flexgen", Params, FlexGen)
