"""The offload tiers as plain state (no clock, no simpy, no executor).

* :mod:`.entry` -- one offloaded block (its key, layout, reference count);
* :mod:`.blocks` -- :class:`~sim.serving.tiers.blocks.OffloadTier`: entries in
  LRU order, used bytes per device (whole bytes), slots, spills, evictions;
* :mod:`.lru` -- the LRU order and its one victim rule (a walk from the
  least recently used);
* :mod:`.layout` -- slots and byte ranges of an entry on a device;
* :mod:`.placement` -- Unified KV Pooling's Algorithm 1 (seed 004 §IV-A);
* :mod:`.tierplace` -- placing an offload set in a tier, key by key: fits,
  spills, and LRU victims.
"""
