"""A finished reply's KV reused by the next turn (``EngineConfig.cache_replies``):
vLLM v1 hashes every full block, generated tokens included; SGLang (HiCache)
inserts input plus output at request end.  Hit counts worked out by hand."""

import dataclasses

import pytest

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.requests import load_requests, request_table

PROFILE = load_profile("h20-4gpu-nvlink")
B = 16


def _two_turns(reply_hashes: bool):
    # turn 1: 160 prompt tokens (10 blocks), 49 generated: KV exists for 160 + 48 = 208
    # tokens = 13 full blocks.  Turn 2 re-sends 160 + 49 + 31 = 240 tokens (15 blocks),
    # 1 s later (turn 1's stores have ended by then).
    rows = [
        {"request_id": 0, "arrival_s": 0.0, "session_id": 7, "turn": 1,
         "input_tokens": 160, "output_tokens": 49},
        {"request_id": 1, "arrival_s": 1.0, "session_id": 7, "turn": 2,
         "input_tokens": 240, "output_tokens": 2},
    ]  # fmt: skip
    return load_requests(request_table(rows, B), B, reply_hashes)


def _turn2(replies: str, design: str, prefix_cache: bool) -> dict:
    card = get_model("Qwen3-8B")
    cfg = EngineConfig(gpu_blocks=64, block_tokens=B, prefix_cache=prefix_cache,
                       cache_replies=replies)  # fmt: skip
    # LMCache with chunk_size = the GPU block, so that a 16-token block is stored on its own
    d = get_design(design, {"cpu_gib": 1.0, "chunk_tokens": B} if design != "gpu-only" else {})
    rec = build_engine(PROFILE, card, d, cfg, _two_turns(replies != "off")).run()
    return {r["request_id"]: r for r in rec.requests.to_pylist()}[1]


def test_reply_blocks_hit_on_the_gpu():
    off = _turn2("off", "gpu-only", True)
    gpu = _turn2("gpu", "gpu-only", True)
    assert off["hit_blocks_gpu"] == 10 and off["computed_tokens"] == 240 - 160
    assert gpu["hit_blocks_gpu"] == 13 and gpu["computed_tokens"] == 240 - 208


def test_stored_replies_come_back_from_the_offload_tier():
    # no GPU prefix cache: only what was offloaded can hit
    gpu_only = _turn2("gpu", "lmcache", False)  # hashed on the GPU, not offloaded
    store = _turn2("store", "lmcache", False)
    assert gpu_only["hit_blocks_cpu"] == 10 and gpu_only["computed_tokens"] == 80
    assert store["hit_blocks_cpu"] == 13 and store["computed_tokens"] == 32


def test_reply_hashes_continue_the_session():
    a, b = _two_turns(True)
    assert len(a.hashes) == (160 + 49) // B == 13
    assert list(b.hashes[:13]) == list(a.hashes)  # turn 2's prompt holds turn 1's reply
    plain, _ = _two_turns(False)
    assert len(plain.hashes) == 10
    assert dataclasses.replace(plain).hashes[:10] == a.hashes[:10]


@pytest.mark.parametrize("replies", ["off", "gpu", "store"])
def test_reply_caching_never_changes_turn_one(replies):
    card = get_model("Qwen3-8B")
    cfg = EngineConfig(gpu_blocks=64, block_tokens=B, cache_replies=replies)
    rec = build_engine(PROFILE, card, get_design("gpu-only"), cfg, _two_turns(True)).run()
    first = {r["request_id"]: r for r in rec.requests.to_pylist()}[0]
    assert first["computed_tokens"] == 160
