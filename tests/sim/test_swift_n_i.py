"""Algorithm 1's N_i read two ways (sim/serving/execute/lending.py ``ElasticSpec.n_i``),
on a hand trace.  Master and worker are Qwen3-8B with 16-token blocks (one
elastic unit = one block each side).  The worker keeps 10 blocks and lends 20;
two sessions each send one request of 150 + 10 tokens (10 blocks) at 0 s.

* ``own`` (as written: N_i = the worker's 10 blocks): each request needs 10 <= 10,
  no ScaleUp; both cannot hold 20 blocks, so the second is admitted only when
  the first finishes.
* ``free`` (N_i = blocks not committed): the first sees 10 free; the second sees
  10 - 10 (the first is queued) = 0 and reclaims 10 blocks: both run in the
  same batch and get their first token together.

Both are done well before 10 s, when ScaleDown (window 5 s, empty) lends the
idle blocks: one resize with ``own``, two with ``free``.
"""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.lending import ElasticSpec
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.requests import load_requests, request_table

Q8 = get_model("Qwen3-8B")
B = 16


def _run(n_i: str):
    rows = [{"request_id": i, "arrival_s": 0.0, "session_id": i, "turn": 0,
             "input_tokens": 150, "output_tokens": 10} for i in (0, 1)]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    design = get_design("gpu-only")
    spec = ElasticSpec(window_s=5.0, check_interval_s=10.0, n_i=n_i)
    insts = [
        Instance("master", Q8, design, EngineConfig(gpu_blocks=64, gpu="gpu0"), [], role="master"),
        Instance("w", Q8, design, EngineConfig(gpu_blocks=10, gpu="gpu1"), reqs, role="worker",
                 lend_bytes=20 * B * Q8.kv_bytes_per_token, elastic=spec),
    ]  # fmt: skip
    stats: dict = {}
    recs = run_instances(load_profile("h20-4gpu-nvlink"), insts, stats)
    req = recs["w"].requests.to_pandas().set_index("request_id")
    return stats["w"], req


def test_own_serialises_the_two_requests():
    st, req = _run("own")
    assert st["resizes"] == 1  # the 10 s ScaleDown only
    assert req.loc[1, "admit_s"] == pytest.approx(req.loc[0, "finish_s"])
    assert req.loc[1, "first_token_s"] > req.loc[0, "finish_s"]


def test_free_reclaims_for_the_concurrent_request():
    st, req = _run("free")
    assert st["resizes"] == 2  # the reclaim at 0 s, the 10 s ScaleDown
    assert req.loc[1, "admit_s"] == req.loc[0, "admit_s"] == 0.0
    assert req.loc[1, "first_token_s"] == pytest.approx(req.loc[0, "first_token_s"])


def test_free_scale_down_keeps_the_blocks_in_use():
    # pure Algorithm 1: 30 blocks own, 12 of them free, the window's longest request
    # 80 tokens (5 blocks): N_i = 12 lends 12 - 5 = 7; N_i = own (30) would lend 25
    from sim.serving.swift.elastic import ElasticCache, ElasticParams

    def cache():
        c = ElasticCache(ElasticParams(30, B, 1, 1, window_s=60.0))
        c.on_request(0.0, 80)
        return c

    assert cache().scale_down(10.0, 12).worker_blocks == -7
    assert cache().scale_down(10.0).worker_blocks == -25
