"""Model catalog and per-layer costs: seed tables and hand-computed cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.models import (
    ZERO_COST,
    LayerCost,
    ModelCard,
    ModelError,
    causal_pairs,
    decode_layer_cost,
    expected_distinct_experts,
    get_model,
    lm_head_cost,
    load_catalog,
    prefill_layer_cost,
    roofline_seconds,
)

MIB = 2**20
GIB = 2**30

# A tiny dense card whose numbers are easy by hand:
#   attention 2*8*2*(4+2) = 192, MLP 3*8*16 = 384 -> 576 params per layer;
#   embeddings 10*8*2 (untied) = 160; total 2*576 + 160 = 1312;
#   KV per token per layer 2*2*2*2 = 16 bytes; attention 4*4*2 = 32 FLOPs/pair.
TINY = ModelCard(
    name="tiny",
    family="test",
    layers=2,
    hidden_size=8,
    q_heads=4,
    kv_heads=2,
    head_dim=2,
    intermediate_size=16,
    vocab_size=10,
    params_total_b=1312e-9,
    params_active_b=1312e-9,
    max_context=1024,
    source="made up",
)

# A tiny MoE card: 8 experts of 3*8*4 = 96 params, 2 active per token;
#   dense part per layer = attention 192 + router 8*8 = 256;
#   layer total 256 + 8*96 = 1024, active 256 + 2*96 = 448;
#   total 2*1024 + 160 = 2208.
TINY_MOE = dataclasses.replace(
    TINY,
    name="tiny-moe",
    intermediate_size=4,
    experts=8,
    experts_active=2,
    params_total_b=2208e-9,
    params_active_b=1056e-9,
)

EXPECTED_MODELS = [
    "Llama-3.2-1B",
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Llama-3-8B-1048K",
    "LWM-Text-1M",
    "Qwen3-8B",
    "Qwen3-14B",
    "Qwen3-32B",
    "Qwen3-30B-A3B",
    "Qwen3-235B-A22B",
    "GPT-OSS-20B",
    "GPT-OSS-120B",
    "Phi-4-mini",
    "DeepSeek-R1-Distill-Qwen-32B",
]


# ---- the catalog against the seeds ---------------------------------------


@pytest.mark.parametrize(
    ("name", "layers", "kv_heads", "mib_per_token"),
    [
        ("LWM-Text-1M", 32, 32, 0.50),
        ("Qwen3-8B", 36, 8, 0.141),
        ("Qwen3-14B", 40, 8, 0.156),
        ("Qwen3-32B", 64, 8, 0.25),
    ],
)
def test_swiftcache_table2_kv_per_token(
    name: str, layers: int, kv_heads: int, mib_per_token: float
) -> None:
    """Seed 002 Table 2 (fp16): its "MB" is MiB; decimal MB misses Qwen3-8B."""
    card = get_model(name)
    assert (card.layers, card.kv_heads, card.head_dim, card.dtype_bytes) == (
        layers,
        kv_heads,
        128,
        2,
    )
    assert round(card.kv_bytes_per_token / MIB, 3) == pytest.approx(mib_per_token)
    if name == "Qwen3-8B":
        assert round(card.kv_bytes_per_token / 1e6, 3) != mib_per_token  # 0.147


@pytest.mark.parametrize(
    ("name", "hidden", "group"),
    [
        ("Qwen3-14B", 5120, 5),
        ("Qwen3-32B", 5120, 8),
        ("Llama-3.1-70B", 8192, 8),
        ("GPT-OSS-120B", 2880, 8),
        ("Qwen3-235B-A22B", 4096, 16),
    ],
)
def test_swarm_table2_hidden_and_group(name: str, hidden: int, group: int) -> None:
    card = get_model(name)
    assert (card.hidden_size, card.gqa_group) == (hidden, group)


def test_llama70b_kv_matches_hf_table_cited_by_seed004() -> None:
    """Seed 004 ref [9]: Llama 3.1 70B fp16 KV is 0.313 GB for 1K tokens (GiB, 1024)."""
    card = get_model("Llama-3.1-70B")
    # 80 layers * 8 KV heads * 128 * 2 (K, V) * 2 bytes * 1024 tokens = 0.3125 GiB
    assert card.kv_bytes_per_token * 1024 / GIB == 0.3125


@pytest.mark.parametrize(
    ("name", "gb"), [("Llama-3.2-1B", 2.47), ("DeepSeek-R1-Distill-Qwen-32B", 65.5)]
)
def test_seed001_checkpoint_sizes(name: str, gb: float) -> None:
    assert get_model(name).weight_bytes / 1e9 == pytest.approx(gb, abs=0.01 * gb)


def test_catalog_loads_every_model_in_file_order() -> None:
    cards = load_catalog()
    assert list(cards) == EXPECTED_MODELS
    for card in cards.values():
        assert card.q_heads % card.kv_heads == 0
        assert card.params_active_b <= card.params_total_b
        assert card.is_moe == (card.experts > 0)
        assert card.source


def test_get_model_is_case_insensitive() -> None:
    assert get_model("qwen3-30b-a3b") is get_model("Qwen3-30B-A3B")


@pytest.mark.parametrize("name", EXPECTED_MODELS)
def test_shape_derivation_agrees_with_params_total(name: str) -> None:
    """Per-layer params from the shapes, times layers, plus embeddings ~ params_total."""
    card = get_model(name)
    from_shapes = card.shape_layer_params * card.layers + card.embedding_params
    assert from_shapes == pytest.approx(card.params_total_b * 1e9, rel=0.02)
    assert card.layer_params * card.layers + card.embedding_params == pytest.approx(
        card.params_total_b * 1e9
    )


@pytest.mark.parametrize("name", [n for n in EXPECTED_MODELS if get_model(n).is_moe])
def test_moe_active_params_agree_with_vendor_figure(name: str) -> None:
    """Derived active params match the card under either embedding convention."""
    card = get_model(name)
    per_layers = card.layer_active_params * card.layers
    head_only = per_layers + card.vocab_size * card.hidden_size  # OpenAI's convention
    both = per_layers + card.embedding_params  # Qwen's convention
    reported = card.params_active_b * 1e9
    assert min(abs(head_only - reported), abs(both - reported)) <= 0.05 * reported


# ---- costs, by hand ------------------------------------------------------


def test_tiny_card_derivations() -> None:
    assert TINY.embedding_params == 160
    assert TINY.layer_params == pytest.approx(576)
    assert TINY.shape_layer_params == 576
    assert TINY.kv_bytes_per_token_layer == 16
    assert TINY.kv_bytes_per_token == 32
    assert TINY_MOE.expert_params == 96
    assert TINY_MOE.layer_dense_params == pytest.approx(256)
    assert TINY_MOE.layer_active_params == pytest.approx(448)
    assert TINY_MOE.shape_layer_params == 1024


def test_decode_cost_by_hand() -> None:
    cost = decode_layer_cost(TINY, batch=3, context=100)
    # linear 2*576*3 = 3456; attention 32 * (100 + 1) * 3 = 9696
    assert cost.flops == pytest.approx(13152)
    # weights 576*2 = 1152; KV read 3*100*16 = 4800; KV written 3*16 = 48
    assert cost.hbm_bytes == pytest.approx(6000)
    sparse = decode_layer_cost(TINY, batch=3, context=100, kv_fraction=0.25)
    assert sparse.flops == pytest.approx(3456 + 32 * 26 * 3)
    assert sparse.hbm_bytes == pytest.approx(1152 + 1200 + 48)


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5, 1.0])
def test_decode_kv_term_scales_linearly_with_kv_fraction(fraction: float) -> None:
    cost = decode_layer_cost(TINY, batch=3, context=100, kv_fraction=fraction)
    assert cost.hbm_bytes - 1152 - 48 == pytest.approx(fraction * 4800)


def test_decode_rejects_bad_kv_fraction() -> None:
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="kv_fraction"):
            decode_layer_cost(TINY, batch=1, context=10, kv_fraction=bad)


def test_prefill_causal_pairs() -> None:
    assert causal_pairs(4) == 10
    assert causal_pairs(4, context_before=6) == 34
    assert causal_pairs(1, context_before=6) == 7  # a decode step: 6 cached + itself


def test_prefill_cost_by_hand() -> None:
    cost = prefill_layer_cost(TINY, tokens=4, context_before=6, batch=2)
    # linear 2*576*(4*2) = 9216; attention 32 * 34 * 2 = 2176
    assert cost.flops == pytest.approx(11392)
    # weights 1152; KV read 2*6*16 = 192; KV written 2*4*16 = 128
    assert cost.hbm_bytes == pytest.approx(1472)


def test_one_token_prefill_equals_decode_step() -> None:
    assert prefill_layer_cost(TINY, tokens=1, context_before=50, batch=2) == pytest.approx(
        decode_layer_cost(TINY, batch=2, context=50)
    )


def test_expected_distinct_experts() -> None:
    assert expected_distinct_experts(TINY, 5) == 0.0
    assert expected_distinct_experts(TINY_MOE, 1) == pytest.approx(2)
    assert expected_distinct_experts(TINY_MOE, 2) == pytest.approx(8 * (1 - 0.75**2))
    values = [expected_distinct_experts(TINY_MOE, b) for b in (1, 2, 4, 16, 64)]
    assert values == sorted(values)
    assert expected_distinct_experts(TINY_MOE, 64) == pytest.approx(8, rel=1e-6)
    qwen = get_model("Qwen3-30B-A3B")
    assert expected_distinct_experts(qwen, 1) == pytest.approx(8)
    assert expected_distinct_experts(qwen, 2000) == pytest.approx(128, rel=1e-6)


def test_moe_decode_cost_by_hand() -> None:
    cost = decode_layer_cost(TINY_MOE, batch=2, context=0)
    # weights (256 + 3.5 experts * 96) * 2 bytes = 1184; KV written 2*16 = 32
    assert cost.hbm_bytes == pytest.approx(1216)
    # linear 2*448*2 = 1792; attention 32 * 1 * 2 = 64
    assert cost.flops == pytest.approx(1856)


def test_layer_cost_arithmetic() -> None:
    a, b = LayerCost(1.0, 2.0), LayerCost(3.0, 4.0)
    assert (a + b) * 2 == LayerCost(8.0, 12.0)
    assert 2 * a == a * 2 == LayerCost(2.0, 4.0)
    assert sum([a, b, a], ZERO_COST) == LayerCost(5.0, 8.0)


def test_lm_head_and_roofline() -> None:
    head = lm_head_cost(TINY, tokens=3)
    assert head == LayerCost(2 * 80 * 3, 160)
    # 1e12 FLOPs at 100 TFLOPS = 10 ms; 1e9 bytes at 1000 GB/s = 1 ms
    assert roofline_seconds(LayerCost(1e12, 1e9), 100, 1000) == pytest.approx(0.01)
    assert roofline_seconds(LayerCost(1e9, 1e10), 100, 1000) == pytest.approx(0.01)


# ---- loader errors -------------------------------------------------------


def _entry(**changes: Any) -> dict[str, Any]:
    entry = {f.name: getattr(TINY, f.name) for f in dataclasses.fields(TINY)}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def _write(tmp_path: Path, *entries: dict[str, Any]) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"models": list(entries)}, sort_keys=False))
    return path


def _line_of(path: Path, text: str, occurrence: int = 1) -> int:
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return hits[occurrence - 1]


def _error(path: Path) -> str:
    with pytest.raises(ModelError) as info:
        load_catalog(path)
    message = str(info.value)
    assert "\n" not in message
    assert path.name in message
    return message


def test_valid_tmp_catalog_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(), _entry(name="tiny-2"))
    assert list(load_catalog(path)) == ["tiny", "tiny-2"]


def test_error_unknown_key(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(num_layers=3))
    message = _error(path)
    assert f":{_line_of(path, 'num_layers')}: models[0].num_layers: unknown key" in message


def test_error_duplicate_name(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(), _entry(name="TINY"))
    message = _error(path)
    assert f":{_line_of(path, 'name: TINY')}: models[1].name: duplicate" in message


def test_error_missing_field(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(layers=None))
    assert "models[0]: missing required key 'layers'" in _error(path)


def test_error_heads_not_divisible(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(), _entry(name="odd", q_heads=5))
    message = _error(path)
    assert f":{_line_of(path, 'kv_heads', 2)}: models[1].kv_heads:" in message
    assert "not divisible" in message


def test_error_non_positive_and_moe_fields(tmp_path: Path) -> None:
    assert "models[0].layers: must be > 0" in _error(_write(tmp_path, _entry(layers=0)))
    bad_moe = _entry(experts=4, experts_active=5)
    assert "models[0].experts_active" in _error(_write(tmp_path, bad_moe))


def test_error_unknown_model_name(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry())
    with pytest.raises(ModelError) as info:
        get_model("nope", path)
    message = str(info.value)
    assert "\n" not in message and path.name in message
    assert "models: unknown model 'nope' (known: tiny)" in message
    with pytest.raises(ModelError, match="unknown model 'nope'.*Qwen3-8B"):
        get_model("nope")
