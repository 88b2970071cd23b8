"""LMCache's write-through: a store into tier ``i`` copied on to tier ``i + 1``.

When a store from the GPU into the first tier ends, its entries become ready
there and the ones held there are copied on to the tier below (LMCache's
``cpu_to_ssd: write_through``): placed below, their first-tier entries
pinned (in use) until that copy ends.  :func:`write_through` is that copy,
made once the store's completion has made its entries ready.
"""

from __future__ import annotations

from sim.serving.policy.jobs import Transfer, store_pieces
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.entry import Entry


def write_through(
    src: OffloadTier,
    dst: OffloadTier,
    entries: list[Entry],
    rid: int,
    gpu_name: str,
    live: list[int] | None = None,
) -> list[Transfer]:
    """Copy ``entries`` of ``src`` still held there (ready) to ``dst``
    (``live``: their keys, when all of them are known to be held)."""
    held = src.entries  # list comprehensions: slot loads beat getter maps on 3.11
    if live is None:
        live = [e.key for e in entries if held.get(e.key) is e]
    placed = dst.place(live, None)
    if not placed:
        return []
    if len(placed) == len(entries) == len(live):  # all placed, in order: the entries
        olds = list(entries)
    else:
        olds = [held[e.key] for e in placed]
    src.pin_all(olds)
    pieces = store_pieces(src, dst, placed, gpu_name)
    return [Transfer("store", "dst", rid, pieces, src, dst, placed, olds)]
