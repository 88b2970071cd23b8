"""Algorithm 1 on the simulation clock (sim/serving/execute/lending.py), against a hand trace.

Master and worker are both Qwen3-8B with 16-token blocks, so one elastic unit is
one block on each side (Eq. 9: equal block sizes, LCM = the block).  The worker
keeps 10 blocks and lends 20 at the start (30 in all).  Its requests, 480
tokens each (30 blocks), arrive at 0 s and 25 s; ScaleDown runs every 10 s over
a 5 s window.  By hand:

* 0 s: ScaleUp, need 30 > 10 own: reclaim 20 (own 30, lent 0);
* 10 s: no request in (5, 10]: lend floor(30 / 1) = 30 (own 0);
* 20 s: nothing left to lend;
* 25 s: ScaleUp, need 30 > 0: reclaim 30;
* 30 s: the 25 s request is in the window, need 30 = own: nothing; the run ends.

Layer-major copies: 10 -> 30 shifts 35 layers x 10 blocks x 64 KiB = 22,937,600 B;
30 -> 0 and 0 -> 30 keep no block, so move nothing.  Block-major: 0 B.
"""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.hw.machine import Machine
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.lending import ElasticSpec
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.requests import load_requests, request_table

Q8 = get_model("Qwen3-8B")
B = 16
LAYER_BLOCK = B * 2 * 8 * 128 * 2  # 65,536 B: one Qwen3-8B block, one layer


def _run(layout: str):
    profile = load_profile("h20-4gpu-nvlink")
    rows = [
        {"request_id": i, "arrival_s": t, "session_id": i, "turn": 0, "input_tokens": 400,
         "output_tokens": 80}
        for i, t in enumerate((0.0, 25.0))
    ]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    design = get_design("gpu-only")
    spec = ElasticSpec(layout=layout, window_s=5.0, check_interval_s=10.0)
    insts = [
        Instance("master", Q8, design, EngineConfig(gpu_blocks=64, gpu="gpu0"), [], role="master"),
        Instance("w", Q8, design, EngineConfig(gpu_blocks=10, gpu="gpu1"), reqs, role="worker",
                 lend_bytes=20 * B * Q8.kv_bytes_per_token, elastic=spec),
    ]  # fmt: skip
    stats: dict = {}
    recs = run_instances(profile, insts, stats)
    return stats["w"], recs["w"].requests.to_pandas(), profile


@pytest.mark.parametrize("layout", ["block-major", "layer-major"])
def test_algorithm1_on_the_clock(layout):
    st, req, _ = _run(layout)
    assert not req["rejected"].any()
    assert st["resizes"] == 3  # +20 at 0 s, -30 at 10 s, +30 at 25 s
    assert st["lent_blocks_end"] == 0
    expect = 35 * 10 * LAYER_BLOCK if layout == "layer-major" else 0
    assert st["resize_copied_gb"] * 1e9 == pytest.approx(expect)


def test_layer_major_reclaim_delays_the_request_by_its_copies():
    """The first request waits for the reclaimed blocks: 35 HBM copies of
    655,360 B, each read and written, one after another on an idle GPU."""
    _, block, _ = _run("block-major")
    _, layer, profile = _run("layer-major")
    m = Machine(profile)
    copy_s = 35 * m.gpu_seconds("gpu1", 0.0, 2.0 * 10 * LAYER_BLOCK)
    assert block["admit_s"][0] == pytest.approx(0.0)
    assert layer["admit_s"][0] == pytest.approx(copy_s, rel=1e-6)
    # the second reclaim (0 -> 30) moves nothing: both layouts admit it on arrival
    assert layer["admit_s"][1] == pytest.approx(25.0) == block["admit_s"][1]


def test_master_table_and_peer_tier_follow_the_worker():
    """Through a run, the master's table and peer tier agree with the worker's cache."""
    from sim.serving.execute.multi import build_instances, start_lending
    from sim.serving.swift.meu import block_bytes

    profile = load_profile("h20-4gpu-nvlink")
    rows = [{"request_id": 0, "arrival_s": 0.0, "session_id": 0, "turn": 0,
             "input_tokens": 400, "output_tokens": 80}]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    design = get_design("gpu-only")
    spec = ElasticSpec(window_s=5.0, check_interval_s=10.0, control_latency_s=0.5)
    insts = [
        Instance("master", Q8, design, EngineConfig(gpu_blocks=64, gpu="gpu0"), [], role="master"),
        Instance("w", Q8, design, EngineConfig(gpu_blocks=10, gpu="gpu1"), reqs, role="worker",
                 lend_bytes=20 * B * Q8.kv_bytes_per_token, elastic=spec),
    ]  # fmt: skip
    engines = build_instances(profile, insts)
    lend = start_lending(insts, engines)["w"]
    assert lend.tier.capacity[lend.dev] == 20 * block_bytes(Q8, B)  # the initial Lend
    for e in engines:
        e.start()
    engines[0].env.run()
    # 0 s: reclaim 20; 10 s: lend all 30 (nothing in the window), applied 0.5 s later
    assert lend.cache.lent_units == 30 and lend.table.slots("gpu1") == 30
    assert lend.tier.capacity[lend.dev] == 30 * block_bytes(Q8, B)
    assert engines[1].mgr.gpu.capacity == 0
