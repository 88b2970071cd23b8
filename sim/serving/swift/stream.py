"""The layer stream cache at run time: what one iteration moves and computes (§3.3).

A SwiftCache master (:mod:`sim.serving.swift.lsc`) admits requests on
``N_RC + N_LSC`` blocks: ``N_RC`` full-layer blocks of its regular cache
(RC) and ``N_LSC`` blocks kept whole on the workers, each with one
single-layer slot of the LSC on the master.  This module says, for one
iteration of a batch, how many bytes each layer streams and how the layer's
work splits around the transfers; :mod:`sim.serving.execute.streaming` puts it on
the clock.

**Which tokens stream.**  The batch's contexts are taken in batch order as
one run of tokens; the regular cache holds the first ``N_RC B`` of them and
the rest live on the workers (the seed does not say which blocks of which
request stay local; any choice moves the same bytes for the same totals).
Per layer:

* *load*: every streamed block that holds KV before the iteration, whole:
  ``ceil(streamed_before / B) x M_block`` bytes (Eq. 1's ``M_block``);
* *store*: the iteration's new KV that lands beyond the regular cache,
  ``new_streamed x`` the KV bytes of one token in one layer.

**Layer split.**  The seed's pipeline hinges on three points of a layer:
the new KV exists after the QKV projection (its store starts then), the
attention needs the layer's loaded KV, and the next layer's load may start
once the attention (and the layer's store) no longer needs the slots, while
the output projection and FFN run.  :func:`split_layer` cuts the engine's
per-layer cost (:func:`sim.serving.policy.costs.iteration_layer_cost`) into these
three parts, so that they sum to it exactly:

* ``qkv``: ``2 P_qkv`` FLOPs per token and the QKV weights, where ``P_qkv =
  h D (H_q + 2 H_kv)`` (the shapes' projection parameters);
* ``attn``: every (query, key) pair's FLOPs and the KV read and written;
* ``ffn``: the rest of the linear FLOPs and weights (output projection,
  MLP, norms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.models import LayerCost, ModelCard, causal_pairs, layer_weight_bytes
from sim.serving.swift.lsc import StreamSizing, size_from_blocks


@dataclass(frozen=True)
class StreamIO:
    """Bytes one layer moves over the workers' links in one iteration.

    Attributes:
        load_bytes: borrowed KV loaded into the LSC before the layer's attention.
        store_bytes: new KV stored back after the layer's QKV.
        streamed_blocks: streamed blocks holding KV before the iteration.
    """

    load_bytes: int
    store_bytes: int
    streamed_blocks: int

    def __bool__(self) -> bool:
        return self.load_bytes > 0 or self.store_bytes > 0


def master_sizing(local_blocks: int, layers: int, stream_blocks: Sequence[int]) -> StreamSizing:
    """Eq. 3-5 for a master with ``local_blocks`` full-layer blocks of its own
    (``K_master = local_blocks x L`` single-layer slots) beside workers holding
    ``stream_blocks`` full-layer master blocks each (Eq. 2's ``K_i``)."""
    return size_from_blocks(local_blocks * layers, list(stream_blocks), layers)


def stream_io(
    card: ModelCard, block_tokens: int, n_rc: int, before_tokens: int, new_tokens: int
) -> StreamIO:
    """One layer's load and store for a batch whose contexts hold
    ``before_tokens`` before the iteration and gain ``new_tokens`` (module
    docstring), with ``n_rc`` blocks of regular cache."""
    if min(block_tokens, 1 + n_rc, 1 + before_tokens, 1 + new_tokens) < 1:
        raise ValueError("block_tokens must be >= 1 and the counts >= 0")
    local = n_rc * block_tokens
    streamed_before = max(0, before_tokens - local)
    blocks = math.ceil(streamed_before / block_tokens)
    new_streamed = min(new_tokens, max(0, before_tokens + new_tokens - local))
    per_token = card.kv_bytes_per_token_layer
    return StreamIO(blocks * block_tokens * per_token, new_streamed * per_token, blocks)


def qkv_params(card: ModelCard) -> int:
    """``P_qkv = h D (H_q + 2 H_kv)``: the QKV projection's parameters of one layer."""
    return card.hidden_size * card.head_dim * (card.q_heads + 2 * card.kv_heads)


def split_layer(
    card: ModelCard, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
) -> tuple[LayerCost, LayerCost, LayerCost]:
    """(qkv, attn, ffn) of one layer over the batch (module docstring); their sum
    is :func:`sim.serving.policy.costs.iteration_layer_cost` of the same batch."""
    n_tokens = sum(t for t, _ in prefills) + len(decodes)
    if n_tokens <= 0:
        raise ValueError("an iteration needs at least one token")
    pairs = sum(causal_pairs(t, c) for t, c in prefills) + sum(c + 1 for c in decodes)
    kv_tokens = sum(c + t for t, c in prefills) + sum(c + 1 for c in decodes)
    linear = 2.0 * card.layer_active_params * n_tokens
    weights = layer_weight_bytes(card, n_tokens)
    q_flops = 2.0 * qkv_params(card) * n_tokens
    q_bytes = float(qkv_params(card) * card.dtype_bytes)
    qkv = LayerCost(q_flops, q_bytes)
    attn = LayerCost(
        2 * 2 * card.q_heads * card.head_dim * pairs, kv_tokens * card.kv_bytes_per_token_layer
    )
    if linear <= q_flops or weights <= q_bytes:
        raise ValueError(f"{card.name}: a layer's parameters do not cover its QKV projection")
    ffn = LayerCost(linear - q_flops, weights - q_bytes)
    return qkv, attn, ffn
