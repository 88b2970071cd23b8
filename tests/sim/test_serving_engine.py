"""The serving engine on hand-made traces: hit accounting, TTFT by hand, invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.executor import simulate
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.metrics import ServingRecords
from sim.serving.requests import KeySpace, load_requests, request_table

B = 16  # tokens per GPU block
PROFILE = load_profile("h100-2dimm-2ssd")
EFF = PROFILE.efficiency  # the roofline and links run at achievable rates: peak x factor
LLAMA = get_model("Llama-3.1-8B")


def row(rid: int, t: float, tokens: int, hashes: list[int], out: int = 1, session: int = -1):
    return {
        "request_id": rid,
        "arrival_s": t,
        "session_id": session,
        "turn": 0,
        "input_tokens": tokens,
        "output_tokens": out,
        "block_hashes": hashes,
    }


def run(
    rows,
    design: str = "gpu-only",
    params: dict | None = None,
    gpu_blocks: int = 4096,
    prefix_cache: bool = True,
    warm=(),
    **cfg,
) -> ServingRecords:
    space = KeySpace()  # one run: the trace and its warm-up in one key space
    reqs = load_requests(request_table(rows, B), B, space=space)
    pre = load_requests(request_table(list(warm), B), B, space=space) if warm else []
    ec = EngineConfig(gpu_blocks=gpu_blocks, block_tokens=B, prefix_cache=prefix_cache, **cfg)
    d = get_design(design, params or {})
    return build_engine(PROFILE, LLAMA, d, ec, reqs, pre).run()


def requests(rec: ServingRecords):
    return rec.requests.to_pandas().set_index("request_id")


# ---- prefix hits --------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 1, 3, 7])
def test_two_requests_sharing_k_blocks_hit_exactly_k(k: int) -> None:
    first = list(range(1, 9))  # 8 blocks = 128 tokens
    second = first[:k] + [100 + j for j in range(8 - k)]
    rec = run([row(0, 0.0, 128, first), row(1, 1.0, 128, second)])  # 1 s: the first is done
    r = requests(rec)
    assert r.loc[0, "hit_blocks_gpu"] == 0
    assert r.loc[1, "hit_blocks_gpu"] == k
    assert r.loc[1, "computed_tokens"] == 128 - k * B


def test_the_last_prompt_token_is_always_computed() -> None:
    same = list(range(1, 9))
    r = requests(run([row(0, 0.0, 128, same), row(1, 1.0, 128, same)]))
    assert r.loc[1, "hit_blocks_gpu"] == 7  # not 8: vLLM never hits the last block
    assert r.loc[1, "computed_tokens"] == B


def test_hits_below_the_gpu_are_counted_per_tier() -> None:
    # no GPU prefix cache: the 5 shared blocks come back from the CPU tier
    first = list(range(1, 9))
    second = first[:5] + [200, 201, 202]
    rec = run(
        [row(0, 0.0, 128, first), row(1, 1.0, 128, second)],
        design="paged-cpu",
        params={"cpu_gib": 1.0, "block_factor": 1},
        prefix_cache=False,
    )
    r = requests(rec)
    assert (r.loc[1, "hit_blocks_gpu"], r.loc[1, "hit_blocks_cpu"]) == (0, 5)
    loads = rec.ops.to_pandas().query("tag == 'load'")
    assert loads["bytes"].sum() == 5 * B * LLAMA.kv_bytes_per_token  # exactly the hits
    stores = rec.ops.to_pandas().query("tag == 'store'")
    # 8 blocks of the first, then only the 3 new ones of the second (5 are stored already)
    assert stores["bytes"].sum() == 11 * B * LLAMA.kv_bytes_per_token


# ---- TTFT by hand -------------------------------------------------------------------------
def prefill_seconds(tokens: int, before: int) -> float:
    """Roofline time of one prefill of ``tokens`` after ``before`` cached ones, by hand:
    every layer does 2 FLOPs per weight per token plus 4 * q_heads * head_dim per
    (query, key) pair, and reads its weights and the KV once; then the output head."""
    c, g = LLAMA, PROFILE.gpu
    pairs = tokens * before + tokens * (tokens + 1) / 2
    flops = c.layers * (2 * c.layer_active_params * tokens + 4 * c.q_heads * c.head_dim * pairs)
    flops += 2 * c.vocab_size * c.hidden_size
    kv = (before + tokens) * c.kv_bytes_per_token
    hbm = c.layers * c.layer_dense_params * c.dtype_bytes + kv
    hbm += c.vocab_size * c.hidden_size * c.dtype_bytes
    return max(flops / (g.bf16_tflops * 1e12 * EFF.tensor), hbm / (g.hbm_gbps * 1e9 * EFF.hbm))


def test_ttft_of_one_request_on_an_idle_gpu_is_its_prefill() -> None:
    rec = run([row(0, 0.5, 1024, [])])
    r = requests(rec)
    expect = prefill_seconds(1024, 0)
    assert 0.015 < expect < 0.05  # 8B x 1K tokens on an H100 PCIe: compute bound, ~23 ms
    assert r.loc[0, "ttft_s"] == pytest.approx(expect, rel=1e-9)
    assert r.loc[0, "queue_s"] == 0.0


def test_ttft_with_a_cpu_hit_is_the_copy_then_the_rest_of_the_prefill() -> None:
    # the whole 1024-token prompt was offloaded to dram0 before; 4-block offload units
    warm = [row(9, 0.0, 1024, [], session=0)]
    query = row(0, 0.0, 1024, [], session=0)
    rec = run([query], design="paged-cpu", params={"cpu_gib": 4.0}, prefix_cache=False, warm=warm)
    r = requests(rec)
    # 63 blocks hit (the last one is recomputed) in 16 offload units of 4 blocks,
    # so the copies move all 64 blocks: 1024 tokens x 128 KiB over dram0's 10.65 GB/s bus
    assert r.loc[0, "hit_blocks_cpu"] == 63
    copy_s = (
        1024 * LLAMA.kv_bytes_per_token / (PROFILE.dram_module("dram0").gbps * 1e9 * EFF.membus)
    )
    expect = copy_s + prefill_seconds(16, 1008)
    assert r.loc[0, "ttft_s"] == pytest.approx(expect, rel=1e-9)
    assert r.loc[0, "blocked_io_s"] == pytest.approx(copy_s, rel=1e-9)  # nothing overlaps it


def test_layerwise_loading_overlaps_the_copy_with_compute() -> None:
    warm = [row(9, 0.0, 4096, [], session=0)]
    query = [row(0, 0.0, 4096, [], session=0)]
    kw = {"prefix_cache": False, "warm": warm}
    plain = requests(run(query, "paged-cpu", {"cpu_gib": 4.0, "async_load": "off"}, **kw))
    lp = requests(
        run(query, "paged-cpu", {"cpu_gib": 4.0, "async_load": "off", "layerwise": True}, **kw)
    )
    assert lp.loc[0, "ttft_s"] < plain.loc[0, "ttft_s"]
    assert lp.loc[0, "blocked_io_s"] < plain.loc[0, "blocked_io_s"]
    # the same bytes either way
    assert lp.loc[0, "hit_blocks_cpu"] == plain.loc[0, "hit_blocks_cpu"] == 255


# ---- invariants -----------------------------------------------------------------------------
def chat_rows(n: int, seed: int):
    rng = np.random.default_rng(seed)
    rows, t = [], 0.0
    for rid in range(n):
        t += rng.exponential(0.05)
        session = int(rng.integers(0, 4))
        rows.append(row(rid, t, int(rng.integers(64, 2048)), [], int(rng.integers(1, 32)), session))
    return rows


# 0.1 GiB: 25 offload blocks of 4 MiB, a tiny CPU tier; with fewer, most prompts' stores
# (prepared all or nothing, vLLM's prepare_store) would never fit and little would demote
SMALL_TIERS = {"cpu_gib": 0.1, "ssd_gib": 2.0, "block_factor": 2}


def test_same_seed_same_result_and_bytes_conserved() -> None:
    params = SMALL_TIERS
    a = run(chat_rows(40, 1), "paged-cpu-ssd", params, gpu_blocks=400)
    b = run(chat_rows(40, 1), "paged-cpu-ssd", params, gpu_blocks=400)
    pd.testing.assert_frame_equal(a.requests.to_pandas(), b.requests.to_pandas())
    pd.testing.assert_frame_equal(a.ops.to_pandas(), b.ops.to_pandas())
    ops, dev = a.ops.to_pandas(), a.devices.to_pandas().set_index("device")
    for name in PROFILE.ssd_names[:1]:
        reads = ops.query("kind == 'read' and src == @name")["bytes"].sum()
        writes = ops.query("kind == 'write' and dst == @name")["bytes"].sum()
        assert (dev.loc[name, "bytes_read"], dev.loc[name, "bytes_written"]) == (reads, writes)
    assert reads > 0 and writes > 0  # the SSD tier was really used (the CPU tier is tiny)
    r = a.requests.to_pandas()
    assert (
        (r["computed_tokens"] + B * r.filter(like="hit_blocks").sum(axis=1))
        .eq(r["input_tokens"])
        .all()
    )  # every prompt token is either a hit or computed, once


def test_the_issued_plan_replays_open_loop_to_the_same_times() -> None:
    params = SMALL_TIERS
    rec = run(chat_rows(20, 2), "paged-cpu-ssd", params, gpu_blocks=300)
    again = simulate(rec.plan, PROFILE).ops.to_pandas()
    ops = rec.ops.to_pandas()
    assert np.allclose(again["end_s"], ops["end_s"], rtol=1e-9, atol=1e-12)


def test_a_request_larger_than_the_gpu_cache_is_rejected() -> None:
    rec = run([row(0, 0.0, 1024, []), row(1, 0.0, 64, [])], gpu_blocks=32)
    r = requests(rec)
    assert bool(r.loc[0, "rejected"]) and not bool(r.loc[1, "rejected"])
    assert np.isnan(r.loc[0, "ttft_s"]) or r.loc[0, "first_token_s"] != r.loc[0, "first_token_s"]


def test_gpu_capacity_is_never_exceeded() -> None:
    rec = run(chat_rows(60, 3), gpu_blocks=256, max_batch=8)
    tl = rec.timeline.to_pandas()
    assert tl["gpu_blocks_used"].max() <= 256
    assert (tl["running"] + tl["loading"]).max() <= 8


def test_design_params_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown serving design"):
        get_design("nope")
    with pytest.raises(ValueError, match="design_params.cpu_gb: unknown"):
        get_design("pool", {"cpu_gb": 1})
    with pytest.raises(ValueError, match="design_params.io_path"):
        get_design("pool", {"io_path": "ftp"})
    with pytest.raises(ValueError, match="design_params.stores"):
        get_design("paged-cpu", {"stores": "later"})
    assert get_design("paged-cpu").stores == "step" and get_design("lmcache").stores == "eager"
    d = get_design("pool", {"cpu_gib": 2})
    assert dataclasses.asdict(d)["cpu_gib"] == 2.0
    assert get_design("lmcache").io_bytes() == 128 * 1024  # readahead; CPU paid per page
    assert get_design("pool").io_bytes() == 128 * 1024


def test_chunked_prefill_ttft_is_the_sum_of_its_chunks() -> None:
    rec = run([row(0, 0.0, 1024, [])], max_batched_tokens=256)
    expect = sum(prefill_seconds(256, 256 * i) for i in range(4))
    # only the last chunk runs the output head: take the head out of the first three
    c, g = LLAMA, PROFILE.gpu
    head_flops = 2 * c.vocab_size * c.hidden_size
    head_bytes = c.vocab_size * c.hidden_size * c.dtype_bytes
    for i in range(3):
        pairs = 256 * 256 * i + 256 * 257 / 2
        flops = c.layers * (2 * c.layer_active_params * 256 + 4 * c.q_heads * c.head_dim * pairs)
        hbm = c.layers * c.layer_dense_params * c.dtype_bytes + 256 * (i + 1) * c.kv_bytes_per_token
        with_head = max(
            (flops + head_flops) / (g.bf16_tflops * 1e12 * EFF.tensor),
            (hbm + head_bytes) / (g.hbm_gbps * 1e9 * EFF.hbm),
        )
        expect += (
            max(flops / (g.bf16_tflops * 1e12 * EFF.tensor), hbm / (g.hbm_gbps * 1e9 * EFF.hbm))
            - with_head
        )
    assert requests(rec).loc[0, "ttft_s"] == pytest.approx(expect, rel=1e-9)
    assert rec.stats["iterations"] == 4


def ssd_only(profile_name: str) -> ServingRecords:
    warm = [row(9, 0.0, 2048, [], session=0)]
    query = [row(0, 0.0, 2048, [], session=0)]
    profile = load_profile(profile_name)
    space = KeySpace()
    reqs = load_requests(request_table(query, B), B, space=space)
    pre = load_requests(request_table(warm, B), B, space=space)
    d = get_design("paged-ssd", {"ssd_gib": 4.0})
    cfg = EngineConfig(gpu_blocks=4096, block_tokens=B, prefix_cache=False)
    return build_engine(profile, LLAMA, d, cfg, reqs, pre).run()


def test_ssd_loads_go_straight_to_the_gpu_only_with_gpudirect() -> None:
    direct = ssd_only("dgx-spark").plan.to_pandas().query("tag == 'load'")
    assert set(direct["kind"]) == {"read"} and set(direct["dst"]) == {"gpu0"}
    assert set(direct["io_path"]) == {"gds"}
    bounce = ssd_only("h100-2dimm-2ssd").plan.to_pandas().query("tag == 'load'")
    reads, copies = bounce.query("kind == 'read'"), bounce.query("kind == 'copy'")
    assert set(reads["dst"]) == {"dram0"} and set(copies["src"]) == {"dram0"}
    assert reads["bytes"].sum() == copies["bytes"].sum() == direct["bytes"].sum()


def test_transfers_in_flight_never_exceed_the_design_bound() -> None:
    def most_in_flight(bound: int) -> int:
        params = {**SMALL_TIERS, "max_transfers": bound}
        ops = run(chat_rows(40, 4), "paged-cpu-ssd", params, gpu_blocks=400).ops.to_pandas()
        io = ops[ops["kind"] != "compute"]
        # at equal times an end comes before a start: back-to-back ops do not overlap
        events = sorted([(t, 1) for t in io["start_s"]] + [(t, -1) for t in io["end_s"]])
        return int(np.cumsum([d for _, d in events]).max())

    assert most_in_flight(16) > 1  # stores, demotions and loads do overlap ...
    assert most_in_flight(1) == 1  # ... unless the design allows one transfer at a time
