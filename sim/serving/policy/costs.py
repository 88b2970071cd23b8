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

The engine counts its iterations through one :class:`IterationCost` per model:
the same arithmetic, with what depends only on the batch's shape kept (a
layer's weight bytes per token count, the head's cost per output count) and
the sums taken over plain integers (every pair and KV count is an integer, so
they are exact and the floats are those of the per-sequence sum).
:func:`iteration_layer_cost` and :func:`iteration_cost` are its results as
:class:`LayerCost` records.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.models import LayerCost, ModelCard, layer_weight_bytes, lm_head_cost


class IterationCost:
    """Work of iterations of one model: :meth:`work`, one layer over a batch and
    the output head for the sequences emitting a token, as floats, without a
    record per call."""

    __slots__ = ("card", "_linear", "_pair", "_kv", "_weights", "_heads")

    def __init__(self, card: ModelCard):
        self.card = card
        self._linear = 2.0 * card.layer_active_params  # FLOPs a token, linear layers
        self._pair = 2 * 2 * card.q_heads * card.head_dim  # FLOPs a (query, key) pair
        self._kv = card.kv_bytes_per_token_layer
        self._weights: dict[int, float] = {}  # tokens -> a layer's weight bytes
        self._heads: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}  # outputs -> head

    def work(
        self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int], outputs: int
    ) -> tuple[float, float, float, float]:
        """(FLOPs, HBM bytes) of one layer over prefill chunks ``(tokens,
        context_before)`` and decodes ``context`` (cached tokens before the new
        one), then (FLOPs, HBM bytes) of the output head for ``outputs``
        sequences ((0, 0) for none)."""
        n_tokens = len(decodes)
        pairs = kv_tokens = sum(decodes) + n_tokens  # a decode's pairs and KV tokens: c + 1
        for t, c in prefills:
            n_tokens += t
            # causal pairs, t * c + t (t + 1) / 2 (sim.models.causal_pairs), in integers
            pairs += t * c + t * (t + 1) // 2
            kv_tokens += c + t
        if n_tokens <= 0:
            raise ValueError("an iteration needs at least one token")
        weights = self._weights.get(n_tokens)
        if weights is None:
            weights = self._weights[n_tokens] = layer_weight_bytes(self.card, n_tokens)
        head = self._heads.get(outputs)
        if head is None:
            cost = lm_head_cost(self.card, outputs)
            head = self._heads[outputs] = (cost.flops, cost.hbm_bytes)
        return (
            self._linear * n_tokens + self._pair * pairs,
            weights + kv_tokens * self._kv,
            *head,
        )


def iteration_layer_cost(
    card: ModelCard, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
) -> LayerCost:
    """One layer over prefill chunks ``(tokens, context_before)`` and decodes
    ``context`` (cached tokens before the new one)."""
    flops, hbm, _, _ = IterationCost(card).work(prefills, decodes, 0)
    return LayerCost(flops, hbm)


def iteration_cost(
    card: ModelCard, prefills: Sequence[tuple[int, int]], decodes: Sequence[int], outputs: int
) -> tuple[LayerCost, LayerCost]:
    """(cost of one layer, cost of the output head for ``outputs`` sequences)."""
    flops, hbm, head_flops, head_hbm = IterationCost(card).work(prefills, decodes, outputs)
    return LayerCost(flops, hbm), LayerCost(head_flops, head_hbm)
