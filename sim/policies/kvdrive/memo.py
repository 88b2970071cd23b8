"""A bounded memo of offline builds, shared by every variant of a run.

The variants of a KVDrive comparison (SFC, prefetch, DRAM only, the
calibration's pre-runs, the sensitivities) build the very same index over the
very same prefix keys: the trace is one per lane (:func:`sim.scenarios.
swarm_traces.lane_data`) and every build draws from a generator seeded by the
lane alone.  :class:`BuildMemo` keeps such results, keyed by a digest of the
inputs *and* of the generator's state before the build; a hit hands back the
stored result and sets the generator to the state the build left it in, so a
run with the memo is bit for bit the run without it.  Entries are evicted
least recently used beyond ``max_bytes``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


def array_digest(a: np.ndarray) -> tuple[str, tuple[int, ...], str]:
    """(dtype, shape, BLAKE2b of the bytes): equal digests, equal arrays."""
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, hashlib.blake2b(a.view(np.uint8).ravel()).hexdigest()


def rng_state(rng: np.random.Generator) -> str:
    """The generator's whole state, as a hashable string."""
    return repr(rng.bit_generator.state)


class BuildMemo:
    """``key -> (result, generator state after)``, LRU within ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.entries: OrderedDict[Hashable, tuple[Any, dict, int]] = OrderedDict()
        self.held = 0
        self.hits = self.misses = 0

    def get_or_build(
        self,
        key: Hashable,
        rng: np.random.Generator,
        build: Callable[[], Any],
        nbytes: Callable[[Any], int],
    ) -> Any:
        """``build()`` (which draws from ``rng``) or the stored result for
        (``key``, ``rng``'s state); either way ``rng`` ends in the state
        ``build()`` leaves it in."""
        full = (key, rng_state(rng))
        if full in self.entries:
            self.entries.move_to_end(full)
            result, after, _ = self.entries[full]
            rng.bit_generator.state = after
            self.hits += 1
            return result
        self.misses += 1
        result = build()
        size = int(nbytes(result))
        if size <= self.max_bytes:
            self.entries[full] = (result, rng.bit_generator.state, size)
            self.held += size
            while self.held > self.max_bytes:
                _, (_, _, dropped) = self.entries.popitem(last=False)
                self.held -= dropped
        return result

    def clear(self) -> None:
        self.entries.clear()
        self.held = self.hits = self.misses = 0
