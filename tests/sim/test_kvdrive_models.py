"""Seed 003's other models (Qwen3-8B, Qwen3-14B, Phi-4-mini) in the KVDrive
comparison: their cards against the config.json / model-card values they cite,
the context each may run at (YaRN where the card documents it), and the
equal GPU-cache budgets of the 2D-scaling ablation (Fig. 15)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.limits import check_scenario
from sim.models import get_model
from traces.access import selection_budget

# (name, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
#  max_position_embeddings, context with YaRN per the model card (0 = none))
CARDS = [
    # huggingface.co/Qwen/Qwen3-8B: 36 layers, "32 for Q and 8 for KV", head_dim 128,
    # "32,768 natively and 131,072 tokens with YaRN"; config max_position_embeddings 40960
    ("Qwen3-8B", 36, 32, 8, 128, 40_960, 131_072),
    # huggingface.co/Qwen/Qwen3-14B: 40 layers, "40 for Q and 8 for KV", same context
    ("Qwen3-14B", 40, 40, 8, 128, 40_960, 131_072),
    # huggingface.co/microsoft/Phi-4-mini-instruct config.json: 32 layers, 24 heads,
    # 8 KV heads, hidden 3072 (head_dim 3072 / 24 = 128), max_position_embeddings 131072
    ("Phi-4-mini", 32, 24, 8, 128, 131_072, 0),
]


@pytest.mark.parametrize("name, layers, q, kv, hd, ctx, yarn", CARDS)
def test_cards_carry_what_kvdrive_needs(name, layers, q, kv, hd, ctx, yarn) -> None:
    card = get_model(name)
    assert (card.layers, card.q_heads, card.kv_heads, card.head_dim) == (layers, q, kv, hd)
    assert (card.max_context, card.yarn_context) == (ctx, yarn)
    # seed 003 s9.1: "128K-token context window" for all three: the paper's 120K pair fits
    assert max(card.max_context, card.yarn_context) == 128 * 1024 >= 122_880 + 16


@pytest.mark.parametrize("name", ["Llama-3-8B-1048K", "Qwen3-8B", "Qwen3-14B", "Phi-4-mini"])
def test_all_four_models_have_the_same_kv_entry(name: str) -> None:
    """K and V of 8 KV heads x 128 x 2 bytes = 4,096 B per token per layer: one
    KVDrive entry is the same size for every model of the paper, so the same trace
    moves the same bytes and only compute, weights and layer count differ."""
    assert get_model(name).kv_bytes_per_token_layer == 2 * 8 * 128 * 2 == 4096


def _kvdrive_yaml(tmp_path: Path, model: str, context: int, steps: int) -> Path:
    path = tmp_path / "k.yaml"
    path.write_text(
        "name: k\ndescription: x\nseed: 0\nworkload:\n  kind: kvdrive\n"
        f"  model: {model}\n  context_tokens: {context}\n  batch: 1\n  steps: {steps}\n"
    )
    return path


@pytest.mark.parametrize(
    "model, how", [("Qwen3-8B", "with YaRN"), ("Phi-4-mini", "its config's max_context")]
)
def test_a_kvdrive_run_must_fit_the_models_context(tmp_path, model, how) -> None:
    l20 = load_profile("l20-server")
    check_scenario(load_scenario(_kvdrive_yaml(tmp_path, model, 131_072 - 16, 16)), l20)
    cfg = load_scenario(_kvdrive_yaml(tmp_path, model, 131_072 - 15, 16))
    with pytest.raises(ConfigError, match=rf"131,057 tokens \+ 16 decode steps .*131,072.*{how}"):
        check_scenario(cfg, l20)


@pytest.mark.parametrize("hw", ["l20-server", "h20-server", "rtx4090-ws"])
def test_kvdrive_models_pairs_pass_the_checks(hw: str) -> None:
    """Every model x pair the scenario's header names is accepted on every machine."""
    cfg = load_scenario("kvdrive-models")
    assert cfg.workload.steps == 16
    for model in ("Qwen3-8B", "Phi-4-mini"):
        for context, batch in ((61_440, 8), (92_160, 4), (122_880, 4)):
            w = replace(cfg.workload, model=model, context_tokens=context, batch=batch)
            check_scenario(replace(cfg, workload=w), load_profile(hw))


