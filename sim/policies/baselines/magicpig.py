"""MagicPIG (seed 003 §2.2, §9.1): LSH sampling, attention on the CPU.

* index: SimHash, ``tables`` tables of ``bits`` random hyperplanes each; an
  entry's code in a table is the sign pattern of its key against the planes
  (one 32-bit word per table and entry, in DRAM);
* selection, on the CPU: the query's code in every table; an entry is a
  candidate when it collides with the query in at least ``min_collisions``
  tables; candidates in descending collision count (then by id) fill the
  budget.  Cost: one code comparison per (table, entry), ``4 x tables``
  bytes per entry scanned;
* the mechanism that distinguishes it: attention over the sampled entries
  runs *on the CPU* where the KV lives (``info["cpu_attn_entries"]``), so no
  KV crosses PCIe (``h2d_entries = 0``); only sinks and the local window are
  attended on the GPU.  The KV sits in DRAM, nothing on SSD.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.selection import always_selected
from sim.registry import ParamError

CODE_BYTES = 4  # one table's code of one entry


@dataclass(frozen=True)
class Params:
    bits: int = 10  # hyperplanes per table (MagicPIG's K)
    tables: int = 150  # hash tables (MagicPIG's L)
    min_collisions: int = 2
    # KV heads hashed separately (MagicPIG hashes per head; Llama-3-8B has 8): every
    # table holds each entry's 4-byte id once per head, in host memory
    hashed_heads: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 31:
            raise ParamError("bits", f"must be in [1, 31], got {self.bits}")
        for name in ("tables", "min_collisions", "hashed_heads"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")


def simhash(x: np.ndarray, planes: np.ndarray, rows: int = 4096) -> np.ndarray:
    """(n, tables) uint32 codes: bit b of table l is ``x . planes[l, b] > 0``.

    One BLAS product against all ``tables x bits`` planes per ``rows`` keys, the
    sign bits packed by a product with the bit weights (exact in float64)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float32))
    tables, bits, d = planes.shape
    flat = np.ascontiguousarray(planes.reshape(tables * bits, d).T)
    weights = np.ldexp(1.0, np.arange(bits))
    codes = np.empty((len(x), tables), dtype=np.uint32)
    for s in range(0, len(x), rows):
        signs = (x[s : s + rows] @ flat > 0).reshape(-1, tables, bits)
        codes[s : s + rows] = signs @ weights
    return codes


class MagicPIG(DesignBase):
    """SimHash sampling on the CPU; sampled attention on the CPU."""

    name = "magicpig"
    params_type = Params
    score_device = "cpu"

    def build(
        self, activations: sp.csr_matrix, keys: np.ndarray, layout: Layout, rng: np.random.Generator
    ) -> None:
        p = self.params
        self.start(keys, layout)
        d = keys.shape[1]
        self.planes = rng.normal(size=(p.tables, p.bits, d)).astype(np.float32)
        self.codes = simhash(self.keys.rows(), self.planes)

    def host_bytes(self) -> int:
        """Every entry's KV (the CPU attends there) and its id in every table of every
        hashed head, in DRAM: ``visible x (entry_bytes + 4 x tables x hashed_heads)``,
        2.2x the KV itself at the defaults (the index that makes MagicPIG fail at
        initialization, seed 003 §9.2)."""
        p = self.params
        return self.visible * (self.layout.entry_bytes + CODE_BYTES * p.tables * p.hashed_heads)

    def collisions(self, query: np.ndarray) -> np.ndarray:
        """Per indexed entry, the tables in which its code equals the query's."""
        return (self.codes == simhash(query, self.planes)[0]).sum(axis=1)

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay, p = self.layout, self.params
        visible = self.advance(t, new_key)
        self.codes = np.vstack([self.codes, simhash(new_key, self.planes)])
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        hits = self.collisions(query)
        hits[always] = -1
        room = max(0, lay.step_budget(visible) - len(always))
        order = np.lexsort((np.arange(visible), -hits))
        order = order[hits[order] >= p.min_collisions][:room]
        sampled = np.sort(order)
        return StepDecision(
            selected=np.union1d(always, sampled),
            dram_entries=len(always) + len(sampled),
            ssd_extents=[np.zeros((0, 2), dtype=np.int64)] * lay.n_ssd,
            score_flops=float(p.tables * visible),
            score_bytes=float(CODE_BYTES * p.tables * visible),
            info={"h2d_entries": 0.0, "cpu_attn_entries": float(len(sampled))},
        )


register("magicpig", Params, MagicPIG)
