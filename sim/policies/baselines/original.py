"""Original (seed 003 §9.1): every KV entry in HBM, dense attention.

No index, no selection, no transfer: attention reads the whole visible KV
from HBM (recall 1).  What distinguishes it is its GPU memory: the whole
layer's KV stays resident, ``info["hbm_entries"] = visible``, so the
driver's memory check (:func:`sim.scenarios.kvdrive_memory.gpu_memory`)
finds it out of memory once ``batch x layers x visible x entry_bytes`` plus
the weights exceed the GPU's HBM; the run is then reported as OOM, with no
throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register


@dataclass(frozen=True)
class Params:
    """No parameters: everything is resident."""


class Original(DesignBase):
    """All KV in HBM; every visible entry attended, nothing moved."""

    name = "original"
    params_type = Params
    score_device = "gpu"

    def build(
        self, activations: sp.csr_matrix, keys: np.ndarray, layout: Layout, rng: np.random.Generator
    ) -> None:
        self.start(keys, layout, keep_keys=False)

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        self.advance(t, new_key)
        empty = np.zeros((0, 2), dtype=np.int64)
        return StepDecision(
            selected=np.arange(self.visible, dtype=np.int64),
            dram_entries=self.visible,
            ssd_extents=[empty] * self.layout.n_ssd,
            info={"h2d_entries": 0.0, "hbm_entries": float(self.visible)},
        )


register("original", Params, Original)
