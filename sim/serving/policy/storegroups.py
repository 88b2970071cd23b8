"""The groups of a request's newly computed blocks that a store offloads.

:meth:`sim.serving.policy.manager.BlockManager.computed` offloads every complete
group (``k`` GPU blocks, one offload block) not yet stored anywhere:
:func:`store_groups` picks the groups held in no tier and whole on the GPU
(no -1 among their blocks), with the GPU blocks the caller takes a
reference to once the store is placed (:meth:`BlockManager.prepare_store`
places it only if the first tier can make room for all of it).  The
usual case, no key held anywhere and every block on the GPU, is found by
short-circuiting C-level scans (``any`` over each tier's probes, ``min``
over the blocks); otherwise the groups are picked by numpy masks.  Only the
dict probes and the groups made go per group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

import numpy as np

from sim.serving.tiers.blocks import GpuBlock, OffloadTier

Group = tuple[int, tuple[GpuBlock, ...]]  # (last block's key, the group's blocks)


def store_groups(
    tiers: Sequence[OffloadTier],
    ones: Callable[[np.ndarray], list[tuple[GpuBlock]]],
    k: int,
    s: Any,
    keys: list[int],
    g0: int,
    g1: int,
) -> tuple[list[Group], np.ndarray]:
    """Groups ``g0 .. g1`` of request state ``s`` (a :class:`sim.serving.policy.seq.Seq`)
    held in no tier of ``tiers`` and whole on the GPU: (last block's key,
    blocks), in order, and their blocks as one array (to acquire on the GPU
    when the store is placed).  ``keys``: the groups' keys (each one's last
    block hash); ``ones``: the shared ``(slot,)`` of each slot (``k == 1``)."""
    n = g1 - g0
    blocks = s.blocks[g0 * k : g1 * k]
    if not keys:
        return [], _NONE
    if min(blocks) >= 0 and not any(any(map(t.entries.__contains__, keys)) for t in tiers):
        mine = np.array(blocks, dtype=np.int64)  # every group taken
    else:
        held = np.zeros(n, dtype=bool)  # in some tier already
        for t in tiers:
            held |= np.fromiter(map(t.entries.__contains__, keys), dtype=bool, count=n)
        whole = np.array(blocks, dtype=np.int64).reshape(n, k)
        take = ~held & (whole.min(axis=1) >= 0)
        keys = list(compress(keys, take.tolist()))
        mine = whole[take].ravel()
        if not keys:
            return [], _NONE
    if k == 1:  # one block a group: its shared 1-tuple
        return list(zip(keys, ones(mine), strict=True)), mine
    groups = zip(keys, zip(*mine.reshape(-1, k).T.tolist(), strict=True), strict=True)
    return list(groups), mine


_NONE = np.empty(0, dtype=np.int64)
