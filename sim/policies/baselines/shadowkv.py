"""ShadowKV (seed 003 §2.2, §9.1): low-rank keys on the GPU, values in DRAM.

* index (on the GPU): the pre-RoPE keys as a rank-``rank`` factorisation
  (``n x rank + rank x key_dim`` elements), one landmark (mean key) per chunk
  of ``chunk_size`` tokens, and the *outlier* chunks kept whole (K and V):
  the ``outlier_frac`` of chunks whose keys agree least with their landmark
  (lowest mean cosine similarity), where a mean would mislead selection;
* selection: landmarks scored on the GPU, chunks in descending score until
  the budget fills (:func:`take_units`);
* transfer, the mechanism that distinguishes it: the selected entries' keys
  are rebuilt on the GPU from the low-rank factors (``2 x rank x key_dim``
  FLOPs each, charged to selection), so only their *values* cross PCIe from
  DRAM: ``h2d_bytes = (selected - resident) x entry_bytes / 2``.  Nothing is
  on SSD (ShadowKV offloads to CPU memory only).

Decode tokens that leave the local window are not indexed (the run's steps
are shorter than the window, so none does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.kvdrive.index import chunk_means
from sim.policies.selection import always_selected, take_units
from sim.registry import ParamError

ELEMENT_BYTES = 2  # bf16


@dataclass(frozen=True)
class Params:
    chunk_size: int = 8  # tokens per landmark (ShadowKV's chunk)
    rank: int = 160  # of the pre-RoPE key factorisation (ShadowKV's default)
    outlier_frac: float = 0.015  # chunks kept whole on the GPU

    def __post_init__(self) -> None:
        for name in ("chunk_size", "rank"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.outlier_frac <= 1:
            raise ParamError("outlier_frac", f"must be in [0, 1], got {self.outlier_frac}")


class ShadowKV(DesignBase):
    """Landmarks and low-rank keys on the GPU; values fetched from DRAM."""

    name = "shadowkv"
    params_type = Params
    score_device = "gpu"

    def build(
        self, activations: sp.csr_matrix, keys: np.ndarray, layout: Layout, rng: np.random.Generator
    ) -> None:
        p = self.params
        n = self.start(keys, layout)
        k = self.keys.rows()
        self.landmarks = chunk_means(k, p.chunk_size)
        chunk = np.arange(n) // p.chunk_size
        unit = k / np.maximum(np.linalg.norm(k, axis=1, keepdims=True), 1e-12)
        mark = self.landmarks / np.maximum(
            np.linalg.norm(self.landmarks, axis=1, keepdims=True), 1e-12
        )
        cos = np.einsum("nd,nd->n", unit, mark[chunk])
        agree = np.bincount(chunk, cos) / np.bincount(chunk)
        n_out = int(round(p.outlier_frac * len(agree)))
        self.outliers = np.sort(np.lexsort((np.arange(len(agree)), agree))[:n_out])
        self.resident = np.zeros(n, dtype=bool)
        self.resident[np.isin(chunk, self.outliers)] = True
        self.members = [
            np.arange(c * p.chunk_size, min((c + 1) * p.chunk_size, n)) for c in range(len(agree))
        ]

    def index_bytes(self) -> int:
        p, lay = self.params, self.layout
        key_dim = lay.key_bytes // ELEMENT_BYTES
        factors = (self.n_prefix * p.rank + p.rank * key_dim) * ELEMENT_BYTES
        whole = int(self.resident.sum()) * lay.entry_bytes
        return factors + len(self.landmarks) * lay.key_bytes + whole

    def host_bytes(self) -> int:
        """Every entry's value in DRAM (keys are rebuilt on the GPU from the factors)."""
        return self.visible * (self.layout.entry_bytes // 2)

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay, p = self.layout, self.params
        visible = self.advance(t, new_key)
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = self.landmarks @ np.asarray(query, dtype=np.float32)
        _, extra = take_units(scores, self.members, lay.step_budget(visible), always, visible)
        fetched = extra[~self.resident[extra]]
        key_dim = lay.key_bytes // ELEMENT_BYTES
        d = self.landmarks.shape[1]
        return StepDecision(
            selected=np.union1d(always, extra),
            dram_entries=len(always) + len(extra),
            ssd_extents=[np.zeros((0, 2), dtype=np.int64)] * lay.n_ssd,
            score_flops=2.0 * d * len(self.landmarks) + 2.0 * p.rank * key_dim * len(extra),
            score_bytes=float(len(self.landmarks) * lay.key_bytes),
            info={
                "h2d_entries": float(len(fetched)),
                "h2d_bytes": float(len(fetched) * (lay.entry_bytes // 2)),
                "outlier_hits": float(len(extra) - len(fetched)),
            },
        )


register("shadowkv", Params, ShadowKV)
