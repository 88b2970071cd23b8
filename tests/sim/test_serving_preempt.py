"""vLLM v1's incremental allocation and RECOMPUTE preemption (issue 15 cause 6),
on a GPU cache of 10 blocks worked out by hand."""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.requests import load_requests, request_table

B = 16
PROFILE = load_profile("h100-2dimm-2ssd")
LLAMA = get_model("Llama-3.1-8B")


def two_requests(preempt: bool):
    """Two 64-token prompts (4 blocks each) with 40 output tokens (104 tokens =
    7 blocks each) at t = 0 on 10 GPU blocks."""
    rows = [
        {"request_id": i, "arrival_s": 0.0, "session_id": -1, "turn": 0, "input_tokens": 64,
         "output_tokens": 40, "block_hashes": [10 * i + j for j in range(1, 5)]}
        for i in range(2)
    ]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    ec = EngineConfig(gpu_blocks=10, block_tokens=B, preempt=preempt)
    eng = build_engine(PROFILE, LLAMA, get_design("gpu-only"), ec, reqs, [])
    rec = eng.run()
    return eng, rec.requests.to_pandas().set_index("request_id"), rec


def test_whole_context_reservation_serialises_the_two() -> None:
    _, r, _ = two_requests(preempt=False)
    # 7 + 7 > 10 blocks: the second waits for the first to finish
    assert r.loc[1, "admit_s"] == pytest.approx(r.loc[0, "finish_s"])


def test_incremental_allocation_admits_both_then_preempts_the_newest() -> None:
    eng, r, rec = two_requests(preempt=True)
    # 4 + 4 prompt blocks fit in 10: both admitted at once
    assert r.loc[0, "admit_s"] == r.loc[1, "admit_s"] == 0.0
    # token 81 (the 17th output) needs a 6th block each: 12 > 10, so the newest
    # (request 1) is preempted once, the oldest never
    assert {s.req.rid: s.req.preemptions for s in eng.seqs} == {0: 0, 1: 1}
    assert all(s.generated == 40 for s in eng.seqs)
    assert rec.timeline.to_pandas()["gpu_blocks_used"].max() <= 10
    # the preempted request's first token came before its preemption and stays
    assert r.loc[1, "first_token_s"] < r.loc[1, "finish_s"]
    # it recomputed its prompt: 64 tokens twice, less what the GPU prefix cache kept
    assert 64 < r.loc[1, "computed_tokens"] <= 128
