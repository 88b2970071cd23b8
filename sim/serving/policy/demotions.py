"""The transfers of the demotions one placement decided.

Placing a store in the first tier may evict victims that are demoted to
the tier below (:meth:`sim.serving.policy.manager.BlockManager._evict`): each
victim's copy there is placed at once, and the manager hands out one
transfer per victim once the placement is done, in the order decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serving.policy.jobs import Transfer, store_pieces_each

if TYPE_CHECKING:
    from sim.serving.tiers.blocks import Entry, OffloadTier

# (tier, tier below, the victim's new entry below, the victim)
Decided = tuple["OffloadTier", "OffloadTier", "Entry", "Entry"]


def demotion_transfers(decided: list[Decided], gpu: str) -> list[Transfer]:
    """A transfer per victim of ``decided``, in that order, their pieces made
    together per (tier, tier below) (:func:`store_pieces_each`: each the
    pieces of that victim alone; one victim, a drain's: its template)."""
    if len(decided) == 1:
        tier, below, new, old = decided[0]
        (p,) = store_pieces_each(tier, below, [new], gpu)
        return [Transfer("demote", "dst", -1, p, tier, below, [new], [old])]
    by_pair: dict[tuple[OffloadTier, OffloadTier], list[int]] = {}
    for n, (tier, below, _new, _old) in enumerate(decided):
        by_pair.setdefault((tier, below), []).append(n)
    pieces: list = [None] * len(decided)
    for (tier, below), idx in by_pair.items():
        made = store_pieces_each(tier, below, [decided[n][2] for n in idx], gpu)
        for n, p in zip(idx, made, strict=True):
            pieces[n] = p
    return [
        Transfer("demote", "dst", -1, p, tier, below, [new], [old])
        for (tier, below, new, old), p in zip(decided, pieces, strict=True)
    ]
