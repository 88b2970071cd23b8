"""FLOPs and HBM bytes of one transformer layer, for prefill and decode.

These functions count work, not time: the GPU model turns a
:class:`LayerCost` into seconds with a roofline (see :func:`roofline_seconds`).

What is counted, per layer (``P`` = a parameter count from the card, see
:mod:`sim.models.card`; ``d`` = ``dtype_bytes``; ``kv`` =
``kv_bytes_per_token_layer``):

* Linear FLOPs: ``2 * layer_active_params`` per token (q/k/v/o projections,
  router and MLP; for MoE only the ``experts_active`` experts the token is
  routed to).
* Attention FLOPs: ``QK^T`` and ``PV`` cost ``2 * 2 * q_heads * head_dim``
  per (query, key) pair.  Softmax, RoPE and norms are ignored.
* Weight bytes: the layer's weights are read from HBM once per step, shared
  by every token of the batch.  For MoE the routed experts read are the
  expected number of *distinct* experts that ``n`` tokens touch when each
  picks ``k`` of ``E`` experts uniformly at random:
  ``E * (1 - (1 - k/E) ** n)`` (= ``k`` for one token, -> ``E`` as ``n``
  grows).  Real routers are skewed, which touches fewer experts.
* KV bytes: the context's KV is read once (no FlashAttention re-reads of K/V
  tiles across query blocks), the new tokens' KV is written once.
* Activations are ignored: their HBM traffic is ``O(tokens * hidden)`` per
  layer, small next to weights in decode and to FLOPs in prefill.
* The embedding lookup and the output head are not part of any layer; see
  :func:`lm_head_cost` for the head.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.models.card import ModelCard


@dataclass(frozen=True)
class LayerCost:
    """Work of one step: floating-point operations and bytes moved in HBM."""

    flops: float
    hbm_bytes: float

    def __add__(self, other: LayerCost) -> LayerCost:
        if not isinstance(other, LayerCost):
            return NotImplemented
        return LayerCost(self.flops + other.flops, self.hbm_bytes + other.hbm_bytes)

    def __mul__(self, factor: float) -> LayerCost:
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            return NotImplemented
        return LayerCost(self.flops * factor, self.hbm_bytes * factor)

    __rmul__ = __mul__


ZERO_COST = LayerCost(0.0, 0.0)


def _check(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def expected_distinct_experts(card: ModelCard, tokens: int) -> float:
    """Expected routed experts touched by ``tokens`` tokens (0 for dense).

    Each token picks ``experts_active`` of ``experts`` uniformly and
    independently: an expert is missed by one token with probability
    ``1 - k/E``, by all ``tokens`` with ``(1 - k/E) ** tokens``.
    """
    if not card.is_moe:
        return 0.0
    _check("tokens", tokens, 0)
    e, k = card.experts, card.experts_active
    return e * (1.0 - (1.0 - k / e) ** tokens)


def layer_weight_bytes(card: ModelCard, tokens: int) -> float:
    """Weight bytes one layer reads from HBM to process ``tokens`` tokens."""
    params = card.layer_dense_params + expected_distinct_experts(card, tokens) * card.expert_params
    return params * card.dtype_bytes


def _attention_flops_per_pair(card: ModelCard) -> int:
    return 2 * 2 * card.q_heads * card.head_dim


def causal_pairs(tokens: int, context_before: int = 0) -> float:
    """(query, key) pairs when ``tokens`` new tokens attend causally.

    Each new token attends to the ``context_before`` cached tokens and to
    itself and the new tokens before it: ``tokens * context_before +
    tokens * (tokens + 1) / 2``.
    """
    return tokens * context_before + tokens * (tokens + 1) / 2


def prefill_layer_cost(
    card: ModelCard, tokens: int, context_before: int = 0, batch: int = 1
) -> LayerCost:
    """One layer processing ``tokens`` new tokens for each of ``batch`` sequences.

    Each sequence already has ``context_before`` tokens of KV cached (a
    chunked prefill or a prefix hit); its new tokens attend to that context
    and causally to each other.  Weights are read once for all
    ``tokens * batch`` tokens; the context's KV is read once and the new KV
    written once.
    """
    _check("tokens", tokens, 1)
    _check("context_before", context_before, 0)
    _check("batch", batch, 1)
    n = tokens * batch
    flops = 2.0 * card.layer_active_params * n
    flops += _attention_flops_per_pair(card) * causal_pairs(tokens, context_before) * batch
    kv = card.kv_bytes_per_token_layer
    hbm = layer_weight_bytes(card, n) + batch * (context_before + tokens) * kv
    return LayerCost(flops, hbm)


def decode_layer_cost(
    card: ModelCard, batch: int, context: int, kv_fraction: float = 1.0
) -> LayerCost:
    """One decode step of one layer for ``batch`` sequences of ``context`` cached tokens.

    ``kv_fraction`` in (0, 1] is the share of the cached KV entries that
    (sparse) attention reads: 0.1 for 10% sparsity.  The new token always
    attends to itself, so each sequence has ``context * kv_fraction + 1``
    (query, key) pairs; only the ``context * kv_fraction`` cached entries
    are read from HBM, and the new token's KV is written.
    """
    _check("batch", batch, 1)
    _check("context", context, 0)
    if not 0.0 < kv_fraction <= 1.0:
        raise ValueError(f"kv_fraction must be in (0, 1], got {kv_fraction}")
    attended = context * kv_fraction
    flops = 2.0 * card.layer_active_params * batch
    flops += _attention_flops_per_pair(card) * (attended + 1) * batch
    kv = card.kv_bytes_per_token_layer
    hbm = layer_weight_bytes(card, batch) + batch * attended * kv + batch * kv
    return LayerCost(flops, hbm)


def lm_head_cost(card: ModelCard, tokens: int) -> LayerCost:
    """The output projection for ``tokens`` tokens (read once, ``vocab x hidden``)."""
    _check("tokens", tokens, 0)
    head = card.vocab_size * card.hidden_size
    return LayerCost(2.0 * head * tokens, float(head * card.dtype_bytes))


def roofline_seconds(cost: LayerCost, bf16_tflops: float, hbm_gbps: float) -> float:
    """Time of ``cost`` on a GPU: the slower of compute and HBM traffic.

    ``bf16_tflops`` is in 10^12 FLOP/s and ``hbm_gbps`` in 10^9 bytes/s, as
    in the hardware profile's ``GpuSpec``.
    """
    if bf16_tflops <= 0 or hbm_gbps <= 0:
        raise ValueError(f"rates must be > 0, got {bf16_tflops} TFLOPS, {hbm_gbps} GB/s")
    return max(cost.flops / (bf16_tflops * 1e12), cost.hbm_bytes / (hbm_gbps * 1e9))


__all__ = [
    "ZERO_COST",
    "LayerCost",
    "causal_pairs",
    "decode_layer_cost",
    "expected_distinct_experts",
    "layer_weight_bytes",
    "lm_head_cost",
    "prefill_layer_cost",
    "roofline_seconds",
]
