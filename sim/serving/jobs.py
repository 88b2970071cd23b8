"""Transfer decisions as plain data: what moves where, and the byte ranges it touches.

The block manager (:mod:`sim.serving.manager`) decides transfers and returns
them as :class:`Transfer` s; the executor side (:mod:`sim.serving.stores`,
:mod:`sim.serving.transfers`) turns them into plan ops, owns their timing and
tells the manager when each ended.  Nothing here knows about time.

A :class:`Piece` is ``nbytes`` from one node to another, of one layer
(layer-wise loads) or of all of them; ``extents`` are its byte ranges on the
offload tier's device at the piece's tier end (the source of a load, the
destination of a store or demotion), one (offset, length) per (entry, layer),
in the order the piece moves them (layout: :mod:`sim.serving.layout`).  The
executor splits them into I/Os of the design's size where that end is an SSD;
a DRAM end needs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sim.serving.layout import layer_stride

if TYPE_CHECKING:
    from sim.serving.blocks import Entry, GpuBlock, OffloadTier

_NO_EXTENTS = np.zeros((0, 2), dtype=np.int64)


@dataclass(eq=False)
class Piece:
    """``nbytes`` from ``src`` to ``dst``; ``layer`` -1 = all layers; ``extents``
    the (n, 2) byte ranges on the tier end's device (module docstring)."""

    src: str
    dst: str
    nbytes: float
    layer: int = -1
    extents: np.ndarray = field(default_factory=lambda: _NO_EXTENTS)


@dataclass(eq=False)
class Transfer:
    """One transfer job the manager decided.

    ``tag``: ``load`` (tier -> GPU), ``store`` (GPU or a tier above -> ``dst``
    tier) or ``demote`` (an evicted entry copied to the tier below); ``by``:
    which end groups the pieces into per-device streams (``src`` for loads,
    ``dst`` otherwise); ``rid``: the request it serves (-1 for demotions).
    The rest is what the manager completes when the executor reports the end:
    ``entries`` become ready in ``dst``, ``olds`` (their copies in ``src``)
    are unpinned or, for a demotion, dropped; ``sources`` (offload key -> GPU
    blocks) are let go.
    """

    tag: str
    by: str
    rid: int
    pieces: list[Piece]
    src: OffloadTier | None = None
    dst: OffloadTier | None = None
    entries: list[Entry] = field(default_factory=list)
    olds: list[Entry] = field(default_factory=list)
    sources: dict[int, list[GpuBlock]] = field(default_factory=dict)

    @property
    def nbytes(self) -> float:
        return sum(p.nbytes for p in self.pieces)


@dataclass(eq=False)
class StoreRequest:
    """Offload blocks of request ``rid`` to the first tier: ``groups`` of
    (offload key, the GPU blocks holding it, held until the copy ends)."""

    rid: int
    groups: list[tuple[int, list[GpuBlock]]]


Hit = tuple["OffloadTier", "Entry", int, int]  # (tier, entry, first block, blocks)


def load_pieces(lower: Sequence[Hit], gpu: str, layerwise: bool) -> list[Piece]:
    """Pieces that bring ``lower`` hits to ``gpu``: per layer and device with
    layer-wise pipelining (sorted by layer, then device name), else one per
    (entry, device run)."""
    if not layerwise:
        return [
            Piece(
                tier.devices[dev],
                gpu,
                (l1 - l0) * tier.layer_bytes,
                extents=tier.layer_extents(e, dev, l0, l1),
            )
            for tier, e, _j, _n in lower
            for dev, l0, l1 in e.runs
        ]
    return _layer_pieces(lower, gpu)


def _layer_pieces(lower: Sequence[Hit], gpu: str) -> list[Piece]:
    """One piece per (layer, device), sorted by layer then device name; within
    a piece the entries' ranges in hit order (vectorised over layers)."""
    names: dict[str, int] = {}
    slot, first, count, dev, lb, stride = [], [], [], [], [], []
    for tier, e, _j, _n in lower:
        step = layer_stride(tier.layer_bytes)
        for (d, l0, l1), at in zip(e.runs, e.slots, strict=True):
            slot.append(at)
            first.append(l0)
            count.append(l1 - l0)
            dev.append(names.setdefault(tier.devices[d], len(names)))
            lb.append(tier.layer_bytes)
            stride.append(step)
    if not slot:
        return []
    n = np.asarray(count, dtype=np.int64)
    run = np.repeat(np.arange(len(n)), n)
    rel = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    layer = np.asarray(first, dtype=np.int64)[run] + rel
    by_name = sorted(names)  # pieces of a layer go in device-name order
    rank = np.array([by_name.index(x) for x in names], dtype=np.int64)
    device = rank[np.asarray(dev, dtype=np.int64)][run]
    order = np.lexsort((device, layer))  # stable: hit order within a (layer, device)
    layer, device, run, rel = layer[order], device[order], run[order], rel[order]
    lengths = np.asarray(lb, dtype=np.float64)[run]
    ext = np.stack(
        [
            np.asarray(slot, dtype=np.int64)[run] + rel * np.asarray(stride, dtype=np.int64)[run],
            np.rint(lengths).astype(np.int64),
        ],
        axis=1,
    )
    cut = np.flatnonzero((np.diff(layer) != 0) | (np.diff(device) != 0)) + 1
    bounds = np.concatenate([[0], cut, [len(layer)]])
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        nbytes = float(lengths[a:b].sum())
        out.append(Piece(by_name[int(device[a])], gpu, nbytes, int(layer[a]), ext[a:b]))
    return out


def store_pieces(
    src: OffloadTier | None, dst: OffloadTier, entries: Sequence[Entry], gpu: str
) -> list[Piece]:
    """Per (source device, destination device): the bytes of ``entries`` copied
    from ``src`` (None: from ``gpu``, which holds every layer) into ``dst``."""
    per: dict[tuple[str, str], float] = {}
    runs: dict[tuple[str, str], tuple[list[int], list[int]]] = {}  # first byte, layers
    stride = layer_stride(dst.layer_bytes)
    for e in entries:
        src_runs = src.entries[e.key].runs if src is not None else ((-1, 0, dst.layers),)
        for (dd, d0, d1), slot in zip(e.runs, e.slots, strict=True):
            for sd, s0, s1 in src_runs:
                lo, hi = max(d0, s0), min(d1, s1)
                if hi > lo:
                    name = src.devices[sd] if src is not None else gpu
                    k = (name, dst.devices[dd])
                    per[k] = per.get(k, 0.0) + (hi - lo) * dst.layer_bytes
                    first, count = runs.setdefault(k, ([], []))
                    first.append(slot + (lo - d0) * stride)
                    count.append(hi - lo)
    length = int(round(dst.layer_bytes))
    return [
        Piece(a, b, n, extents=_layer_runs(*runs[(a, b)], stride, length))
        for (a, b), n in per.items()
    ]


def _layer_runs(first: list[int], count: list[int], stride: int, length: int) -> np.ndarray:
    """(n, 2) ranges of ``count[i]`` consecutive layers from byte ``first[i]``,
    one per layer (what :meth:`OffloadTier.layer_extents` gives, run by run)."""
    n = np.asarray(count, dtype=np.int64)
    rel = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    out = np.empty((len(rel), 2), dtype=np.int64)
    out[:, 0] = np.repeat(np.asarray(first, dtype=np.int64), n) + rel * stride
    out[:, 1] = length
    return out
