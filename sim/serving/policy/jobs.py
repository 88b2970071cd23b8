"""Transfer decisions as plain data: what moves where, and the byte ranges it touches.

The block manager (:mod:`sim.serving.policy.manager`) decides transfers and returns
them as :class:`Transfer` s; the executor side (:mod:`sim.serving.execute.stores`,
:mod:`sim.serving.execute.transfers`) turns them into plan ops, owns their timing and
tells the manager when each ended.  Nothing here knows about time.

A :class:`Piece` is ``nbytes`` from one node to another, of one layer
(layer-wise loads) or of all of them; ``extents`` are its byte ranges on the
offload tier's device at the piece's tier end (the source of a load, the
destination of a store or demotion), one (offset, length) per (entry, layer),
in the order the piece moves them (layout: :mod:`sim.serving.tiers.layout`).  The
executor splits them into I/Os of the design's size where that end is an SSD;
a DRAM end needs none.

A store's ranges (hundreds of entries x layers) are needed only to be written
into a kept plan: its pieces are made *deferred* (:meth:`sim.serving.policy.piece.Piece.deferred`:
range count and bytes at once, the ranges by numpy when ``extents`` is first
read), so a run that keeps no plan never makes them (their ranges equal the
per-layer reference of tests/sim/test_serving_jobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from sim.serving.policy import onepiece
from sim.serving.policy.onepiece import sum_layers as _sum_layers
from sim.serving.policy.piece import Piece
from sim.serving.tiers.layout import layer_stride

if TYPE_CHECKING:
    from sim.serving.requests import KeySpace
    from sim.serving.tiers.blocks import Entry, GpuBlock, OffloadTier
    from sim.serving.tiers.entry import Runs


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
    sources: dict[int, tuple[GpuBlock, ...]] = field(default_factory=dict)

    @property
    def nbytes(self) -> float:
        return sum(p.nbytes for p in self.pieces)


@dataclass(eq=False)
class StoreRequest:
    """Offload blocks of request ``rid`` to the first tier: ``groups`` of
    (offload key, the GPU blocks holding it, held until the copy ends)."""

    rid: int
    groups: list[tuple[int, tuple[GpuBlock, ...]]]
    space: KeySpace | None = None  # the keys' hashes (None: each key is its own)


Hit = tuple["OffloadTier", "Entry", int, int]  # (tier, entry, first block, blocks)


def load_pieces(lower: Sequence[Hit], gpu: str, layerwise: bool) -> list[Piece]:
    """Pieces that bring ``lower`` hits to ``gpu``: per layer and device with
    layer-wise pipelining (sorted by layer, then device name), else one per
    device (in order of first appearance) holding every hit's layers there,
    entry by entry in hit order (nothing waits on a layer: the load is done
    when all of it is)."""
    u = _uniform(lower) if lower else None
    if u is not None:
        return _uniform_pieces(*u, gpu, layerwise)
    if not layerwise:
        return _device_pieces(lower, gpu)
    return _layer_pieces(lower, gpu)


def _uniform(lower: Sequence[Hit]) -> tuple[OffloadTier, Runs, np.ndarray] | None:
    """(tier, runs, slots: one row per hit) when every hit is an entry of one
    tier laid out as the same ``runs``, no device holding two of them (the
    usual case: a one-device tier); else None."""
    tier = lower[0][0]
    if not all(h[0] is tier for h in lower):
        return None
    entries = [h[1] for h in lower]
    runs = entries[0].runs
    devs = [d for d, _l0, _l1 in runs]
    if [e.runs for e in entries].count(runs) != len(entries) or len(set(devs)) != len(devs):
        return None
    return tier, runs, _slots(entries, range(len(entries)))


def _uniform_pieces(
    tier: OffloadTier, runs: Runs, slots: np.ndarray, gpu: str, layerwise: bool
) -> list[Piece]:
    """:func:`_device_pieces` (one piece per run: its device) or
    :func:`_layer_pieces` (one per layer, by layer then device name) of hits
    whose entries all have ``runs`` and these ``slots``: the same pieces,
    bytes and ranges, with no per-hit loop (every piece has one range per hit,
    in hit order)."""
    m, stride, lb = len(slots), layer_stride(tier.layer_bytes), tier.layer_bytes
    if not layerwise:
        length, out = int(round(lb)), []
        for r, (dev, l0, l1) in enumerate(runs):
            n = np.full(m, l1 - l0, dtype=np.int64)
            ext = _layer_runs(slots[:, r], n, stride, length)
            out.append(
                Piece(tier.devices[dev], gpu, _sum_layers(n, lb), extents=ext, length=length)
            )
        return out
    by_name = sorted({tier.devices[d] for d, _l0, _l1 in runs})
    cover = sorted(  # (layer, device rank, run, first layer of the run)
        (layer, by_name.index(tier.devices[d]), r, l0)
        for r, (d, l0, l1) in enumerate(runs)
        for layer in range(l0, l1)
    )
    at = np.array([[r, (layer - l0) * stride] for layer, _k, r, l0 in cover], dtype=np.int64)
    ext = np.empty((len(cover), m, 2), dtype=np.int64)
    np.add(slots[:, at[:, 0]].T, at[:, 1:2], out=ext[:, :, 0])
    ext[:, :, 1] = np.rint(np.float64(lb)).astype(np.int64)
    nbytes = float(np.full(m, lb, dtype=np.float64).sum())  # the loops' sum of m ranges
    same = int(round(lb))
    return [
        Piece(by_name[k], gpu, nbytes, layer, ext[p], same)
        for p, (layer, k, _r, _l0) in enumerate(cover)
    ]


def _device_pieces(lower: Sequence[Hit], gpu: str) -> list[Piece]:
    """One all-layers piece per device: the ranges of each (entry, run) on it
    in hit order (:meth:`OffloadTier.layer_extents` run by run, vectorised)."""
    runs: dict[str, tuple[OffloadTier, list[int], list[int]]] = {}  # device -> slots, layers
    for tier, e, _j, _n in lower:
        for (dev, l0, l1), slot in zip(e.runs, e.slots, strict=True):
            got = runs.get(tier.devices[dev])
            if got is None:
                got = runs[tier.devices[dev]] = (tier, [], [])
            got[1].append(slot)
            got[2].append(l1 - l0)
    out = []
    for name, (tier, slots, count) in runs.items():
        n = np.asarray(count, dtype=np.int64)
        length = int(round(tier.layer_bytes))
        ext = _layer_runs(
            np.asarray(slots, dtype=np.int64), n, layer_stride(tier.layer_bytes), length
        )
        out.append(Piece(name, gpu, _sum_layers(n, tier.layer_bytes), extents=ext, length=length))
    return out


def _layer_pieces(lower: Sequence[Hit], gpu: str) -> list[Piece]:
    """One piece per (layer, device), sorted by layer then device name; within
    a piece the entries' ranges in hit order (vectorised over layers)."""
    names: dict[str, int] = {}
    slot, first, count, dev, lb, stride = [], [], [], [], [], []
    steps: dict[OffloadTier, int] = {}  # layer_stride per tier, worked out once
    for tier, e, _j, _n in lower:
        step = steps.get(tier)
        if step is None:
            step = steps[tier] = layer_stride(tier.layer_bytes)
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
    same = int(round(lb[0])) if len(set(lb)) == 1 else 0  # every range this long
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        nbytes = float(lengths[a:b].sum())
        out.append(Piece(by_name[int(device[a])], gpu, nbytes, int(layer[a]), ext[a:b], same))
    return out


