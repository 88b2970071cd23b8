"""Prefix lookups: how much of a request's prompt the GPU and the offload tiers hold.

:meth:`sim.serving.manager.BlockManager.lookup` finds the longest prefix of
a request's blocks that is cached and ready on the GPU (:func:`gpu_prefix`),
then group by group (``k`` GPU blocks to an offload block) in the offload
tiers (:func:`lower_hits`: each group in the first tier holding a ready,
not draining copy; the hit ends at a group with a block on the GPU or
found nowhere).  Every probe is a C-level ``map`` over a chunk of keys, the
chunks doubling from 32, so that the work follows the hit, not the prompt.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter

import numpy as np

from sim.serving.blocks import READY, Entry, GpuBlock, OffloadTier

LowerHits = list[tuple[OffloadTier, Entry, int, int]]


class Lookup:
    """A prefix hit: ``gpu`` blocks (slots), then ``lower`` hits (tier, entry,
    first block, blocks) below; ``blocks`` in all.

    ``lower`` and ``blocks`` may be left to ``find``, run on first use: an
    admission that finds no GPU room needs only ``gpu``.  They are what
    ``find`` sees then, so whoever reads them must do so before the tiers or
    the GPU's cached set change
    (:meth:`sim.serving.manager.BlockManager.acquire` does).
    """

    __slots__ = ("gpu", "_lower", "_blocks", "_find")

    def __init__(
        self,
        gpu: list[GpuBlock],
        lower: LowerHits | None = None,
        blocks: int = 0,
        find: Callable[[], tuple[LowerHits, int]] | None = None,
    ):
        self.gpu = gpu
        self._lower, self._blocks, self._find = lower or [], blocks, find

    def resolve(self) -> None:
        """Work out ``lower`` and ``blocks`` now, if not yet."""
        if self._find is not None:
            (self._lower, self._blocks), self._find = self._find(), None

    @property
    def lower(self) -> LowerHits:
        self.resolve()
        return self._lower

    @property
    def blocks(self) -> int:
        self.resolve()
        return self._blocks


def ints(hs: Sequence[int], start: int, stop: int, step: int = 1) -> list[int]:
    """``hs[start:stop:step]`` as Python ints (``hs`` a tuple or an int64 array)."""
    part = hs[start:stop:step]
    return part.tolist() if hasattr(part, "tolist") else list(part)


_CHUNK = 32  # keys probed at first by a prefix search; doubled at each round


def gpu_prefix(
    cached: dict[int, GpuBlock], ready: np.ndarray, hs: Sequence[int], limit: int
) -> list[GpuBlock]:
    """The ready blocks (slots) of ``cached`` for keys ``hs[:limit]`` up to the
    first missing or not-ready one (``ready`` indexed by slot), probed in
    doubling chunks (the work follows the hit, not the prompt)."""
    out: list[GpuBlock] = []
    i, chunk = 0, _CHUNK
    while i < limit:
        h = min(i + chunk, limit)
        chunk *= 2
        part = list(map(cached.get, ints(hs, i, h)))
        if None in part:
            del part[part.index(None) :]
        if part:
            ok = ready[part].tolist()
            if False in ok:
                del part[ok.index(False) :]
        out += part
        if len(part) < h - i:
            break
        i = h
    return out


class _Absent:
    """What a tier's ``entries.get`` gives for a key it lacks: never ready."""

    ref_cnt = -1
    draining = True


_ABSENT = _Absent()
_REF, _DRAINING = attrgetter("ref_cnt"), attrgetter("draining")


def _ready_runs(
    tiers: list[OffloadTier], keys: list[int], starts: list[int], sizes: list[int]
) -> list[tuple[OffloadTier, Entry, int, int]]:
    """Hits (tier, entry, first block, blocks) for groups ``keys`` (first
    blocks ``starts``, ``sizes`` blocks each) up to the first found nowhere:
    each in the first tier holding a ready, not draining entry for it (what
    :meth:`OffloadTier.lookup` accepts).  Readiness is one list comprehension
    per tier (slot loads, cheaper than C-level maps of getters); the hits
    are made run by run (groups served by the same tier)."""
    ess, oks = [], []
    for tier in tiers:
        es = list(map(tier.entries.get, keys, repeat(_ABSENT)))
        ess.append(es)
        oks.append([e.ref_cnt >= READY and not e.draining for e in es])  # slot loads: fast
    out: list[tuple[OffloadTier, Entry, int, int]] = []
    g, n = 0, len(keys)
    while g < n:
        t = next((i for i, ok in enumerate(oks) if ok[g]), -1)
        if t < 0:
            break
        h = _index(oks[t], False, g, n)
        for ok in oks[:t]:  # an earlier tier taking over ends the run
            h = _index(ok, True, g, h)
        out += zip(repeat(tiers[t]), ess[t][g:h], starts[g:h], sizes[g:h])
        g = h
    return out


def _index(xs: list[bool], value: bool, lo: int, hi: int) -> int:
    """The first index of ``value`` in ``xs[lo:hi]``, else ``hi``."""
    try:
        return xs.index(value, lo, hi)
    except ValueError:
        return hi


def lower_hits(
    tiers: list[OffloadTier],
    on_gpu: Callable[[int], bool],
    k: int,
    hs: Sequence[int],
    j: int,
    limit: int,
) -> tuple[LowerHits, int]:
    """Lower hits of the blocks keyed ``hs`` from block ``j`` on (``k`` GPU
    blocks a group, ``on_gpu`` whether a key is cached on the GPU): groups
    ``[j, last]`` (``last`` the end of ``j``'s offload block, cut at
    ``limit``), each found by its last block's key in the first tier holding
    a ready copy; stops at a group past the hashes, with a block on the GPU,
    or found nowhere.  Every
    step is one pass over the groups (C-level maps, list comprehensions), no
    per-block Python calls."""
    if j >= limit or not tiers:
        return [], j
    first = (j // k) * k + k - 1  # the first group's last block; the rest step by k
    lasts = list(range(first, min(limit + k - 1, len(hs)), k))
    if not lasts:
        return [], j
    starts = [j, *range(first + 1, first + 1 + k * (len(lasts) - 1), k)]
    stop = min(lasts[-1] + 1, limit)  # where the groups end (or the one past the hashes)
    # each group's blocks: min(last + 1, limit) - start
    sizes = [(x + 1 if x < limit else limit) - a for x, a in zip(lasts, starts, strict=True)]
    last_keys = ints(hs, lasts[0], lasts[-1] + 1, k)
    lower: LowerHits = []
    g, chunk = 0, _CHUNK
    while g < len(starts):  # galloping: the work follows the hit, not the prompt
        h = min(g + chunk, len(starts))
        chunk *= 2
        b0, b1 = starts[g], starts[h] if h < len(starts) else stop
        gpu = list(map(on_gpu, ints(hs, b0, b1)))
        cut = h  # the group holding the first GPU block and all after it go
        if True in gpu:
            cut = bisect_right(starts, b0 + gpu.index(True), g, h) - 1
        part = _ready_runs(tiers, last_keys[g:cut], starts[g:cut], sizes[g:cut])
        lower += part
        if g + len(part) < h:  # a GPU block, or a group found nowhere: the hit ends
            return lower, starts[g + len(part)]
        g = h
    return lower, stop
