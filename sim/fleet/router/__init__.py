"""Request routers over N identical serving instances, deciding without a clock.

One policy per file, each registered in :data:`sim.registry.ROUTERS` under the
name a scenario's ``router`` gives:

* ``round_robin`` (:mod:`.round_robin`);
* ``least_queue`` and ``least_kv`` (:mod:`.least_loaded`): the fewest queued
  requests, the least KV cache in use (the Gateway API Inference Extension's
  queue and KV-cache-utilisation scorers);
* ``prefix`` (:mod:`.prefix_aware`): Dynamo's KV router, the longest cached
  prefix weighed against each instance's load.

What a router sees and the interface are in :mod:`.base`; the engine side
that delivers requests is :mod:`sim.fleet.routed`.
"""

from __future__ import annotations

import numpy as np

from sim.fleet.router import least_loaded, prefix_aware, round_robin  # noqa: F401 (register)
from sim.fleet.router.base import InstanceState, KeySet, PrefixIndex, RouterPolicy
from sim.registry import ROUTERS

__all__ = ["InstanceState", "KeySet", "PrefixIndex", "RouterPolicy", "make_router"]


def make_router(
    name: str, params: dict, n: int, block_tokens: int, rng: np.random.Generator
) -> RouterPolicy:
    """The router ``name`` with ``params`` over ``n`` instances of ``block_tokens``-token
    blocks; ties broken by ``rng``.  Raises :class:`sim.registry.RegistryError`."""
    entry = ROUTERS.entry(name)
    return entry.factory(ROUTERS.params(entry, params, "router_params"), n, block_tokens, rng)
