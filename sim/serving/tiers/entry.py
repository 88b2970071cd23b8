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
    the byte offset of run ``i``'s slot on its device, ``nbytes[d]`` its
    bytes on device ``d`` of the tier (whole bytes, from ``runs``), ``devs``
    the devices it has bytes on (bit ``d`` for device ``d``)."""

    __slots__ = ("ref_cnt", "devs", "nbytes", "key", "slots", "runs", "at")

    def __init__(
        self, key: int, runs: Runs, slots: tuple[int, ...], nbytes: tuple[int, ...], devs: int
    ):
        self.key = key
        self.ref_cnt = NOT_READY
        self.runs = runs
        self.slots = slots
        self.nbytes = nbytes  # bytes per device of the tier (from ``runs``; shared, read-only)
        self.devs = devs
        self.at = -1  # its place in its tier's LRU order (sim.serving.tiers.lru.LruOrder)

    @property
    def evictable(self) -> bool:
        return self.ref_cnt == READY
