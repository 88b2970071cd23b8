"""A request waiting only for GPU blocks that an in-flight store holds is
admitted the instant that store ends (it used to wait for a wake-up that
never came: the engine stalled)."""

from __future__ import annotations

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.requests import load_requests, request_table

B = 16


def test_request_blocked_by_a_store_is_admitted_when_it_ends() -> None:
    """10 GPU blocks, ``paged-cpu`` (offload blocks of 4 GPU blocks).
    Request 0: 64 prompt tokens (4 hashed blocks, one offload block) + 1
    output, 5 blocks.  Request 1, at the same instant: 64 + 40 tokens, 7
    blocks; 5 + 7 > 10, so it waits.  Request 0 finishes after one token,
    while its store still holds its 4 hashed blocks: 10 - 4 = 6 < 7 free, it
    still waits.  The store ends, the 4 blocks become evictable: request 1
    is admitted at that instant."""
    rows = [
        {"request_id": 0, "arrival_s": 0.0, "session_id": -1, "turn": 0, "input_tokens": 64,
         "output_tokens": 1, "block_hashes": [1, 2, 3, 4]},
        {"request_id": 1, "arrival_s": 0.0, "session_id": -1, "turn": 0, "input_tokens": 64,
         "output_tokens": 40, "block_hashes": [11, 12, 13, 14]},
    ]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    ec = EngineConfig(gpu_blocks=10, block_tokens=B)
    profile, card = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B")
    rec = build_engine(profile, card, get_design("paged-cpu"), ec, reqs, []).run()
    r = rec.requests.to_pandas().set_index("request_id")
    ops = rec.ops.to_pandas()
    stores = ops[(ops["tag"] == "store") & (ops["step"] == 0)]
    assert len(stores) >= 1  # request 0's offload block was stored
    store_end = float(stores["end_s"].max())
    assert store_end > r.loc[0, "finish_s"]  # the store outlived its request
    assert r.loc[1, "admit_s"] == pytest.approx(store_end)
    assert np.isfinite(r.loc[1, "finish_s"])
