"""The offload tiers as plain state (no clock, no simpy, no executor).

* :mod:`.entry` -- one offloaded block (its key, layout, reference count, stamp);
* :mod:`.blocks` -- :class:`~sim.serving.tiers.blocks.OffloadTier`: entries,
  used bytes per device, slots, eviction and demotion books;
* :mod:`.lru` -- the eviction order: stamp-ordered runs of entries per device;
* :mod:`.layout` -- slots and byte ranges of an entry on a device;
* :mod:`.placement` -- Unified KV Pooling's Algorithm 1 (seed 004 §IV-A);
* :mod:`.tierplace`, :mod:`.poolplace`, :mod:`.pooldrop`, :mod:`.poolcursor`,
  :mod:`.poolroom` -- placing an offload set in a one-device tier or a pool:
  fits, spills, and LRU victims.
"""
