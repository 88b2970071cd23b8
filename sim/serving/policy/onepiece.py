"""The pieces of one entry's copy, from a template per layout pair.

Each victim a store demotes has its copy's pieces made alone, while it is
still in its tier (:meth:`sim.serving.policy.manager.BlockManager._evict`),
as has a store of one block: pieces of one entry, which
:func:`sim.serving.policy.jobs.store_pieces` works out from the entry's
layout.  Entries of one tier share a handful of layouts, so the work
that depends on the layout alone (which destination runs meet which source
runs, per (source device, destination device) in order of first appearance,
the layers each part covers, the bytes) is done once per (source tier,
destination tier, source runs, destination runs) and kept as a
:class:`Template`; an entry's pieces are then its slots gathered at the
template's run indices plus the template's offsets, one numpy expression per
piece.  Those ranges depend on the entry's slots alone and a tier reuses its
slots, so each template keeps the (read-only, shared) ranges it made per
slots tuple (at most :data:`MADE`), and a copy into a small tier mostly
finds its ranges made.

The pieces are deferred (:meth:`sim.serving.policy.jobs.Piece.deferred`): range
count and bytes from the template, the ranges made (or found made) only
when first read, which a run that keeps no plan never does.

It gives what :func:`store_pieces` gives for a list of one entry (same
pieces in the same order, bytes exactly, same ranges: tested against it and
against the per-layer reference loop, :mod:`tests.sim.test_serving_jobs`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import numpy as np

from sim.serving.tiers.layout import layer_stride

if TYPE_CHECKING:
    from sim.serving.tiers.blocks import Entry, OffloadTier
    from sim.serving.tiers.entry import Runs


# per piece: (src device, dst device, the one destination run its ranges lie
# in or -1, run index per range, (offset within the run, length) per range, bytes)
Template = list[tuple[str, str, int, np.ndarray, np.ndarray, float]]
# per destination tier (weakly: a finished run's tiers go), per (src, runs, gpu):
# the template, the ranges of each piece per slots tuple already made, the length
_CACHE: WeakKeyDictionary[OffloadTier, dict[tuple, _Kept]] = WeakKeyDictionary()
MADE = 4096  # slots tuples whose ranges a template keeps (then it starts afresh)


class _Kept:
    """A template with the ranges it made, per slots tuple: an entry's ranges
    depend on its slots alone, and a tier's slots are reused (the allocator
    hands out the last freed first), so a copy into a small tier mostly
    finds them made.  The arrays kept are shared, hence read-only."""

    __slots__ = ("tmpl", "made", "length", "asked", "found", "offs")

    def __init__(self, tmpl: Template, length: int):
        self.tmpl = tmpl
        self.made: dict[tuple[int, ...], list[np.ndarray]] | None = {}
        self.length = length
        self.asked = self.found = 0  # look-ups of made ranges, and hits
        self.offs = [np.zeros(2, dtype=np.int64) for _part in tmpl]  # (slot, 0) per piece

    def ranges(self, slots: tuple[int, ...]) -> list[np.ndarray]:
        """Each piece's ranges for an entry at ``slots`` (made, kept while
        more than a quarter of the first :data:`MADE` look-ups find them)."""
        made = self.made
        if made is None:
            return self._make(slots)
        got = made.get(slots)
        self.asked += 1
        if got is not None:
            self.found += 1
            return got
        if self.asked >= MADE and 4 * self.found < self.asked:  # slots rarely reused
            self.made = None
            return self._make(slots)
        if len(made) >= MADE:
            made.clear()
        got = made[slots] = self._make(slots)
        for ext in got:
            ext.setflags(write=False)
        return got

    def piece(self, slots: tuple[int, ...], i: int) -> np.ndarray:
        """Piece ``i``'s ranges for an entry at ``slots`` (a deferred piece's)."""
        return self.ranges(slots)[i]

    def _make(self, slots: tuple[int, ...]) -> list[np.ndarray]:
        """Each piece's ranges for an entry at ``slots``, made now."""
        out = []
        for (_a, _b, one, run, base, _nbytes), off in zip(self.tmpl, self.offs, strict=True):
            if one >= 0:  # every range in one run: its slot added to the offsets
                off[0] = slots[one]
                out.append(base + off)
            else:
                ext = base.copy()
                ext[:, 0] += np.array(slots, dtype=np.int64)[run]
                out.append(ext)
        return out


