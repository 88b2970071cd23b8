"""Quest (seed 003 §2.2, ref [29]): page-level min/max key bounds.

"Quest partitions key entries into chunks and estimates their importance by
multiplying the query vector with the channel-wise minimum and maximum of
the keys.  By retrieving only the Top-K important chunks per query ..."

* index: pages of ``page_size`` consecutive tokens; per page the channel-wise
  min and max key (two keys per page: ``index_bytes = 2 x pages x
  key_bytes``, twice ShadowKV's mean key and, per §9.3, over 4x KVDrive's);
* selection, on the GPU: ``score(page) = sum_c max(q_c min_c, q_c max_c)``,
  an *upper bound* of ``q . k`` over every key in the page (each channel's
  product is bounded by the larger of its two extremes), so a page holding
  one strongly matching key scores high even when its mean does not.
  ``4 d`` FLOPs per page (two products, a max, a sum) over both keys; pages
  in descending bound until the budget fills (:func:`take_units`);
* tier: the whole KV in host DRAM, the chosen pages copied to the GPU every
  step (seed 003 Table 1, "Tiering: DRAM" for Quest and every baseline but
  KVDrive; §2.3: such systems "offload the active sessions' KV caches to
  host memory" and fetch the selected entries "from host memory to GPU
  memory"); nothing on SSD, so a KV larger than the host budget is host OOM
  (:mod:`sim.scenarios.kvdrive_memory`).  The copy moves K and V of the
  chosen pages beyond the sinks and the local window, which stay on the GPU
  (§9.1: every sparse baseline retains them there);
* decode: a token leaving the local window joins page ``pos // page_size``
  (widening its bounds, or opening the page).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.design_base import DesignBase
from sim.policies.kvdesign import Layout, StepDecision, register
from sim.policies.selection import always_selected, take_units
from sim.registry import ParamError


@dataclass(frozen=True)
class Params:
    page_size: int = 16  # tokens per page (Quest's default chunk)

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ParamError("page_size", f"must be >= 1, got {self.page_size}")


def page_bounds(keys: np.ndarray, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Channel-wise (min, max) key of each run of ``page_size`` tokens."""
    starts = np.arange(0, len(keys), page_size)
    return np.minimum.reduceat(keys, starts, axis=0), np.maximum.reduceat(keys, starts, axis=0)


def bound_scores(query: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Quest's page score: sum over channels of max(q_c lo_c, q_c hi_c)."""
    q = np.asarray(query, dtype=np.float32)
    return np.maximum(lo * q, hi * q).sum(axis=1)


class Quest(DesignBase):
    """Min/max key bounds per page on the GPU; the top pages copied from DRAM."""

    name = "quest"
    params_type = Params
    score_device = "gpu"

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        self.placed = self.start(keys, layout)
        self.lo, self.hi = page_bounds(self.keys.rows(), self.params.page_size)
        self.members: list[np.ndarray] = []  # per page: its placed positions
        self._members_from(0)

    def _members_from(self, page: int) -> None:
        """Rebuild the member lists of ``page`` and every later page (the pages
        a placement touched; the rest are kept from the steps before)."""
        ps = self.params.page_size
        del self.members[page:]
        self.members += [
            np.arange(q * ps, min((q + 1) * ps, self.placed)) for q in range(page, self.n_pages)
        ]

    @property
    def n_pages(self) -> int:
        return len(self.lo)

    def index_bytes(self) -> int:
        return 2 * self.n_pages * self.layout.key_bytes

    def host_bytes(self) -> int:
        """Every visible entry's K and V in DRAM (the index is on the GPU)."""
        return self.visible * self.layout.entry_bytes

    def _place(self, stop: int) -> None:
        ps = self.params.page_size
        if stop <= self.placed:
            return
        first = self.placed // ps
        for pos in range(self.placed, stop):
            page, k = pos // ps, self.keys.rows()[pos]
            if page == self.n_pages:
                self.lo, self.hi = np.vstack([self.lo, k]), np.vstack([self.hi, k])
            else:
                np.minimum(self.lo[page], k, out=self.lo[page])
                np.maximum(self.hi[page], k, out=self.hi[page])
        self.placed = stop
        self._members_from(first)

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        lay = self.layout
        visible = self.advance(t, new_key)
        self._place(visible - lay.local_window)
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        scores = bound_scores(query, self.lo, self.hi)
        chosen, extra = take_units(scores, self.members, lay.step_budget(visible), always, visible)
        d = self.lo.shape[1]
        return StepDecision(
            selected=np.union1d(always, extra),
            dram_entries=len(always) + len(extra),
            ssd_extents=[np.zeros((0, 2), dtype=np.int64)] * lay.n_ssd,
            score_flops=4.0 * d * self.n_pages,
            score_bytes=float(self.index_bytes()),
            info={
                "pages": float(self.n_pages),
                "pages_chosen": float(len(chosen)),
                "h2d_entries": float(len(extra)),
            },
        )


register("quest", Params, Quest)
