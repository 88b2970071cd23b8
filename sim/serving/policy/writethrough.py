"""LMCache's write-through: a store into tier ``i`` copied on to tier ``i + 1``.

When a store from the GPU into the first tier ends, its entries become ready
there and the ones held there are copied on to the tier below (LMCache's
``cpu_to_ssd: write_through``): placed below, their first-tier entries
pinned (in use) until that copy ends.  :func:`write_through` is that copy
for entries whose completion was already made (some of them ready before).

**Pinned at once, never offered.**  In the usual case every entry of the
store was not ready (:func:`all_not_ready`): then made ready, offered to
the first tier's LRU, and the ones placed below pinned at the same instant.
An offered entry that is pinned is no victim: when the LRU walk meets it, it
is skipped, and its item dropped; when it is unpinned it is offered again at
the same stamp (stamps change only on a touch).  So not offering it in the
first place changes no victim: the LRU orders live items by stamp alone
(stamps are unique per tier), and the entry's item appears at its unpin
exactly as before.  :func:`complete_through` does that: it places the keys
below first (the tier below's placement reads nothing of the first tier),
then sets the pinned ones straight to "in use once" (``READY + 1``), and
completes (offers) only the others.  That saves, per stored block, one pass
of :meth:`sim.serving.tiers.lru.LruRuns.offer_ready` and the walk's skip of a
pinned entry (``tests/sim/test_serving_writethrough.py`` holds it to
:func:`write_through` after ``complete_all`` on seeded workloads).
"""

from __future__ import annotations

from operator import attrgetter

from sim.serving.policy.jobs import Transfer, store_pieces
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.entry import NOT_READY, READY, Entry

_ref_cnt = attrgetter("ref_cnt")


def all_not_ready(entries: list[Entry]) -> bool:
    """Whether ``entries`` (not empty) are all not ready (a C-level scan:
    a count is never below :data:`NOT_READY`)."""
    return max(map(_ref_cnt, entries)) == NOT_READY


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


def complete_through(
    src: OffloadTier,
    dst: OffloadTier,
    entries: list[Entry],
    keys: list[int],
    rid: int,
    gpu_name: str,
) -> list[Transfer]:
    """A store of ``entries`` (keyed ``keys``) into ``src`` ended, all of
    them not ready (:func:`all_not_ready`: all still held in ``src``): what
    ``src.complete_all(entries)`` then :func:`write_through` leave, the
    entries pinned by the copy made ready and pinned without being offered
    (module docstring)."""
    placed = dst.place(keys, None)
    if len(placed) == len(entries):  # all placed, in order: the entries
        olds = list(entries)
        rest: list[Entry] = []
    else:
        held = src.entries
        olds = [held[e.key] for e in placed]
        rest = entries
    for e in olds:  # ready, then pinned by the copy: in use once
        e.ref_cnt = READY + 1
    if rest:  # the others ready and offered, in order (the pinned ones skipped)
        src.complete_all([e for e in rest if e.ref_cnt == NOT_READY])
    if not placed:
        return []
    pieces = store_pieces(src, dst, placed, gpu_name)
    return [Transfer("store", "dst", rid, pieces, src, dst, placed, olds)]
