"""The cache hit rate per retrieval unit: of the clusters or
blocks a design chose, the share found in its DRAM cache, summed over lanes and
steps from the decisions' own counters."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sim.metrics import _unit_hits
from sim.policies import StepDecision


def _dec(**info: float) -> StepDecision:
    return StepDecision(np.arange(1), 0, [], info=info)


def test_swarm_and_block_counters_sum_by_hand():
    swarm = SimpleNamespace(
        decisions=[
            _dec(chosen_clusters=10, cache_hit_clusters=4),
            _dec(chosen_clusters=6, cache_hit_clusters=1),
        ]
    )
    infllm = SimpleNamespace(decisions=[_dec(blocks_chosen=4, cache_hits=3)])
    assert _unit_hits({(0, 0): swarm}) == (5.0, 16.0)
    assert _unit_hits({(0, 0): swarm, (1, 0): infllm}) == (8.0, 20.0)
    assert _unit_hits({(0, 0): SimpleNamespace(decisions=[_dec(scored=3.0)])}) == (0.0, 0.0)