def store_pieces(
    src: OffloadTier | None, dst: OffloadTier, entries: Sequence[Entry], gpu: str
) -> list[Piece]:
    """Per (source device, destination device), in order of first appearance:
    the bytes of ``entries`` copied from ``src`` (None: from ``gpu``, which
    holds every layer) into ``dst``, the ranges entry by entry.

    Entries with the same (source runs, destination runs) share their
    intersections: those are worked out once per layout pair, and the
    entries' slots turned into ranges with numpy; one entry (a demoted
    victim, a one-block store) from a template per layout pair
    (:mod:`sim.serving.policy.onepiece`)."""
    if len(entries) == 1:
        return onepiece.one_entry_pieces(src, dst, entries[0], gpu, Piece)
    entries = list(entries)  # a deferred piece reads them when its ranges are made
    parts: dict[tuple[str, str], list[_Part]] = {}
    first_seen: dict[tuple[str, str], tuple[int, int]] = {}
    for (s_runs, d_runs), idx in _layout_pairs(src, dst, entries).items():
        # a pair's device pairs in order of first appearance: ordered by (idx[0], pos)
        for pos, (k, cut) in enumerate(onepiece.cuts(src, dst, s_runs, d_runs, gpu)):
            parts.setdefault(k, []).extend((idx, r, off, c) for r, off, c in cut)
            seen = (idx[0], pos)
            first_seen[k] = min(first_seen.get(k, seen), seen)
    lb, stride = dst.layer_bytes, layer_stride(dst.layer_bytes)
    length = int(round(lb))
    slots = _Slots(entries)  # read by each device's piece: made once for them all
    out = []
    for k in sorted(parts, key=first_seen.__getitem__):
        ps = parts[k]
        total = sum(len(idx) * c for idx, _r, _off, c in ps)
        make = partial(_store_runs, slots, ps, stride, length)
        out.append(Piece.deferred(k[0], k[1], float(total * lb), total, length, make, runs=True))
    return out


# one part of a store piece: (indices of the entries of one layout pair,
# destination run, first layer within it, layers)
_Part = tuple[Sequence[int], int, int, int]


class _Slots:
    """A store's entries and their slot offsets per layout pair (its ``idx``
    list, kept alive by the pieces' parts), made when a piece first reads
    them: the pieces of a store striped over several devices read the same
    entries' slots, one piece per device."""

    __slots__ = ("entries", "_made")

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self._made: dict[int, np.ndarray] = {}

    def of(self, idx: Sequence[int]) -> np.ndarray:
        got = self._made.get(id(idx))
        if got is None:
            got = self._made[id(idx)] = _slots(self.entries, idx)
        return got


