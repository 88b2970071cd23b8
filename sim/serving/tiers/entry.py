"""One offload block in a tier (:class:`Entry`) and its reference-count states.

Kept apart from :mod:`sim.serving.tiers.blocks` so that the tier's helpers
(:mod:`sim.serving.tiers.lru`, :mod:`sim.serving.tiers.tierplace`) can name it without
importing the tier (the layering forbids that cycle).
"""

from __future__ import annotations

NOT_READY = -1  # being stored
READY = 0  # ready, in use by nobody; > 0: in use (loaded from, demoted)

Runs = tuple[tuple[int, int, int], ...]  # (device index, first layer, end layer)


class Entry:
    """One offload block in a tier: ``runs`` of layers per device, ``slots[i]``
    the byte offset of run ``i``'s slot on its device.

    The slots an LRU walk reads (:mod:`sim.serving.tiers.lru`: ``stamp``,
    ``ref_cnt``, ``heaped``) come first, next to the object's
    header, so that a walk over entries long out of the cache loads one
    cache line per entry where it can rather than two."""

    __slots__ = ("stamp", "ref_cnt", "heaped", "key", "slots", "runs", "nbytes")

    def __init__(
        self, key: int, runs: Runs, slots: tuple[int, ...], nbytes: list[float], stamp: int
    ):
        self.key = key
        self.ref_cnt = NOT_READY
        self.runs = runs
        self.slots = slots
        self.nbytes = nbytes  # bytes per device of the tier (from ``runs``)
        self.stamp = stamp  # LRU position: larger = more recently used
        self.heaped = -1  # the stamp of this entry's live item in the tier's heap

    @property
    def evictable(self) -> bool:
        return self.ref_cnt == READY
