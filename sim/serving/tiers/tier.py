"""What placing an offload set needs of a tier: the :class:`Tier` protocol.

:class:`sim.serving.tiers.blocks.OffloadTier` keeps a tier's books and
places an offload set through :mod:`.tierplace` (one device) and
:mod:`.poolplace` (a pool), which read and update those books; they name
the tier by this protocol, so that they need not import the class that
imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from sim.serving.tiers.entry import Entry, Runs
from sim.serving.tiers.layout import SlotAllocator
from sim.serving.tiers.lru import LruRuns


class Tier(Protocol):
    """An offload tier's books (:class:`sim.serving.tiers.blocks.OffloadTier`)."""

    name: str
    devices: tuple[str, ...]
    ratios: tuple[float, ...]
    capacity: list[float]  # bytes per device
    used: list[float]  # bytes per device
    layers: int
    layer_bytes: float  # one offload block, one layer
    entries: dict[int, Entry]  # in LRU order
    lru: LruRuns
    allocators: list[SlotAllocator]
    evictions: int
    _clock: int  # the last LRU stamp taken
    _alt: dict[tuple[bool, ...], tuple[Runs, list[float]]]

    def bytes_on(self, runs: Runs) -> list[float]: ...
    def add(
        self,
        keys: Sequence[int],
        runs: Runs,
        nbytes: list[float],
        slots: Sequence[tuple[int, ...]] | None = None,
    ) -> list[Entry]: ...
    def runs_over(self, room: tuple[bool, ...]) -> tuple[Runs, list[float]]: ...
    def evict_all(self, victims: Sequence[Entry], evict: EvictFn | None) -> None: ...
    def take_victims(self, short: list[float]) -> list[Entry]: ...


# each victim is handed to the callback (to copy it to the tier below) just before it is dropped
EvictFn = Callable[[Tier, Entry], None]
