"""KVDrive's SSD-aware layout (seed 003 §7.2): semantic-contiguity packing.

"KV entries that are frequently attended together ... are placed
sequentially within the same extent", and "each {layer, head} pair is
assigned to a dedicated SSD segment".  Here:

* the attended-together unit is the index's centroid (its chunks): a
  centroid's members take *consecutive slots* on one SSD, centroid after
  centroid, so fetching a whole centroid is one byte range, which the driver
  cuts into I/Os of the device's maximum transfer size;
* centroids go to the SSD with the fewest slots so far (ties: lowest SSD),
  in centroid order, which balances the disks' bytes;
* the layer-head partition is the lane's region: the driver
  (:func:`sim.scenarios.swarm.lane_bases`) gives every (sequence, layer)
  lane its own contiguous segment on each SSD.

Tokens generated while decoding are appended to the end of their centroid's
SSD (they are written after the packing, so they are contiguous with each
other, not with their centroid).  Reads merge runs of consecutive slots
(:func:`~sim.policies.kvdesign.extents_from_slots`): n adjacent entries are
one extent, a gap splits it.
"""

from __future__ import annotations

import numpy as np

from sim.policies.kvdesign import extents_from_slots


class PackedLayout:
    """Disk and slot of every entry id; grows as decode tokens are placed."""

    def __init__(self, members: list[np.ndarray], n_entries: int, n_ssd: int):
        self.n_ssd = n_ssd
        self.disk = np.full(n_entries, -1, dtype=np.int64)
        self.slot = np.full(n_entries, -1, dtype=np.int64)
        self.used = np.zeros(n_ssd, dtype=np.int64)
        self.centroid_disk = np.zeros(len(members), dtype=np.int64)
        for c, m in enumerate(members):
            k = int(np.argmin(self.used))
            self.centroid_disk[c] = k
            self.disk[m] = k
            self.slot[m] = self.used[k] + np.arange(len(m))
            self.used[k] += len(m)
        if np.any(self.disk < 0):
            raise ValueError("every entry must belong to exactly one centroid")

    def append(self, pos: int, centroid: int) -> None:
        """Place decode token ``pos`` at the end of its centroid's SSD."""
        if pos >= len(self.disk):
            grow = max(2 * len(self.disk), pos + 1) - len(self.disk)
            self.disk = np.concatenate([self.disk, np.full(grow, -1, dtype=np.int64)])
            self.slot = np.concatenate([self.slot, np.full(grow, -1, dtype=np.int64)])
        k = int(self.centroid_disk[centroid])
        self.disk[pos], self.slot[pos] = k, self.used[k]
        self.used[k] += 1

    def extents(self, ids: np.ndarray, entry_bytes: int) -> list[np.ndarray]:
        """Per SSD, the (offset, length) ranges holding ``ids``: consecutive
        slots merged into one range, ascending offsets."""
        ids = np.asarray(ids, dtype=np.int64)
        disk, slot = self.disk[ids], self.slot[ids]
        if np.any(disk < 0):
            raise ValueError("reading an entry that was never placed")
        return [
            extents_from_slots(slot[disk == k], entry_bytes, merge=True) for k in range(self.n_ssd)
        ]
