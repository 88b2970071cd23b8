"""Issue 15 cause 7: prompts beyond the model's context are refused (YaRN where
the card documents it), and an open-loop trace beyond the machine's rate is
named before simulating."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.limits import check_scenario, offered_load, overload_warnings
from sim.models import get_model

H100 = load_profile("h100-2dimm-2ssd")


def pooling(**workload):
    cfg = load_scenario("unified-pooling")
    w = dataclasses.replace(cfg.workload, matrix={}, **workload)
    return dataclasses.replace(cfg, workload=w, variants=cfg.variants[:1])


def test_prompt_beyond_the_config_context_is_refused() -> None:
    # Llama-3.1-8B: max_position_embeddings 131,072; its KV still fits the H100
    check_scenario(pooling(model="Llama-3.1-8B", context_tokens=131_072), H100)
    with pytest.raises(ConfigError, match=r"context_tokens: a prompt of 131,073 tokens .*131,072"):
        check_scenario(pooling(model="Llama-3.1-8B", context_tokens=131_073), H100)


def test_yarn_extends_qwen3_where_its_card_says_so() -> None:
    card = get_model("Qwen3-30B-A3B")
    assert (card.max_context, card.yarn_context) == (40_960, 131_072)
    check_scenario(pooling(model="Qwen3-30B-A3B", context_tokens=131_072), H100)
    with pytest.raises(ConfigError, match="with YaRN"):
        check_scenario(pooling(model="Qwen3-30B-A3B", context_tokens=131_073), H100)


def test_offered_load_of_a_prefill_only_trace_by_hand() -> None:
    """Two 1,024-token prompts one second apart, one output token each: the
    load is one prefill's roofline time per second; at 1K tokens on an H100
    Llama-3.1-8B's prefill is compute-bound, so it is its FLOPs / tensor rate."""
    c = get_model("Llama-3.1-8B")
    table = pa.table({"arrival_s": [0.0, 1.0], "input_tokens": [1024, 1024],
                      "output_tokens": [1, 1]})  # fmt: skip
    n = 1024
    flops = c.layers * (
        2 * c.layer_active_params * n + 4 * c.q_heads * c.head_dim * n * (n + 1) / 2
    )
    flops += 2 * c.vocab_size * c.hidden_size  # the output head, once
    tensor = H100.gpu.bf16_tflops * 1e12 * H100.efficiency.tensor
    # upper bound of the bytes: every weight and the prompt's KV once
    hbm = c.params_total_b * 1e9 * c.dtype_bytes + n * c.kv_bytes_per_token
    assert hbm / (H100.gpu.hbm_gbps * 1e9 * H100.efficiency.hbm) < flops / tensor
    assert offered_load(table, c, H100, max_batch=128) == pytest.approx(flops / tensor, rel=1e-9)


def test_overload_is_named_and_a_light_trace_is_not() -> None:
    cfg = load_scenario("unified-pooling")
    light = dict(trace="conversation", model="Llama-3.1-8B", matrix={}, max_inflight=0,
                 sessions=64, turns=1.0, prompt_tokens=2048, max_context=4096)  # fmt: skip
    variants = cfg.variants[:1]
    slow = dataclasses.replace(cfg, workload=dataclasses.replace(
        cfg.workload, session_rate=0.01, **light), variants=variants)  # fmt: skip
    assert overload_warnings(slow, H100) == []
    # 64 prompts of ~2K tokens over ~0.6 s: ~0.1 s of prefill each, ~10x overloaded
    fast = dataclasses.replace(slow, workload=dataclasses.replace(slow.workload,
                               session_rate=100.0))  # fmt: skip
    (line,) = overload_warnings(fast, H100)
    assert "can serve with Llama-3.1-8B" in line and "LMCache" in line
    # a closed-loop client cannot overload
    closed = dataclasses.replace(fast, workload=dataclasses.replace(fast.workload,
                                 max_inflight=1))  # fmt: skip
    assert overload_warnings(closed, H100) == []
    # nor can an offline batch: all 64 within ~6 ms, less than one request's service
    batch = dataclasses.replace(fast, workload=dataclasses.replace(fast.workload,
                                session_rate=10_000.0))  # fmt: skip
    assert overload_warnings(batch, H100) == []


DGX = load_profile("dgx-h100")


@pytest.mark.parametrize(
    ("tp", "ring_bytes", "ring_latency_s"),
    [
        # 32 layers x 2 all-reduces x 2 (tp-1)/tp x 1,024 tokens x 4,096 hidden x 2 B;
        # NCCL's ring latency, 64 x (3.6 + 2 (tp-1) x 0.47) us
        (2, 536_870_912, 64 * 4.54e-6),
        (8, 939_524_096, 64 * 10.18e-6),
    ],
)
def test_a_tensor_parallel_step_pays_its_all_reduces(tp, ring_bytes, ring_latency_s) -> None:
    """Two 1,024-token prompts one second apart on Llama-3.1-8B, one output token
    each, on a DGX H100 (roofline: no measured step): the load is one rank's
    prefill, its 1/tp share of the FLOPs (compute-bound) plus the prefill's ring
    all-reduces alone on gpu0 -> gpu1 (two NVLink ports of 450 GB/s x 0.85 = 382.5
    GB/s, no latency on the links): 1.40358 + 0.29056 ms at tp 2, 2.45627 + 0.65152
    ms at tp 8."""
    from sim.serving.execute.tp import rank_card, rank_profile

    c = get_model("Llama-3.1-8B")
    table = pa.table({"arrival_s": [0.0, 1.0], "input_tokens": [1024, 1024],
                      "output_tokens": [1, 1]})  # fmt: skip
    assert (c.layers, c.hidden_size, c.dtype_bytes) == (32, 4096, 2)
    r, n = rank_card(c, tp), 1024
    flops = r.layers * (
        2 * r.layer_active_params * n + 4 * r.q_heads * r.head_dim * n * (n + 1) / 2
    )
    flops += 2 * r.vocab_size * r.hidden_size  # the rank's share of the output head
    tensor = DGX.gpu.bf16_tflops * 1e12 * DGX.efficiency.tensor
    hbm = r.params_total_b * 1e9 * r.dtype_bytes + n * r.kv_bytes_per_token
    assert hbm / (DGX.gpu.hbm_gbps * 1e9 * DGX.efficiency.hbm) < flops / tensor
    rate = 450e9 * 0.85
    assert (DGX.efficiency.nvlink, rate) == (0.85, 382.5e9)
    allreduce = ring_bytes / rate + ring_latency_s
    assert allreduce == pytest.approx({2: 1.69414e-3, 8: 3.10779e-3}[tp], rel=1e-5)
    rank = rank_profile(DGX, tp)
    got = offered_load(table, c, rank, max_batch=128, tp=tp)
    assert got == pytest.approx(flops / tensor + allreduce, rel=1e-9)
