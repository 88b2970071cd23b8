"""Least-loaded routing: the instance with the fewest queued requests
(``least_queue``) or the least KV cache in use (``least_kv``).

Both follow the Gateway API Inference Extension's endpoint picker (llm-d's
scheduler builds on it), each as the only scorer:
``pkg/epp/scheduling/framework/plugins/scorer/queue.go`` (``QueueScorer``:
the waiting-queue size, min-max normalised, the shortest queue scoring 1)
and ``kvcache_utilization.go`` (score = 1 - KV cache usage), with the
metrics of ``docs/proposals/003-model-server-protocol``:
``TotalQueuedRequests`` = vLLM's ``num_requests_waiting`` and
``KVCacheUtilization`` = vLLM's ``kv_cache_usage_perc``.  The highest score
wins, equal scores at random: the argmin of the metric.  Identical instances
have equal KV capacities, so least usage is least blocks in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.fleet.router.base import InstanceState, Stateless, argmin_tie_random
from sim.registry import ROUTERS
from sim.serving.requests import Request


@dataclass(frozen=True)
class Params:
    """Least-loaded routing has no parameters."""


class LeastQueue(Stateless):
    """The instance with the fewest requests waiting for admission."""

    def __init__(self, params: Params, n: int, block_tokens: int, rng: np.random.Generator):
        self.rng = rng

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        return argmin_tie_random([s.queued for s in states], self.rng)


class LeastKv(Stateless):
    """The instance with the smallest share of its GPU KV blocks in use."""

    def __init__(self, params: Params, n: int, block_tokens: int, rng: np.random.Generator):
        self.rng = rng

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        return argmin_tie_random([s.kv_used / s.kv_blocks for s in states], self.rng)


ROUTERS.register("least_queue", Params, LeastQueue)
ROUTERS.register("least_kv", Params, LeastKv)
