"""The demotion job of one store: every victim it evicted, copied down as one transfer.

Placing a store in the first tier may evict victims that are demoted to the
tier below (:meth:`sim.serving.policy.manager.BlockManager._evict`): each
victim's copy there is placed at once and its pieces made while the victim
is still in the first tier.  The store's victims then move as one job per
(tier, tier below), as a step's store does (vLLM's offloading worker runs
one transfer per request and step: ``OffloadingConnectorWorker.prepare_store_kv``);
the store that evicted them starts when that job ends
(:class:`sim.serving.execute.stores.Offloader`), since it writes the slots
they leave.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serving.policy.jobs import Piece, Transfer

if TYPE_CHECKING:
    from sim.serving.tiers.blocks import Entry, OffloadTier

# (tier, tier below, the victim's new entry below, the pieces of its copy)
Decided = tuple["OffloadTier", "OffloadTier", "Entry", list[Piece]]


def demotion_transfers(decided: list[Decided]) -> list[Transfer]:
    """One transfer per (tier, tier below) of ``decided``, in order of first
    appearance, holding its victims' pieces and new entries in the order
    decided (``rid`` -1: a demotion serves no request)."""
    out: dict[tuple[OffloadTier, OffloadTier], Transfer] = {}
    for tier, below, new, pieces in decided:
        t = out.get((tier, below))
        if t is None:
            t = out[(tier, below)] = Transfer("demote", "dst", -1, [], tier, below)
        t.pieces += pieces
        t.entries.append(new)
    return list(out.values())
