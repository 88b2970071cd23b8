"""The demotion job of one store: every victim it evicted, copied down as one transfer.

Placing a store in the first tier may evict victims that are demoted to the
tier below (:meth:`sim.serving.policy.manager.BlockManager._evict`): the
victims of one eviction have their copies placed there at once, in order,
and their pieces made while they are still in the first tier.  The store's
victims then move as one job per (tier, tier below), as a step's store does
(vLLM's offloading worker runs one transfer per request and step:
``OffloadingConnectorWorker.prepare_store_kv``); the store that evicted them
starts when that job ends
(:class:`sim.serving.execute.stores.Offloader`), since it writes the slots
they leave.

Within the job, the victims' pieces between the same two devices (and of the
same layer) are one piece holding their ranges victim by victim, as a
store's entries are (:func:`sim.serving.policy.jobs.store_pieces`): the job
is submitted whole and its I/Os queued together, not written victim by
victim with a wait between them.  Seed 001's store path hands one write job
to its worker (``GpuSsdOffloadingHandler.transfer_async``, seed 001 §2.2,
"Store" step 5), whose ``kvikio.CuFile.pwrite`` calls return futures
without waiting (kvikio's API: ``pwrite`` "returns an IOFuture"); the
bytes and I/O count are the victims' sum either way.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from sim.serving.policy.jobs import Piece, Transfer

if TYPE_CHECKING:
    from sim.serving.tiers.blocks import Entry, OffloadTier

# (tier, tier below, the victims' new entries below, the pieces of their copies)
Decided = tuple["OffloadTier", "OffloadTier", list["Entry"], list[Piece]]


def demotion_transfers(decided: list[Decided]) -> list[Transfer]:
    """One transfer per (tier, tier below) of ``decided``, in order of first
    appearance, holding its victims' new entries in the order decided and
    one piece per (source device, destination device, layer) in order of
    first appearance, its ranges victim by victim (``rid`` -1: a demotion
    serves no request)."""
    out: dict[tuple[OffloadTier, OffloadTier], Transfer] = {}
    parts: dict[tuple[OffloadTier, OffloadTier], dict[tuple[str, str, int], list[Piece]]] = {}
    for tier, below, news, pieces in decided:
        t = out.get((tier, below))
        if t is None:
            t = out[(tier, below)] = Transfer("demote", "dst", -1, [], tier, below)
            parts[(tier, below)] = {}
        t.entries += news
        by_route = parts[(tier, below)]
        for p in pieces:
            by_route.setdefault((p.src, p.dst, p.layer), []).append(p)
    for pair, t in out.items():
        t.pieces = [_merged(ps) for ps in parts[pair].values()]
    return list(out.values())


def _merged(pieces: list[Piece]) -> Piece:
    """``pieces`` (one route and layer, ranges of one tier's common length) as
    one piece: bytes and range counts summed, ranges in order."""
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0]
    length = first.length if all(p.length == first.length for p in pieces) else 0
    nbytes = sum(p.nbytes for p in pieces)
    ranges = sum(p.ranges for p in pieces)
    merged = Piece.deferred(first.src, first.dst, nbytes, ranges, length, partial(_ranges, pieces))
    merged.layer = first.layer
    return merged


def _ranges(pieces: list[Piece]) -> np.ndarray:
    return np.concatenate([p.extents for p in pieces])
