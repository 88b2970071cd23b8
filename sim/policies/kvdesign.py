"""The protocol every sparse-attention KV offloading design implements.

Swarm, its ablations and its baselines (No Cluster, InfLLM-style blocks,
PQCache-style k-means) all answer the same two questions for one layer:

* offline (:meth:`KVDesign.build`): given profiling activations and the keys
  of the prefix, where does every KV entry live (which SSD, which byte
  offset; replicas allowed) and what stays in DRAM (index, window, cache)?
* online (:meth:`KVDesign.step`): given this step's query, which entries does
  attention use, and which byte extents must be read from which SSD, in how
  many batched submission rounds?

The answer is a :class:`StepDecision`: pure data.  The driver
(``sim.scenarios.swarm``) turns it into transfer-plan ops, so I/O volume and
per-device bytes and I/O counts come from the decision and the time from the
simulator.  Entry ids are token positions: the prefix is ``0..N-1`` and the
token generated at decode step ``t`` is ``N + t``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from sim.registry import KV_DESIGNS
from traces.access import selection_budget


@dataclass(frozen=True)
class Layout:
    """What the machine and workload give a design for one layer."""

    n_ssd: int
    entry_bytes: int  # one token's K and V for this layer (all KV heads)
    key_bytes: int  # the K half alone (what scoring reads)
    budget: int  # entries attention uses per step, sinks and window included (see step_budget)
    local_window: int  # most recent tokens always kept in DRAM
    sink_tokens: int  # first tokens always kept in DRAM
    dram_cache_entries: int  # DRAM for cached clusters/blocks, in entries
    ssd_latency_us: float  # SSD addressing latency (Swarm's cost-effectiveness score)
    ssd_entry_us: float  # per-entry transfer time at the SSD's bandwidth
    sparsity: float = 0.0  # > 0: the budget follows the context (step_budget), as the oracle's
    # one I/O's time: max(1/read IOPS, the io path's per-I/O CPU); 0 = I/Os cost nothing extra
    ssd_io_us: float = 0.0
    max_io_bytes: int = 0  # largest single I/O (the driver cuts ranges there); 0 = no limit
    budget_scale: float = 1.0  # the design's budget / the oracle's (matched recall raises it)
    # > 0: host DRAM for index *plus* cache, in bytes (cache_entries); 0: a cache of
    # dram_cache_entries with the index on top of it
    dram_bytes: int = 0

    def step_budget(self, visible: int) -> int:
        """The selection budget when entries ``0..visible-1`` are visible: how many
        distinct entries attention uses, the sinks and the local window *included*
        (the one definition every design spends, see :mod:`sim.policies.selection`).

        With ``sparsity`` set it is the oracle's own count,
        :func:`traces.access.selection_budget`: ``round(sparsity x (visible - 1))``
        (the context before the newest token), at least 1; otherwise the fixed
        ``budget``.  That base is multiplied by ``budget_scale`` and rounded
        (1.0, the default, is the oracle's own budget: every design the same);
        at least 1 and never more than ``visible``.  The oracle's top-k, what
        recall is measured against, always keeps the unscaled count.
        """
        if self.sparsity > 0:
            base = max(1, selection_budget(visible - 1, 0, self.sparsity))
        else:
            base = self.budget
        if self.budget_scale != 1.0:
            base = max(1, round(self.budget_scale * base))
        return min(visible, base)

    def cache_entries(self, index_bytes: int) -> int:
        """The DRAM cache's room in entries beside an index of ``index_bytes``:
        the one rule every design with a cache sizes it by.

        With ``dram_bytes`` set, index and cache share that budget: the cache
        gets what the index leaves, whole entries, never below 0 (an index
        larger than the budget leaves no cache and is over budget: the design
        reports its DRAM, :meth:`KVDesign.host_bytes`).  Without it, the cache
        is ``dram_cache_entries`` whatever the index holds.
        """
        if self.dram_bytes <= 0:
            return self.dram_cache_entries
        return max(0, (self.dram_bytes - int(index_bytes)) // self.entry_bytes)


@dataclass
class StepDecision:
    """One layer's decisions at one decode step.

    ``ssd_extents[k]`` is an ``(n, 2)`` int64 array of (byte offset, length)
    read from SSD k, in submission order; adjacent extents are *not* merged by
    the driver (a design that lays entries out contiguously returns one long
    range, :func:`extents_from_slots` with ``merge``, and the driver cuts it
    into I/Os of the device's maximum transfer size).  ``prefetch_extents`` are reads that
    must finish *before* selection can run (No Cluster loads the keys to
    score them); ``ssd_extents`` are the reads of the selected entries.
    """

    selected: np.ndarray  # entry ids attention uses (recall is measured on these)
    dram_entries: int  # how many of ``selected`` were already in DRAM
    ssd_extents: list[np.ndarray]
    rounds: int = 1  # batched submissions across all devices
    duplicate_entries: int = 0  # entries read more than once this step
    score_flops: float = 0.0  # selection compute (query x index keys)
    score_bytes: float = 0.0  # index bytes scanned by selection
    prefetch_extents: list[np.ndarray] | None = None
    info: dict[str, float] = field(default_factory=dict)  # design-specific counters

    @property
    def read_bytes(self) -> int:
        return int(sum(int(e[:, 1].sum()) for e in self.ssd_extents))


class KVDesign(Protocol):
    """A sparse-attention KV offloading design for one layer.

    ``score_device`` says where its selection (``StepDecision.score_flops``
    over ``score_bytes``) runs: ``"cpu"`` (the host cores, against a
    DRAM-resident index, :data:`kvtier.contracts.plan.CPU`) or ``"gpu"``.
    """

    name: str
    score_device: str
    # the layout given to build; a driver may replace it by one differing only in
    # budget_scale before stepping a copy (matched recall: sim.scenarios.matched)
    layout: Layout

    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
    ) -> None:
        """Offline phase.  ``activations``: profiling observations x prefix
        entries (bool, one row per profiled query); ``keys``: (N, d)."""
        ...

    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        """Online phase for decode step ``t``: ``query`` (d,) is this step's
        query, ``new_key`` (d,) the key of the token generated at step t
        (entry ``N + t``)."""
        ...

    def index_bytes(self) -> int:
        """DRAM held by the design's index (medoids, centroids, block
        representatives), excluding the window and cached data."""
        ...

    def host_bytes(self) -> int:
        """Host DRAM the design holds for this layer beyond sinks and window:
        its index (when selection scans it on the host) and its cache's room."""
        ...

    def ssd_bytes(self) -> np.ndarray:
        """Bytes the design has placed on each SSD so far (``(n_ssd,)`` int64):
        every extent it ever reads from SSD k lies in ``[0, ssd_bytes()[k])``.
        Placement only grows, so the value after the last step bounds them all."""
        ...


DESIGNS = KV_DESIGNS
register = KV_DESIGNS.register  # register("name", Params, Factory) in the design's own file


def get_design(name: str, **params: object) -> KVDesign:
    """The registered design ``name`` built with ``params`` (checked by the
    registry: unknown names, unknown or mistyped parameters are errors)."""
    return KV_DESIGNS.create(name, params)


def extents_from_slots(slots: np.ndarray, entry_bytes: int, merge: bool = False) -> np.ndarray:
    """(offset, length) extents of entry slots on one SSD.

    ``slots`` are slot numbers on the device (byte offset = slot x
    entry_bytes).  With ``merge``, runs of consecutive slots become one
    byte range, in ascending offset order (the order a real reader submits
    them: each range is one sequential read).  This is the rule every design
    uses for its reads (Swarm and its ablations, whose clusters take
    consecutive slots of each disk; No Cluster's and PQCache's stripe chunks;
    InfLLM's blocks): the range is what the layout makes contiguous, and the
    driver cuts it into I/Os of at most the device's maximum transfer size
    (the plan's ``io_bytes``, from the profile's ``max_io_kib``).  Without
    ``merge``: one entry-sized extent per slot, in the given order.
    """
    slots = np.asarray(slots, dtype=np.int64)
    if slots.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if not merge:
        return np.stack([slots * entry_bytes, np.full(slots.size, entry_bytes)], axis=1)
    s = np.sort(slots)
    breaks = np.nonzero(np.diff(s) != 1)[0] + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [s.size]])
    return np.stack([s[starts] * entry_bytes, (ends - starts) * entry_bytes], axis=1)