def _store_runs(table: _Slots, ps: list[_Part], stride: int, length: int) -> np.ndarray:
    """The ranges of one store piece's parts ``ps``, entry by entry (layers
    ascending within an entry), as runs: one (first byte, ``length``, layers,
    ``stride``) per entry and part (:func:`_layer_runs` expands them alike)."""
    if len(ps) == 1:  # one part (a layout pair, one run of the device): in entry order
        idx, r, off, c = ps[0]
        runs = np.empty((len(idx), 4), dtype=np.int64)
        np.add(table.of(idx)[:, r], off * stride, out=runs[:, 0])
        runs[:, 1], runs[:, 2], runs[:, 3] = length, c, stride
        return runs
    n = len(table.entries)
    ats, firsts, count_l = [], [], []
    for idx, r, off, c in ps:
        slots = table.of(idx)
        every = len(idx) == n  # idx is 0..n-1 (ascending, distinct)
        ats.append(np.arange(len(idx)) if every else np.asarray(idx, dtype=np.int64))
        firsts.append(slots[:, r] + off * stride)
        count_l.append(np.full(len(idx), c, dtype=np.int64))
    # several parts: back to entry order
    order = np.argsort(np.concatenate(ats), kind="stable")
    first, count = np.concatenate(firsts)[order], np.concatenate(count_l)[order]
    runs = np.empty((len(first), 4), dtype=np.int64)
    runs[:, 0], runs[:, 1], runs[:, 2], runs[:, 3] = first, length, count, stride
    return runs


def _layout_pairs(
    src: OffloadTier | None, dst: OffloadTier, entries: Sequence[Entry]
) -> Mapping[tuple[Runs, Runs], Sequence[int]]:
    """The indices of ``entries`` per (source runs, destination runs) pair,
    pairs in order of first appearance, indices ascending (the source runs of
    an entry: its copy's in ``src``, or every layer on the GPU when ``src`` is
    None).  The usual case, one pair for all, is found by C-level compares."""
    if len(entries) == 1:  # a demotion: one entry
        e = entries[0]
        s_run = ((-1, 0, dst.layers),) if src is None else src.entries[e.key].runs
        return {(s_run, e.runs): [0]}
    n = len(entries)
    if n and len(dst.devices) == 1 and (src is None or len(src.devices) == 1):
        # a one-device tier lays every entry out as all layers on its device
        # (placement.layer_runs), the GPU holds every layer: one pair, no scan
        s_run = ((-1, 0, dst.layers),) if src is None else ((0, 0, src.layers),)
        return {(s_run, ((0, 0, dst.layers),)): range(n)}
    d_runs = [e.runs for e in entries]  # list comprehensions: slot loads beat getter maps
    one = bool(n) and d_runs.count(d_runs[0]) == n
    if src is None:  # every entry's source: all layers on the GPU
        s_runs: list[Runs] = [((-1, 0, dst.layers),)] * n
    else:
        held = src.entries
        s_runs = [held[e.key].runs for e in entries]
        one = one and s_runs.count(s_runs[0]) == n
    if one:  # indices as a range: 0..n-1, no list of n ints
        return {(s_runs[0], d_runs[0]): range(n)}
    pairs: dict[tuple[Runs, Runs], list[int]] = {}
    for i, pair in enumerate(zip(s_runs, d_runs, strict=True)):
        pairs.setdefault(pair, []).append(i)
    return pairs


def _slots(entries: Sequence[Entry], idx: Sequence[int]) -> np.ndarray:
    """The slot offsets of ``entries[idx]``, one row each."""
    chosen = entries if len(idx) == len(entries) else list(map(entries.__getitem__, idx))
    runs = len(chosen[0].slots)  # every entry of one layout pair has as many runs
    flat = [e.slots[0] for e in chosen] if runs == 1 else [x for e in chosen for x in e.slots]
    return np.array(flat, dtype=np.int64).reshape(len(idx), runs)


def _layer_runs(first: np.ndarray, count: np.ndarray, stride: int, length: int) -> np.ndarray:
    """(n, 2) ranges of ``count[i]`` consecutive layers from byte ``first[i]``,
    one per layer (what :meth:`OffloadTier.layer_extents` gives, run by run)."""
    n = np.asarray(count, dtype=np.int64)
    if len(n) and n.min() == n.max():  # as many layers each: one broadcast add
        c, m = int(n[0]), len(n)
        out = np.empty((m, c, 2), dtype=np.int64)
        step = np.arange(c, dtype=np.int64) * stride
        np.add(np.asarray(first, dtype=np.int64)[:, None], step, out=out[:, :, 0])
        out[:, :, 1] = length
        return out.reshape(m * c, 2)
    rel = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    out = np.empty((len(rel), 2), dtype=np.int64)
    out[:, 0] = np.repeat(np.asarray(first, dtype=np.int64), n) + rel * stride
    out[:, 1] = length
    return out
