"""Where offloading is the question: the batch's KV against the HBM left after the weights."""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.scenarios.swarm_report import hbm_headroom

# Qwen3-32B (model card / config.json): 64 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes
KV_PER_TOKEN = 64 * 8 * 128 * 2 * 2  # 262,144 B
WEIGHTS = 32.8e9 * 2  # 32.8B parameters in bf16
H20_HBM = 96 * 2**30  # seed 000 section 8.1: 96 GB HBM per H20


@pytest.mark.parametrize(
    ("context", "fits"),
    [(8192, True), (32768, True), (65536, False)],
)
def test_qwen3_32b_batch4_on_h20(context: int, fits: bool) -> None:
    tokens = context + 256 + 16  # prefix + profiling + decode steps, as the scenario counts
    h = hbm_headroom("Qwen3-32B", load_profile("h20-8ssd"), 4, tokens)
    assert h["kv_bytes"] == 4 * tokens * KV_PER_TOKEN
    assert h["hbm_free_bytes"] == pytest.approx(H20_HBM - WEIGHTS)  # 37.48 GB
    assert h["kv_fits_hbm"] is fits
    # the figure: 8K x batch 4 is 8.6 GB of KV (37.5 GB free), so nobody offloads it
    if context == 8192:
        assert 8.5e9 < h["kv_bytes"] < 9.0e9
