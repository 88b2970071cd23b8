"""Prefix lookups: how much of a request's prompt the GPU and the offload tiers hold.

:meth:`sim.serving.policy.manager.BlockManager.lookup` finds the longest prefix of
a request's blocks that is cached and ready on the GPU (:func:`gpu_prefix`),
then group by group (``k`` GPU blocks to an offload block) in the offload
tiers (:func:`lower_hits`: each group in the first tier holding a ready
copy; the hit ends at a group with a block on the GPU or
found nowhere).  Every probe is one array read (the GPU's, by key) or a
C-level ``map`` (a tier's entries) over a chunk of keys, the chunks
doubling from 32, so that the work follows the hit, not the prompt; the
tiers below the first are probed only from the first group the first
tier does not serve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat

import numpy as np

from sim.serving.tiers.blocks import READY, Entry, GpuBlock, GpuCache, OffloadTier

LowerHits = list[tuple[OffloadTier, Entry, int, int]]


class Lookup:
    """A prefix hit: ``gpu`` blocks (slots), then ``lower`` hits (tier, entry,
    first block, blocks) below; ``blocks`` in all.

    ``lower`` and ``blocks`` may be left to ``find``, run on first use: an
    admission that finds no GPU room needs only ``gpu``.  They are what
    ``find`` sees then, so whoever reads them must do so before the tiers or
    the GPU's cached set change
    (:meth:`sim.serving.policy.manager.BlockManager.acquire` does, and keeps
    ``lower``'s entries per tier in ``by_tier`` for the load's end).
    """

    __slots__ = ("gpu", "_lower", "_blocks", "_find", "by_tier")

    def __init__(
        self,
        gpu: list[GpuBlock],
        lower: LowerHits | None = None,
        blocks: int = 0,
        find: Callable[[], tuple[LowerHits, int]] | None = None,
    ):
        self.gpu = gpu
        self._lower, self._blocks, self._find = lower or [], blocks, find
        self.by_tier: dict[OffloadTier, list[Entry]] | None = None  # ``lower``'s entries per tier

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


def gpu_prefix(gpu: GpuCache, hs: Sequence[int], limit: int) -> list[GpuBlock]:
    """The ready blocks (slots) of ``gpu`` for keys ``hs[:limit]`` up to the
    first missing or not-ready one, probed in doubling chunks (the work
    follows the hit, not the prompt), each one array read by key."""
    out: list[GpuBlock] = []
    i, chunk = 0, _CHUNK
    while i < limit:
        h = min(i + chunk, limit)
        chunk *= 2
        part = gpu.slots_of(hs[i:h])
        ok = gpu.ready[part]  # a key not cached reads slot -1's sentinel: False
        if np.count_nonzero(ok) < len(ok):
            out += part[: int(ok.argmin())].tolist()  # up to the first miss
            break
        out += part.tolist()
        i = h
    return out


def first_cached(gpu: GpuCache) -> Callable[[Sequence[int]], int]:
    """What :func:`lower_hits` asks of the GPU: the position of the first of
    some keys cached there (ready or not), -1 if none."""

    def first(keys: Sequence[int]) -> int:
        got = gpu.slots_of(keys) >= 0
        return int(got.argmax()) if got.any() else -1

    return first


class _Absent:
    """What a tier's ``entries.get`` gives for a key it lacks: never ready."""

    ref_cnt = -1


_ABSENT = _Absent()


def _ready_runs(
    tiers: list[OffloadTier], keys: list[int], starts: list[int], sizes: list[int]
) -> list[tuple[OffloadTier, Entry, int, int]]:
    """Hits (tier, entry, first block, blocks) for groups ``keys`` (first
    blocks ``starts``, ``sizes`` blocks each) up to the first found nowhere:
    each in the first tier holding a ready entry for it (what
    :meth:`OffloadTier.lookup` accepts).  Readiness is one list comprehension
    per tier (slot loads, cheaper than C-level maps of getters); the hits
    are made run by run (groups served by the same tier).  The tiers below
    the first are probed only from the first group the first tier does not
    serve (``lo``): the groups before it are the first tier's, whatever the
    others hold, so they read as absent there."""
    ess, oks, lo = [], [], 0
    for tier in tiers:
        es = list(map(tier.entries.get, keys[lo:] if lo else keys, repeat(_ABSENT)))
        ok = [e.ref_cnt >= READY for e in es]  # slot loads: fast
        if lo:  # not probed: absent
            es[:0] = repeat(_ABSENT, lo)
            ok[:0] = repeat(False, lo)
        ess.append(es)
        oks.append(ok)
        if not oks[1:]:  # the first tier: the others start where it stops serving
            lo = _index(ok, False, 0, len(ok))
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
    on_gpu: Callable[[Sequence[int]], int],
    k: int,
    hs: Sequence[int],
    j: int,
    limit: int,
) -> tuple[LowerHits, int]:
    """Lower hits of the blocks keyed ``hs`` from block ``j`` on (``k`` GPU
    blocks a group, ``on_gpu`` the first of some keys cached on the GPU, -1
    if none, :func:`first_cached`): groups
    ``[j, last]`` (``last`` the end of ``j``'s offload block, cut at
    ``limit``), each found by its last block's key in the first tier holding
    a ready copy; stops at a group past the hashes, with a block on the GPU,
    or found nowhere.  Every step is one pass over a chunk of groups (C-level
    maps, list comprehensions), no per-block Python calls; a chunk's groups
    (:func:`_groups`) are made only when the hit reaches it."""
    if j >= limit or not tiers:
        return [], j
    first = (j // k) * k + k - 1  # the first group's last block; the rest step by k
    n = len(range(first, min(limit + k - 1, len(hs)), k))  # groups
    if not n:
        return [], j
    stop = min(first + (n - 1) * k + 1, limit)  # where the groups end
    lower: LowerHits = []
    g, chunk = 0, _CHUNK
    while g < n:  # galloping: the work follows the hit, not the prompt
        h = min(g + chunk, n)
        chunk *= 2
        b0 = _start(j, k, first, g)
        on = on_gpu(hs[b0 : _start(j, k, first, h) if h < n else stop])
        cut = h  # the group holding the first GPU block and all after it go
        if on >= 0:
            p = b0 + on
            cut = 0 if p <= first else (p - first - 1) // k + 1
        keys = ints(hs, first + g * k, first + (cut - 1) * k + 1, k) if cut > g else []
        part = _ready_runs(tiers, keys, *_groups(j, k, first, stop, n, g, cut))
        lower += part
        if g + len(part) < h:  # a GPU block, or a group found nowhere: the hit ends
            return lower, _start(j, k, first, g + len(part))
        g = h
    return lower, stop


def _start(j: int, k: int, first: int, x: int) -> int:
    """The first block of group ``x`` (group 0 starts at ``j``, group ``x``
    after the last block ``first + (x - 1) * k`` of the one before)."""
    return j if x == 0 else first + 1 + (x - 1) * k


def _groups(
    j: int, k: int, first: int, stop: int, n: int, g: int, h: int
) -> tuple[list[int], list[int]]:
    """First blocks and block counts of groups ``g .. h-1`` of ``n``: ``k``
    blocks each, but group 0 (from ``j``) and group ``n - 1`` (to ``stop``)."""
    if h <= g:
        return [], []
    starts = list(range(_start(j, k, first, max(g, 1)), _start(j, k, first, h), k))
    if g == 0:
        starts.insert(0, j)
    sizes = [k] * (h - g)
    sizes[0] = min(first + g * k + 1, stop) - starts[0]
    if h == n:
        sizes[-1] = stop - starts[-1]
    return starts, sizes
