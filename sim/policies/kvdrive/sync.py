"""KVDrive's four synchronization strategies (seed 003 §7.3, Fig. 12 right).

One machinery, four settings of ``Params.sync``; each decides, per step and
lane, which entries come from SSD, which reach the GPU, which pass through an
extra DRAM copy and how SSD reads are issued (:class:`Fetch`):

* ``layerwise`` (a, FlexGen's): the layer's whole packed KV goes SSD -> HBM
  every step through DRAM used as a passive memmap buffer.  The buffer is the
  lane's DRAM tier; layers are scanned cyclically, and an LRU page cache under
  a cyclic scan larger than itself hits nothing (every page is evicted before
  it comes round again), so when the layer does not fit, every step rereads
  it whole; when it fits, the pages stay (:meth:`Memmap.access`).
* ``blockwise`` (b): block-sparse fetch of the GPU cache's misses that are not
  in the static DRAM tier of the warm-up, the packed layout's coalesced
  extents, read by the run's ``io_path`` into pageable memory.
* ``hierarchical`` (c): misses go through the DRAM memmap region, a persistent
  LRU cache of the lane's DRAM tier: resident pages skip the SSD, the others
  are read by page faults (the kernel path, ``kernel_fs``: its per-4 KiB-page
  CPU cost, :meth:`sim.hw.machine.Machine.cpu_seconds`), then copied into
  preallocated pinned buffers and DMA'd asynchronously.
* ``balanced`` (d): as (c), but the entries an offline profile finds stalling
  most (the prefill's observation window, :func:`allocate_pinned`) stay
  resident in pinned memory: no SSD, no page fault, no staging copy.

Pageable copies (a, b) are staged by the CUDA driver through its own pinned
buffer ("pageable host memory ... is first copied to a pinned staging buffer",
CUDA C++ Best Practices Guide, "Pinned Memory") and the call is synchronous
with the host (CUDA Runtime API, "API synchronization behavior": a pageable
host-to-device cudaMemcpy "will return once the pageable buffer has been
copied to the staging memory for DMA transfer"): ``blocking``.

How SSD reads are issued is ``ssd_io`` (:data:`SSD_IOS`), the same for every
strategy in a comparison (one accounting): ``memmap`` (the paper's
implementation, §8: "numpy.memmap ... page-level access to KV tensors directly
on disk", so every strategy's reads are page faults: the kernel path, in I/Os
of the readahead window), ``io_path`` (every strategy's reads by the run's
``io_path``, e.g. io_uring into the DRAM buffer: a kvtier variant) or
``per_sync`` (the strategy's own: memmap for a, c, d, ``io_path`` for b; the
design's default, kept for the earlier scenarios).

Read-ahead (§7.3 (c): "KV entries can be read ahead during the selection and
pre-attention (QKV projection)"): before a layer's query exists, what is
known is the index and the previous step's query of the same layer-head.
The previous step's selection itself is no prediction worth reading: the
window cache (at least one step budget) still holds it.  So with
``readahead`` r the index is ranked by the previous query and taken to
``(1 + r)`` step budgets (the centroids just below the last cut: the
temporal-locality guess of what the new query adds); of those, the entries
neither in the GPU cache nor resident in DRAM are faulted into the memmap
region at once (:func:`read_ahead`), overlapping the selection; the step's
own fetch then finds whatever it guessed right resident.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# memmap page faults read around the fault: ra_pages, the default readahead window
# (VM_READAHEAD_PAGES = SZ_128K / PAGE_SIZE, include/linux/mm.h; do_sync_mmap_readahead,
# mm/filemap.c), so a memmap read is issued in I/Os of at most 128 KiB
MEMMAP_IO_BYTES = 128 * 1024
SYNCS = ("layerwise", "blockwise", "hierarchical", "balanced")
MEMMAP_SYNCS = ("layerwise", "hierarchical", "balanced")  # ssd_io per_sync: page faults
SSD_IOS = ("per_sync", "memmap", "io_path")
AHEAD_SYNCS = ("hierarchical", "balanced")  # the read-ahead needs the memmap region
PAGEABLE_SYNCS = ("layerwise", "blockwise")  # H2D from pageable memory: synchronous


@dataclass(frozen=True)
class Fetch:
    """One step's data movement of a lane.

    ``from_ssd``: entry ids read from SSD; ``h2d``: entries copied to the GPU;
    ``staged``: of those, the ones passing through an extra DRAM-to-DRAM copy
    (the driver's pageable staging, or memmap -> pinned buffer); ``dram_hits``:
    ``h2d`` entries found in DRAM (not read from SSD)."""

    from_ssd: np.ndarray
    h2d: int
    staged: int
    dram_hits: int


class Memmap:
    """The lane's DRAM memmap region: which entries' pages are resident.

    An LRU page cache of ``capacity`` entries over the lane's entry ids:
    ``last`` is the step each resident entry was last used (warm-up entries
    start below 0, the most important latest).  Eviction is by (last use, id)."""

    def __init__(self, warm: np.ndarray, n: int, capacity: int):
        self.capacity = capacity
        self.resident = np.zeros(n, dtype=bool)
        self.last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        warm = np.asarray(warm, dtype=np.int64)[:capacity]
        self.resident[warm] = True
        self.last[warm] = -1 - np.arange(len(warm))

    def grow(self, n: int) -> None:
        """Entry ids up to ``n`` exist (decode tokens), not resident."""
        extra = n - len(self.resident)
        if extra > 0:
            self.resident = np.concatenate([self.resident, np.zeros(extra, dtype=bool)])
            self.last = np.concatenate([self.last, np.full(extra, np.iinfo(np.int64).min)])

    def resize(self, capacity: int) -> None:
        """A region of ``capacity`` entries (the least recently used leave)."""
        self.capacity = capacity
        self._evict()

    def access(self, t: int, ids: np.ndarray) -> np.ndarray:
        """Touch ``ids`` at step ``t``; which were resident.  The misses' pages
        are faulted in, then the least recently used beyond ``capacity`` leave.
        A scan of more than ``capacity`` ids is the cyclic case: nothing it
        touches was resident by the time it came round, and it leaves the
        region holding its last ``capacity`` ids."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) > self.capacity:
            hit = np.zeros(len(ids), dtype=bool)
        else:
            hit = self.resident[ids].copy()
        self.resident[ids] = True
        self.last[ids] = t
        self.last[ids[: max(0, len(ids) - self.capacity)]] = t - 1  # scanned out already
        self._evict()
        return hit

    def _evict(self) -> None:
        held = np.flatnonzero(self.resident)
        over = len(held) - self.capacity
        if over > 0:
            order = np.lexsort((held, self.last[held]))
            self.resident[held[order[:over]]] = False


def fetch(sync: str, miss: np.ndarray, placed: int, memmap: Memmap, static, pinned, t: int):
    """The step's :class:`Fetch` under ``sync``: ``miss`` are the GPU cache's
    misses, ``placed`` the entries on SSD (the packed prefix and decode tokens
    beyond the local window), ``static`` the warm-up's DRAM tier (blockwise)
    and ``pinned`` the pinned-resident entries (balanced), boolean by id."""
    if sync == "layerwise":
        every = np.arange(placed, dtype=np.int64)
        hit = memmap.access(t, every)
        return Fetch(every[~hit], placed, placed, int(hit.sum()))
    if sync == "blockwise":
        dram = static[miss]
        return Fetch(miss[~dram], len(miss), len(miss), int(dram.sum()))
    pin = pinned[miss] if sync == "balanced" else np.zeros(len(miss), dtype=bool)
    rest = miss[~pin]
    hit = memmap.access(t, rest)
    return Fetch(rest[~hit], len(miss), len(rest), int(hit.sum() + pin.sum()))


def memmap_reads(sync: str, ssd_io: str) -> bool:
    """Whether ``sync``'s SSD reads are memmap page faults under ``ssd_io``."""
    return ssd_io == "memmap" or (ssd_io == "per_sync" and sync in MEMMAP_SYNCS)


def read_ahead(prev: np.ndarray, cached: np.ndarray, memmap: Memmap, pinned, t: int):
    """The read-ahead of step ``t`` (module doc): of ``prev`` (the predicted
    entries, beyond the always-kept ones), those not ``cached``
    (GPU cache mask) and neither pinned nor resident in the memmap region are
    faulted in (touched at ``t``); returns their ids."""
    prev = np.asarray(prev, dtype=np.int64)
    want = prev[~cached & ~pinned[prev] & ~memmap.resident[prev]]
    if len(want):
        memmap.access(t, want)
    return want


def allocate_pinned(designs: list, budget_bytes: float, repeat: float) -> int:
    """The balanced split's offline profile (§7.3 (d)): the pinned budget goes
    to the entries that stalled most in the prefill's observation window, over
    all lanes (layer-heads) at once.  An entry's stall count is how often the
    profiling queries selected it while it was outside the GPU cache's warm-up
    (each such selection is a memmap access: a fault or a staging copy).
    Entries are pinned in descending count (ties: lane, then id) while the
    budget holds them (each lane stands for ``repeat`` model layers); each
    design's :meth:`pin` takes its share.  Returns the entries pinned."""
    counts = [d.stall_profile() for d in designs]
    if not counts:
        return 0
    lane = np.concatenate([np.full(len(c), i) for i, c in enumerate(counts)])
    ids = np.concatenate([np.arange(len(c)) for c in counts])
    count = np.concatenate(counts)
    order = np.lexsort((ids, lane, -count))
    order = order[count[order] > 0]
    per = np.array([d.layout.entry_bytes for d in designs], dtype=np.float64) * repeat
    fits = np.cumsum(per[lane[order]]) <= budget_bytes
    take = order[fits]
    for i, d in enumerate(designs):
        d.pin(ids[take[lane[take] == i]])
    return int(len(take))
