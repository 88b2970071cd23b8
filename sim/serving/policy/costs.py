"""Work of one continuous-batching iteration (FLOPs and HBM bytes).

An iteration runs every layer once over a mixed batch: prefill chunks
(``tokens`` new tokens after ``context_before`` cached ones) and decodes (one
new token after ``context`` cached ones).  Per layer it counts exactly what
:mod:`sim.models.cost` counts for its prefill and decode steps, with the
layer's weights read once for the whole batch (that is what batching buys):

* FLOPs: ``2 * layer_active_params`` per token, plus ``4 * q_heads *
  head_dim`` per (query, key) pair (causal within a chunk);
* HBM bytes: the weights for all the batch's tokens (for MoE, the distinct
  experts they touch), each sequence's cached KV read once and its new KV
  written once.

The output head runs for every sequence that emits a token this iteration:
each decode, and each prefill whose last chunk this is.  A single prefill
therefore costs ``prefill_layer_cost * layers + lm_head_cost(1)``, and a
batch of equal decodes ``decode_layer_cost * layers + lm_head_cost(batch)``
(the tests check both).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.models import LayerCost, ModelCard, causal_pairs, layer_weight_bytes, lm_head_cost


def iteration_layer_cost(
    card: ModelCard, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
) -> LayerCost:
    """One layer over prefill chunks ``(tokens, context_before)`` and decodes
    ``context`` (cached tokens before the new one)."""
    n_tokens = sum(t for t, _ in prefills) + len(decodes)
    if n_tokens <= 0:
        raise ValueError("an iteration needs at least one token")
    seen = sum(decodes) + len(decodes)  # a decode's pairs and KV tokens: c + 1 (integers)
    pairs = sum(causal_pairs(t, c) for t, c in prefills) + seen
    flops = 2.0 * card.layer_active_params * n_tokens
    flops += 2 * 2 * card.q_heads * card.head_dim * pairs
    kv_tokens = sum(c + t for t, c in prefills) + seen
    hbm = layer_weight_bytes(card, n_tokens) + kv_tokens * card.kv_bytes_per_token_layer
    return LayerCost(flops, hbm)


def iteration_cost(
    card: ModelCard, prefills: Sequence[tuple[int, int]], decodes: Sequence[int], outputs: int
) -> tuple[LayerCost, LayerCost]:
    """(cost of one layer, cost of the output head for ``outputs`` sequences)."""
    head = lm_head_cost(card, outputs) if outputs else LayerCost(0.0, 0.0)
    return iteration_layer_cost(card, prefills, decodes), head