# id(tier) -> (weak reference to it, its cache): a plain dict look-up per call
_RECENT: dict[int, tuple[weakref.ref, dict[tuple, _Kept]]] = {}


def one_entry_pieces(
    src: OffloadTier | None, dst: OffloadTier, e: Entry, gpu: str, piece: Callable[..., Any]
) -> list[Any]:
    """``store_pieces(src, dst, [e], gpu)``: ``e``'s bytes copied from ``src``
    (None: from ``gpu``, every layer there) into ``dst``; ``piece`` is the
    :class:`~sim.serving.policy.jobs.Piece` class (passed in: jobs imports this)."""
    s_runs: Runs = ((-1, 0, dst.layers),) if src is None else src.entries[e.key].runs
    hit = _RECENT.get(id(dst))
    if hit is not None and hit[0]() is dst:
        cache = hit[1]
    else:
        cache = _CACHE.get(dst)
        if cache is None:
            cache = _CACHE[dst] = {}
        if len(_RECENT) > 16:
            _RECENT.clear()
        _RECENT[id(dst)] = (weakref.ref(dst), cache)
    key = (src, s_runs, e.runs, gpu)
    kept = cache.get(key)
    if kept is None:
        tmpl = _template(src, dst, s_runs, e.runs, gpu)
        kept = cache[key] = _Kept(tmpl, int(round(dst.layer_bytes)))
    length, slots = kept.length, e.slots
    return [
        piece.deferred(
            part[0], part[1], part[5], len(part[4]), length, partial(kept.piece, slots, i)
        )
        for i, part in enumerate(kept.tmpl)
    ]


def cuts(
    src: OffloadTier | None, dst: OffloadTier, s_runs: Runs, d_runs: Runs, gpu: str
) -> list[tuple[tuple[str, str], list[tuple[int, int, int]]]]:
    """One entry's copy from ``s_runs`` to ``d_runs``, per (source device,
    destination device) in order of first appearance: its parts (destination
    run index, first layer within that run, layers), in :func:`store_pieces`'s
    loop order."""
    parts: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    for r, (dd, d0, d1) in enumerate(d_runs):
        for sd, s0, s1 in s_runs:
            lo, hi = max(d0, s0), min(d1, s1)
            if hi > lo:
                k = (src.devices[sd] if src is not None else gpu, dst.devices[dd])
                parts.setdefault(k, []).append((r, lo - d0, hi - lo))
    return list(parts.items())


def _template(
    src: OffloadTier | None, dst: OffloadTier, s_runs: Runs, d_runs: Runs, gpu: str
) -> Template:
    """The layout-only part of one entry's pieces (:data:`Template`): per
    (source device, destination device) in order of first appearance, the
    parts (destination run ``r``, layers ``lo .. hi`` of both) in
    :func:`store_pieces`'s loop order; the bytes summed as it sums them."""
    stride = layer_stride(dst.layer_bytes)
    out: Template = []
    for (a, b), ps in cuts(src, dst, s_runs, d_runs, gpu):
        count = np.array([c for _r, _off, c in ps], dtype=np.int64)
        run = np.repeat(np.array([r for r, _off, _c in ps], dtype=np.int64), count)
        rel = np.concatenate([np.arange(off, off + c, dtype=np.int64) for _r, off, c in ps])
        base = np.empty((len(run), 2), dtype=np.int64)
        base[:, 0] = rel * stride
        base[:, 1] = int(round(dst.layer_bytes))
        one = int(run[0]) if len({r for r, _off, _c in ps}) == 1 else -1
        out.append((a, b, one, run, base, sum_layers(count, dst.layer_bytes)))
    return out


def sum_layers(count: np.ndarray, layer_bytes: int) -> float:
    """The bytes of ``count[i]`` layers of ``layer_bytes`` each, summed: an offload
    tier's layer bytes are whole (:class:`sim.serving.tiers.blocks.OffloadTier`),
    so the sum is exact."""
    return float(int(count.sum()) * layer_bytes)
