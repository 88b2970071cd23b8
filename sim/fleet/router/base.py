"""What a router sees and decides, without a clock (:mod:`sim.fleet.router`).

A router assigns each request, when it arrives, to one of N identical
serving instances.  It sees each instance as an :class:`InstanceState`
read off the engine at that moment (the metrics a real router scrapes or
the KV events it subscribes to) and returns the instance's index; what it
keeps between requests is its own (Dynamo's per-worker active sequences).
The engine side (:mod:`sim.fleet.routed`) owns time: it builds
the states, delivers the request, and tells the router when a request it
routed has finished its prefill and when it has finished.

Ties between instances that score the same are broken at random, as both
sources do (Dynamo's ``softmax_sample`` at temperature 0 picks uniformly
among the lowest logits; the gateway's max-score picker shuffles equal
scores), by the run's seeded generator.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.serving.requests import Request


@dataclass(frozen=True, slots=True)
class InstanceState:
    """One instance as a router sees it when a request arrives.

    Attributes:
        queued: requests sent to it and not yet admitted (vLLM's
            ``num_requests_waiting``: WAITING plus WAITING_FOR_REMOTE_KVS).
        running: requests admitted and not finished.
        kv_used: GPU KV blocks that requests hold (vLLM's block-pool usage:
            cached blocks nobody references count as free).
        kv_blocks: the GPU's KV blocks.
        cached: its GPU prefix cache's keys (ids) as a :class:`PrefixIndex`
            (what Dynamo's KvIndexer learns from the engine's stored/removed
            KV events).
    """

    queued: int
    running: int
    kv_used: int
    kv_blocks: int
    cached: PrefixIndex


class PrefixIndex(Protocol):
    """The block keys an instance caches, as a router matches a prompt against them."""

    def prefix_blocks(self, keys: np.ndarray) -> int:
        """Blocks of ``keys`` cached from the first one up to the first missing one
        (Dynamo's ``OverlapScores``: the longest matching prefix)."""
        ...


class RouterPolicy(Protocol):
    """A routing policy: one instance index per arriving request."""

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        """The index of the instance ``req`` goes to (it is sent there)."""
        ...

    def prefilled(self, i: int, rid: int) -> None:
        """Request ``rid`` routed to instance ``i`` emitted its first token."""
        ...

    def finished(self, i: int, rid: int) -> None:
        """Request ``rid`` routed to instance ``i`` finished (or was rejected)."""
        ...


class Stateless:
    """A policy that keeps nothing about the requests it routed."""

    def prefilled(self, i: int, rid: int) -> None:
        return None

    def finished(self, i: int, rid: int) -> None:
        return None


def argmin_tie_random(values: Sequence[float], rng: np.random.Generator) -> int:
    """The index of the smallest value; among equal smallest ones, one at random."""
    low = min(values)
    best = [i for i, v in enumerate(values) if v == low]
    return best[0] if len(best) == 1 else best[int(rng.integers(len(best)))]


class KeySet:
    """A :class:`PrefixIndex` over a set of keys: an instance with no prefix cache
    (empty), or a router's test."""

    def __init__(self, keys: Iterable[int] = ()) -> None:
        self.keys = frozenset(keys)

    def prefix_blocks(self, keys: np.ndarray) -> int:
        n = 0
        for k in np.asarray(keys).tolist():
            if k not in self.keys:
                break
            n += 1
        return n
