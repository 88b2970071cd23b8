"""Fig. 9's arithmetic (sim/serving/swift/maxctx.py) against hand computations."""

from __future__ import annotations

import pytest

from sim.models import get_model
from sim.serving.swift.maxctx import (
    GB,
    max_context_rows,
    swift_max_context,
    vllm_max_context,
)

LWM = get_model("LWM-Text-1M")
# By hand, LWM on a 96 GB H20 at 0.9 utilisation:
#   U = 86.4e9 - 6.74e9 x 2 = 72.92e9 bytes
#   KV/token = 32 layers x 2 x 32 heads x 128 x 2 B = 524,288
#   act/token = 2 x (3 x 11008 + 4 x 4096) = 98,816
U = 86.4e9 - 13.48e9
KV, ACT = 524_288, 98_816


def test_vllm_without_chunks_by_hand():
    # n (KV + act) <= U: 72.92e9 / 623,104 = 117,027.6 -> 117,024 (whole 16-token blocks)
    assert int(U // (KV + ACT)) // 16 * 16 == 117_024
    assert vllm_max_context(LWM, 96 * GB, chunk=0) == 117_024


def test_vllm_8k_chunks_by_hand():
    # n KV <= U - 8192 x act: (72.92e9 - 809,500,672) / 524,288 = 137,539.4 -> 137,536
    assert int((U - 8192 * ACT) // KV) // 16 * 16 == 137_536
    assert vllm_max_context(LWM, 96 * GB, chunk=8192) == 137_536
    # a smaller chunk leaves more room for KV; no chunking leaves the least
    assert vllm_max_context(LWM, 96 * GB, chunk=32768) < 137_536
    assert vllm_max_context(LWM, 96 * GB, chunk=0) < vllm_max_context(LWM, 96 * GB, 32768)


def test_swiftcache_without_lending_is_vllm_8k():
    """No worker memory: N_LSC = 0 and the regular cache is vLLM's cache."""
    w = [get_model("Qwen3-8B")]
    assert swift_max_context(LWM, 96 * GB, w, lend_share=0.0) == vllm_max_context(
        LWM, 96 * GB, 8192
    )


def test_swiftcache_lsc_by_hand():
    """Lending: N_LSC = min(sum K_i, K_master), N_RC = floor((K_master - N_LSC) / L)."""
    q8 = get_model("Qwen3-8B")
    # Qwen3-8B worker on 96 GB: U_w = 86.4e9 - 16.4e9 = 70e9; act/token = 2 (3 x 12288
    # + 4 x 4096) = 106,496; KV memory 70e9 - 8192 x 106,496 = 69,127,585,792; half lent.
    lent = (70e9 - 8192 * 106_496) / 2
    m_block = 16 * 2 * 32 * 128 * 2  # one LWM block, one layer: 262,144 B
    k_w = int(lent // (m_block * 32))
    k_master = int((U - 8192 * ACT) // m_block)
    n_lsc = min(k_w, k_master)
    n_rc = (k_master - n_lsc) // 32
    assert swift_max_context(LWM, 96 * GB, [q8], lend_share=0.5) == (n_lsc + n_rc) * 16


def test_rows_mark_models_that_do_not_fit():
    q32 = get_model("Qwen3-32B")  # 65.6 GB of weights: no room on 32 GB
    rows = max_context_rows([q32], [96, 32], {96: [LWM], 32: [LWM]}, 0.5)
    assert rows[1]["vllm_chunk_8k"] == 0 and rows[1]["swiftcache"] == 0
    assert rows[0]["swiftcache"] > rows[0]["vllm_chunk_8k"] > 0
    assert rows[0]["gain_vs_8k"] == pytest.approx(rows[0]["swiftcache"] / rows[0]["vllm_chunk_8k"])
