"""LLM model cards (the catalog) and per-layer compute/memory costs."""

from sim.models.card import CATALOG_PATH, ModelCard, ModelError, get_model, load_catalog
from sim.models.cost import (
    ZERO_COST,
    LayerCost,
    causal_pairs,
    decode_layer_cost,
    expected_distinct_experts,
    layer_weight_bytes,
    lm_head_cost,
    prefill_layer_cost,
    roofline_seconds,
)

__all__ = [
    "CATALOG_PATH",
    "ZERO_COST",
    "LayerCost",
    "ModelCard",
    "ModelError",
    "causal_pairs",
    "decode_layer_cost",
    "expected_distinct_experts",
    "get_model",
    "layer_weight_bytes",
    "lm_head_cost",
    "load_catalog",
    "prefill_layer_cost",
    "roofline_seconds",
]
