"""CPU work LMCache does per retrieved KV object (issue 15, cause 1).

LMCache keeps KV as *objects*: one per 256-token chunk, or one per (chunk,
layer) with layer-wise retrieval (the layer-wise path splits a chunk's key
per layer).  For every object it retrieves it runs Python on the retrieval
thread besides moving the bytes (LMCache v0.3.x,
``lmcache/v1/storage_backend/local_cpu_backend.py`` and
``local_disk_backend.py``: ``get_blocking``, ``batched_get_non_blocking``,
``read_file``):

* a lookup: lock, dict lookup, the LRU policy's ``update_on_hit``, a
  ``MemoryObj`` view of the pinned buffer, a ref-count update
  (``DesignParams.object_us``);
* for an object in the local disk backend, a file per object:
  ``open(path, "rb")``, ``readinto``, ``close`` (``DesignParams.file_us``);
  the pages themselves are charged on the kernel path
  (:meth:`sim.hw.machine.Machine.cpu_seconds`).  SPDK passthrough (the pool,
  seed 004 §IV-B) opens no file.

The lookup is measured with LMCache itself (0.5.6, CPU-only import) by
``python -m analysis.measure_lmcache_object`` (``analysis/lmcache_object.csv``),
the file open/read/close by ``python -m analysis.lmcache_object_cost``;
the designs built on LMCache's retrieval code (its baselines, the pool and
the ablations, seed 004 §IV) carry them, the paged designs (vLLM's own
connector) none.  The work is serial on the one retrieval thread
(``DesignParams.object_threads``, 1), so it adds to the load: per layer before
that layer's compute with layer-wise retrieval, in all before the forward pass
without.  It runs on the profile's host cores
(:meth:`sim.serving.execute.online.OnlineOps.cpu_work`), shared with the I/O
paths' CPU flows, so a contended host stretches it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from sim.serving.designs import DesignParams
from sim.serving.policy.jobs import Hit


def retrieval_cpu_s(
    design: DesignParams, lowers: Sequence[Sequence[Hit]], layers: int, ssds: Collection[str]
) -> list[float]:
    """Seconds of per-object CPU work per layer (index = layer) for the lower
    hits ``lowers`` of the requests being loaded; without layer-wise retrieval
    the whole sum sits in layer 0 (one object per chunk, all layers).

    Vectorised: each distinct (tier, layout) gets a row of per-object costs
    per layer (:func:`_row`); a hit's costs are its block count times its
    row, and each layer's total is their running sum in hit order (a
    ``cumsum``, sequential like the reference loop :func:`_reference`, so
    the result is the same to the bit); hits of one tier and layout, each
    distinct per-layer cost once (:func:`_one_layout`)."""
    out = [0.0] * layers
    if not (design.object_us or design.file_us):
        return out
    hits = [h for lower in lowers for h in lower]
    if not hits:
        return out
    tier, runs = hits[0][0], hits[0][1].runs
    n = len(hits)
    if [h[0] for h in hits].count(tier) == n and [h[1].runs for h in hits].count(runs) == n:
        return _one_layout(design, hits, tier, runs, layers, ssds)
    rows: dict[tuple, int] = {}
    table: list[np.ndarray | None] = []
    idx = []
    for tier, e, _j, _n in hits:
        key = (id(tier), e.runs)  # tiers live through the call
        r = rows.get(key)
        if r is None:
            r = rows[key] = len(table)
            table.append(_row(design, tier, e.runs, layers, ssds))
        idx.append(r)
    if any(t is None for t in table):  # runs that overlap: not one cost per layer
        return _reference(design, lowers, layers, ssds)
    each = np.fromiter((h[3] for h in hits), dtype=np.float64, count=len(hits))
    costs = each[:, None] * np.stack(table)[idx] * 1e-6  # type: ignore[arg-type]
    return np.cumsum(costs, axis=0)[-1].tolist()


def _one_layout(
    design: DesignParams, hits: list[Hit], tier, runs, layers: int, ssds: Collection[str]
) -> list[float]:
    """:func:`retrieval_cpu_s` of hits all of one tier and one layout (the
    usual case): every layer's column of the general path's product is the
    block counts times that layer's cost, so each distinct cost is summed
    once (the same products, the same sequential ``cumsum``)."""
    row = _row(design, tier, runs, layers, ssds)
    if row is None:
        return _reference(design, [hits], layers, ssds)
    each = np.fromiter((h[3] for h in hits), dtype=np.float64, count=len(hits))
    sums: dict[float, float] = {}
    out = []
    for us in row.tolist():
        got = sums.get(us)
        if got is None:
            got = sums[us] = float(np.cumsum(each * us * 1e-6)[-1])
        out.append(got)
    return out


def _row(design: DesignParams, tier, runs, layers: int, ssds: Collection[str]) -> np.ndarray | None:
    """Microseconds per object of one block laid out as ``runs`` in ``tier``,
    per layer (layer-wise: each layer of a run; else the run starting at
    layer 0 carries the chunk's one object); None when two runs would add
    to the same layer (then only the reference loop keeps the order)."""
    files = design.file_us if design.io_path == "kernel_fs" else 0.0
    row = np.zeros(layers)
    seen = np.zeros(layers, dtype=bool)
    for dev, l0, l1 in runs:
        us = design.object_us + (files if tier.devices[dev] in ssds else 0.0)
        span = slice(l0, l1) if design.layerwise else slice(0, 1 if l0 == 0 else 0)
        if seen[span].any():
            return None
        row[span], seen[span] = us, True
    return row


def _reference(
    design: DesignParams, lowers: Sequence[Sequence[Hit]], layers: int, ssds: Collection[str]
) -> list[float]:
    """:func:`retrieval_cpu_s` hit by hit, layer by layer (the reference)."""
    out = [0.0] * layers
    if not (design.object_us or design.file_us):
        return out
    files = design.file_us if design.io_path == "kernel_fs" else 0.0
    for lower in lowers:
        for tier, e, _j, n in lower:
            for dev, l0, l1 in e.runs:
                on_ssd = tier.devices[dev] in ssds
                if design.layerwise:
                    each = n * (design.object_us + (files if on_ssd else 0.0)) * 1e-6
                    for li in range(l0, l1):
                        out[li] += each
                elif l0 == 0:  # one object per chunk: counted at its first run
                    out[0] += n * (design.object_us + (files if on_ssd else 0.0)) * 1e-6
    return out
