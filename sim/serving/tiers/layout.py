"""Where offloaded KV lives on a tier's devices: slots, byte ranges, I/Os.

Pure data, no clock.  Every device of an offload tier (an SSD, or a DRAM
module, where the offsets name bytes of its host-memory region) has its own
address space, allocated by a :class:`SlotAllocator`.  Tiers never share a
device (:func:`sim.serving.build.make_tiers`), so one allocator per
(tier, device) owns that device's file.

**Layout.**  An entry (one offload block of ``k`` GPU blocks) keeps a run of
layers ``[l0, l1)`` on each of its devices (Algorithm 1,
:func:`sim.serving.tiers.placement.layer_runs`); that run gets one slot of
``l1 - l0`` *layer units*.  Within the slot the layers are laid out
layer-major, the way the layer-wise loads address them: layer ``l`` of the
entry is the contiguous range of ``layer_bytes`` (its ``k * block_tokens``
tokens' K and V of that layer) at::

    slot + (l - l0) * layer_stride,   layer_stride = layer_bytes rounded up to 4 KiB

so every layer starts 4 KiB-aligned (O_DIRECT on the real backend).  One
layer's range is split into I/Os of the design's I/O size (the last one
shorter), ``ceil(layer_bytes / io_bytes)`` of them: an I/O never crosses a
layer, as the simulator has always counted them.

**Allocation.**  Slots come in size classes (number of layer units): a freed
slot goes onto its class's free list and the next slot of that class reuses
it (last freed, first reused); an empty free list takes a fresh slot at the
end of the device's address space.  Both are O(1), no scans.  A tier on one
device has one class (every entry holds all layers), so its footprint is
exactly its peak number of entries; a pool device has at most a few classes
(Algorithm 1's counts differ by one), each with its own high-water mark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ALIGN = 4096  # every slot and every layer within it starts on a 4 KiB boundary


def layer_stride(layer_bytes: float) -> int:
    """Distance between consecutive layers of an entry's slot, in bytes."""
    return max(1, math.ceil(layer_bytes / ALIGN)) * ALIGN


class SlotAllocator:
    """Slots of one device: ``alloc(n)`` a slot of ``n`` layer units, ``free`` it back."""

    def __init__(self, unit_bytes: int):
        if unit_bytes <= 0 or unit_bytes % ALIGN:
            raise ValueError(f"slot unit must be a positive multiple of {ALIGN}, got {unit_bytes}")
        self.unit = unit_bytes
        self.end = 0  # bytes of address space handed out so far (the high-water mark)
        self.live = 0  # slots in use
        self._free: dict[int, list[int]] = {}  # size class -> offsets of free slots

    def alloc(self, units: int) -> int:
        """Byte offset of a slot of ``units`` layer units."""
        if units <= 0:
            raise ValueError(f"a slot needs >= 1 unit, got {units}")
        self.live += 1
        free = self._free.get(units)
        if free:
            return free.pop()
        offset = self.end
        self.end += units * self.unit
        return offset

    def alloc_many(self, units: int, count: int) -> list[int]:
        """Byte offsets of ``count`` slots of ``units``: exactly what ``count``
        calls of :meth:`alloc` return, in order (reused slots first, last
        freed first, then fresh ones)."""
        if units <= 0:
            raise ValueError(f"a slot needs >= 1 unit, got {units}")
        self.live += count
        free = self._free.get(units) or []
        reuse = min(count, len(free))
        out = free[len(free) - reuse :][::-1]
        del free[len(free) - reuse :]
        fresh = count - reuse
        step = units * self.unit
        out.extend(range(self.end, self.end + fresh * step, step))
        self.end += fresh * step
        return out

    def free(self, offset: int, units: int) -> None:
        """Give back the slot of ``units`` at ``offset``."""
        self.live -= 1
        self._free.setdefault(units, []).append(offset)


def layer_ranges(slots: Sequence[int], layers: Sequence[int], layer_bytes: float) -> np.ndarray:
    """(n, 2) int64 (offset, length): layer ``layers[i]`` of the slot starting at
    ``slots[i]`` (``layers[i]`` counted from the slot's first layer)."""
    stride = layer_stride(layer_bytes)
    out = np.empty((len(slots), 2), dtype=np.int64)
    out[:, 0] = np.asarray(slots, dtype=np.int64) + np.asarray(layers, dtype=np.int64) * stride
    out[:, 1] = int(round(layer_bytes))
    return out
