"""The SwiftCache master's layer stream cache at run time (seed 002 §3.2-3.3):
admission on N_RC + N_LSC blocks, the per-layer op sequence and the iteration
time, against hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwprofiles import load_profile
from sim.hw.machine import Machine
from sim.models import get_model, lm_head_cost
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.policy.costs import iteration_layer_cost
from sim.serving.requests import load_requests, request_table
from sim.serving.swift.stream import split_layer, stream_io

PROFILE = load_profile("h20-4gpu-nvlink")
NVLINK = 200e9 * 0.85  # one direction of gpuN.nvlink x efficiency
B = 16
PER_TOKEN_LAYER = 8 * 128 * 2 * 2  # Qwen3 GQA: 8 KV heads x 128 x K,V x fp16 = 4096 B


def _requests(lens: list[tuple[int, int]]):
    rows = [{"request_id": i, "arrival_s": 0.0, "session_id": 0, "turn": i,
             "input_tokens": n_in, "output_tokens": n_out}
            for i, (n_in, n_out) in enumerate(lens)]  # fmt: skip
    return load_requests(request_table(rows, B), B)


def _run(card, local_blocks: int, stream_blocks: list[int], lens, lsc: bool = True):
    """A master on gpu0 with ``local_blocks`` full-layer blocks; workers on gpu1.. holding
    ``stream_blocks`` whole master blocks each; one session of ``lens``."""
    full = B * PER_TOKEN_LAYER * card.layers
    d = get_design("gpu-only")
    cfg = EngineConfig(gpu_blocks=local_blocks, block_tokens=B, gpu="gpu0", prefix_cache=False)
    insts = [Instance("m", card, d, cfg, _requests(lens), role="master", lsc=lsc)]
    for i, k in enumerate(stream_blocks, start=1):
        wcfg = EngineConfig(gpu_blocks=1, block_tokens=B, gpu=f"gpu{i}")
        insts.append(Instance(f"w{i}", card, d, wcfg, [], role="worker", stream_bytes=k * full))
    stats: dict = {}
    return run_instances(PROFILE, insts, stats)["m"], stats


def test_worked_example_admits_25_blocks_not_10():
    # §3.2: L = 10, the master's own 10 full-layer blocks = K_master 100 single-layer slots,
    # workers hold 9 and 8: N_LSC = 17, N_RC = 8 -> 25 blocks = 400 tokens of context.
    card = replace(get_model("Qwen3-8B"), layers=10)
    # each request's context is input + output tokens; 25 blocks hold 400, 26 start at 401
    lens = [(399, 1), (400, 1), (159, 1), (160, 1)]
    rec, stats = _run(card, 10, [9, 8], lens)
    assert (stats["m_lsc"]["n_rc"], stats["m_lsc"]["n_lsc"]) == (8, 17)
    assert rec.requests.column("rejected").to_pylist() == [False, True, False, False]
    # without the LSC the same master holds floor(100 / 10) = 10 blocks = 160 tokens
    rec, _ = _run(card, 10, [9, 8], lens, lsc=False)
    assert rec.requests.column("rejected").to_pylist() == [True, True, False, True]


def test_stream_bytes_by_hand():
    card = get_model("Qwen3-8B")
    # 2 RC blocks = 32 tokens local; 100 tokens before: 68 streamed -> 5 whole blocks loaded;
    # one new token lands beyond the RC -> 4096 B stored per layer
    io = stream_io(card, B, 2, 100, 1)
    assert (io.load_bytes, io.store_bytes, io.streamed_blocks) == (5 * B * 4096, 4096, 5)
    # a prefill of 40 new tokens after 20: 28 of the 60 lie beyond 32 tokens, none before
    io = stream_io(card, B, 2, 20, 40)
    assert (io.load_bytes, io.store_bytes) == (0, 28 * 4096)
    assert not stream_io(card, B, 10, 100, 1)  # all within the RC: nothing streams


def test_split_layer_sums_to_the_engines_layer_cost():
    card = get_model("Qwen3-32B")
    prefills, decodes = [(512, 1000), (64, 0)], [3000, 17]
    parts = split_layer(card, prefills, decodes)
    whole = iteration_layer_cost(card, prefills, decodes)
    assert sum(p.flops for p in parts) == pytest.approx(whole.flops, rel=1e-12)
    assert sum(p.hbm_bytes for p in parts) == pytest.approx(whole.hbm_bytes, rel=1e-12)
    # QKV: 2 x h x D x (H_q + 2 H_kv) FLOPs per token = 2 x 5120 x 128 x (64 + 16) per token
    assert parts[0].flops == pytest.approx(2 * 5120 * 128 * 80 * (512 + 64 + 2))


def test_decode_iteration_pipeline_by_hand():
    # A 3-layer model with little weight per layer, so that a layer's load outlasts its
    # FFN and the pipeline shows.  Master: 100 own blocks = 300 slots; one worker holds 150:
    # N_LSC = 150, N_RC = (300 - 150) / 3 = 50 blocks = 800 tokens local.
    card = replace(get_model("Qwen3-8B"), layers=3, params_total_b=1.365)  # 40M per layer
    rec, stats = _run(card, 100, [150], [(2000, 2)])
    assert (stats["m_lsc"]["n_rc"], stats["m_lsc"]["n_lsc"]) == (50, 150)
    ops = rec.ops.to_pandas()
    dec = ops[ops["step"] == 1].sort_values(["start_s", "op_id"])
    # the decode reads 2000 tokens: 1200 beyond the RC -> 75 blocks of 64 KiB per layer
    ld, st = 75 * B * 4096 / NVLINK, 4096 / NVLINK
    loads = dec[dec["tag"] == "lsc_load"]
    assert loads["bytes"].tolist() == [75 * B * 4096] * 3
    assert (loads["end_s"] - loads["start_s"]).tolist() == pytest.approx([ld] * 3, rel=1e-9)
    assert dec[dec["tag"] == "lsc_store"]["bytes"].tolist() == [4096] * 3
    # per layer: qkv, then store after it; attn after qkv and the load; the next load after
    # attn and store, beside the FFN (seed §3.3)
    seq = [(int(r.layer), r.tag) for r in dec.itertuples() if r.kind == "compute"]
    assert seq == [(li, t) for li in range(3) for t in ("qkv", "attn", "ffn")]
    # hand recurrence from each part's roofline time on the machine (alone on gpu0)
    m = Machine(PROFILE)
    q, a, f = (m.gpu_seconds("gpu0", c.flops, c.hbm_bytes) for c in split_layer(card, [], [2000]))
    last = split_layer(card, [], [2000])[2] + lm_head_cost(card, 1)  # FFN and output head
    f_last = m.gpu_seconds("gpu0", last.flops, last.hbm_bytes)
    t0 = dec["start_s"].min()
    load_end, ffn_end = t0 + ld, t0
    for li in range(3):
        qkv_end = ffn_end + q
        attn_end = max(qkv_end, load_end) + a
        store_end = qkv_end + st
        load_end = max(attn_end, store_end) + ld
        ffn_end = attn_end + (f_last if li == 2 else f)
    assert dec["end_s"].max() == pytest.approx(ffn_end, rel=1e-9)
    # load-bound here (ld > q + f, store within the attention): the iteration is the first
    # layer's load, then per layer attention and max(FFN + next QKV, next load), last FFN
    assert ld > q + f and st < a
    closed = ld + 3 * a + 2 * max(f + q, ld) + f_last
    assert dec["end_s"].max() - t0 == pytest.approx(closed, rel=1e-9)


def test_master_without_streaming_iterations_is_unchanged():
    # a request within the RC never streams: one iteration op, no copies
    card = replace(get_model("Qwen3-8B"), layers=10)
    rec, stats = _run(card, 10, [9, 8], [(100, 2)])
    assert stats["m_lsc"]["iterations"] == 0
    assert set(rec.ops.column("tag").to_pylist()) == {"iteration"}


def test_runtime_max_context_is_the_arithmetic():
    # LWM on a 24 GB GPU beside two Qwen3-8B lending half: Fig. 9's arithmetic gives
    # 21,904 tokens with the LSC and 13,936 for vLLM with 8K chunks; the engine serves a
    # request of exactly that context, refuses one block more, and without the LSC
    # serves only vLLM's
    from sim.scenarios.swiftcache import fig9_workers
    from sim.scenarios.swiftcache_lsc import runtime_max_context

    (row,) = runtime_max_context(PROFILE, ["LWM-Text-1M"], [24], fig9_workers, 0.5).to_pylist()
    assert (row["swiftcache_arith"], row["vllm_chunk_8k"]) == (21_904, 13_936)
    assert (row["served_lsc"], row["served_no_lsc"]) == (21_904, 13_936)
