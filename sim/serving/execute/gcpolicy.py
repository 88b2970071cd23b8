"""Python's cyclic garbage collector during a serving run.

A serving run allocates objects in bulk (one offload entry per key stored:
738K for LMCache at block 16 over 1K Mooncake-shaped requests), and almost
none of them form reference cycles; CPython's default young-generation
threshold (700 allocations net of frees) makes the collector walk the young
objects thousands of times for nothing.  :func:`relaxed_gc` raises that
threshold for the run and restores it afterwards: the simulation's events,
results and memory are the same (the collector frees only cycles, and
the run makes few), only the CPU spent collecting changes.

Measured (``python -m sim.serving.bench --requests 1000 --design lmcache
--block 16``, CPU s of the same run, 2026-11-24): default 9.05 s, threshold
10,000: 6.68 s, collector off: 6.51 s, ``gc.freeze()`` at the start: 8.18 s;
peak RSS 224 MiB in all four.  Raised to 100,000 later the same day: with
10,000 a young collection in a run of many small transfers (paged-cpu-ssd,
block 16, 200 requests) took ~12 ms each, 0.69-0.82 s of a 4.5 s run; at
100,000 the run spent 0.085 s collecting (4.52 -> 4.01-4.23 CPU s), and
lmcache-lp-async at 1K requests 2.93 -> 2.68 s, pool-passthrough-only
3.14 -> 3.09 s; peak RSS unchanged (194-220 MiB).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000


@contextmanager
def relaxed_gc(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Run the body with the young generation collected every ``young``
    net allocations (never lowering the current threshold), then restore
    the thresholds that were set before."""
    old = gc.get_threshold()
    gc.set_threshold(max(young, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
