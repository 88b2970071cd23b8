"""Round-robin: request k goes to instance k mod N, whatever their state
(Dynamo's ``--router-mode round-robin``, the baseline its KV router is
measured against)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.fleet.router.base import InstanceState, Stateless
from sim.registry import ROUTERS
from sim.serving.requests import Request


@dataclass(frozen=True)
class Params:
    """Round-robin has no parameters."""


class RoundRobin(Stateless):
    def __init__(self, params: Params, n: int, block_tokens: int, rng: np.random.Generator):
        self.n, self.next = n, 0

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        i = self.next
        self.next = (i + 1) % self.n
        return i


ROUTERS.register("round_robin", Params, RoundRobin)