@pytest.mark.parametrize(
    "name, prefix, budget", [("kvdrive-2d", 61_440 + 32, 959), ("kvdrive-2d-real", 7_680 + 32, 120)]
)
def test_2d_budgets_equal_their_uniform_twins(name: str, prefix: int, budget: int) -> None:
    """Fig. 15 at equal GPU memory: the 2D variant at w gets the uniform window w's
    cache over every lane and layer, w x step budget x entry x batch x layers, to
    within one entry (the MB figure is rounded up to 1 KB).  The step budget by hand:
    the prefix is the context plus the 32 profiling tokens, round(0.0156 x 61,472) =
    round(958.96) = 959 and round(0.0156 x 7,712) = round(120.31) = 120 entries (a
    run's gpu_cache_mb_per_layer for uniform w = 1 at 60K measured 15.7123 MB = 4
    lanes x 959 x 4,096 B)."""
    cfg = load_scenario(name)
    by_name = {v.name: cfg.variant_params(v) for v in cfg.variants}
    assert selection_budget(prefix, 0, 0.0156) == budget
    for w in (1, 2, 4):
        uni, two = by_name[f"uniform w={w}"], by_name[f"2D at w={w}"]
        assert uni.design_params["window"] == w and uni.gpu_cache_mb == 0
        assert "window" not in two.design_params
        assert two.context_tokens + two.profile_steps == prefix
        entry = get_model(two.model).kv_bytes_per_token_layer
        cache = w * budget * entry * two.batch * two.layers
        assert cache <= two.gpu_cache_mb * 1e6 < cache + entry
        # everything else is the same run
        rest = {k: v for k, v in two.__dict__.items() if k not in ("gpu_cache_mb",)}
        assert rest == {k: v for k, v in uni.__dict__.items() if k != "gpu_cache_mb"} | {
            "design_params": {k: v for k, v in uni.design_params.items() if k != "window"}
        }


# what a variant of a comparison may change: the design and how it is run, never a budget
# (pinned_mb: KVDrive's balanced split pins part of its own DRAM tier; baselines pin none;
# table3_cache: Table 3's cache counted over a baseline's selections, moving no bytes)
PER_VARIANT = {
    "design", "design_params", "micro_batches", "prefetch", "calibrate", "pinned_mb",
    "table3_cache",
}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["kvdrive-models", "kvdrive-sens", "kvdrive-fig14", "kvdrive-headline", "kvdrive-steady"],
)
@pytest.mark.parametrize("hw", ["l20-server", "h20-server", "rtx4090-ws"])
def test_new_comparisons_hold_every_variant_to_one_budget(name: str, hw: str) -> None:
    """Equal budgets (seed 003 §9.1, every system on the same machine): one host
    budget, GPU cache, pinned pool, model, pair, steps, SSDs and I/O path."""
    from sim.scenarios.kvdrive_memory import host_budget

    cfg = load_scenario(name)
    profile = load_profile(hw)
    seen = set()
    for v in cfg.variants:
        p = cfg.variant_params(v)
        assert set(dict(v.overrides)) <= PER_VARIANT, v.name
        if p.design.startswith("kvdrive"):
            assert p.pinned_mb == 4000, v.name
        rest = tuple(sorted((k, repr(x)) for k, x in p.__dict__.items() if k not in PER_VARIANT))
        seen.add((host_budget(p, profile), rest))
    assert len(seen) == 1


@pytest.mark.parametrize("w_index, w", [(1, 1), (2, 2), (3, 4)])
def test_alike_lanes_get_the_uniform_window_from_the_knapsack(w_index: int, w: int) -> None:
    """Why 2D equals uniform on the fitted generator (docs/kvdrive-vs-paper.md, Fig. 15):
    16 lanes with the same strictly concave benefit curve over windows 0, 1, 2, 4, 8
    (cost proportional to the window) and a budget of exactly w windows each: greedy
    enlarges level by level (every 0 -> 1 move before any 1 -> 2, ...), so it spends
    the budget on window w for every lane.  One lane with a steeper curve breaks it."""
    from sim.policies.kvdrive.knapsack import greedy_mckp

    windows = np.array([0, 1, 2, 4, 8], dtype=float)
    curve = 100.0 * (1 - np.exp(-windows / 2))  # saved entries: concave in the window
    cost = np.tile(windows * 10.0, (16, 1))  # GPU bytes: proportional to the window
    budget = 16 * w * 10.0 + 1e-6
    choice = greedy_mckp(np.tile(curve, (16, 1)), cost, budget)
    assert choice.tolist() == [w_index] * 16
    steep = np.tile(curve, (16, 1))
    steep[0] = 400.0 * (1 - np.exp(-windows / 8))  # one head whose reuse keeps growing
    assert greedy_mckp(steep, cost, budget).tolist() != [w_index] * 16
