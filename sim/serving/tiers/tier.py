"""What placing an offload set needs of a tier: the :class:`Tier` protocol.

:class:`sim.serving.tiers.blocks.OffloadTier` keeps a tier's books and
places an offload set through :mod:`.tierplace`, which reads and updates
those books; it names the tier by this protocol, so that it need not import
the class that imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from sim.serving.tiers.entry import Entry, Runs
from sim.serving.tiers.layout import SlotAllocator
from sim.serving.tiers.lru import LruOrder


class Tier(Protocol):
    """An offload tier's books (:class:`sim.serving.tiers.blocks.OffloadTier`)."""

    name: str
    capacity: list[int]  # bytes per device
    used: list[int]  # bytes per device
    evictable: list[int]  # bytes per device of the ready entries in use by nobody
    entries: dict[int, Entry]
    lru: LruOrder  # their LRU order
    allocators: list[SlotAllocator]

    def bytes_on(self, runs: Runs) -> tuple[int, ...]: ...
    def devices_of(self, nbytes: tuple[int, ...]) -> int: ...
    def spill(self, most: int = ...) -> tuple[Runs | None, int]: ...
    def short(self, need: Sequence[int]) -> int: ...
    def over(self) -> list[int]: ...
    def hand_over(self, victims: Sequence[Entry], evict: EvictFn | None) -> None: ...
    def free(self, victims: Sequence[Entry]) -> None: ...


# the victims of one eviction are handed to the callback together, in order (to copy
# them to the tier below), just before they are dropped
EvictFn = Callable[[Tier, Sequence[Entry]], None]
