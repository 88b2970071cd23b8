"""KVDrive (seed 003): hierarchical index, in-GPU window cache with lookahead
eviction, 2D window scaling (MCKP), semantic-contiguity SSD packing.

Importing :mod:`sim.policies.kvdrive.design` registers ``kvdrive`` and
``kvdrive-lru`` (the catalog imports every policy module)."""
