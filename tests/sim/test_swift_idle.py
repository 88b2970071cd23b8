"""Algorithm 1's N_i counting *idle* blocks only (``ElasticSpec.n_i = idle``,
seed 002: "When a worker is lightly loaded, it donates idle cache blocks to the
master") against ``free``, which also lends the worker's evictable prefix cache.

Hand trace.  Master and worker are Qwen3-8B with 16-token blocks: one elastic
unit is one block on each side.  The worker keeps 10 blocks and lends 20.  One
session: turn 0 at 0 s sends 150 tokens and generates 10 (ceil(160 / 16) = 10
blocks; at its end the 9 full prompt blocks stay in the worker's prefix cache,
the 10th is freed).  ScaleDown at 10 s looks back 5 s: nothing arrived, so the
longest need is 0 blocks and the worker lends N_i whole units.

* ``free``: N_i = 1 free + 9 evictable = 10 -> lends 10, evicting the 9 cached
  blocks.  Turn 1 at 15 s re-sends the 150 tokens plus 50 new ones (needs
  ceil(210 / 16) = 14 blocks): N_i = 0 -> reclaims 14; no hit, computes 200.
* ``idle``: N_i = 1 free block -> lends 1, the 9 cached blocks stay.  Turn 1:
  N_i = 0 idle blocks < 14 -> reclaims 14 (Algorithm 1 counts the request's
  whole length); hits the 9 cached blocks (144 tokens) and computes
  200 - 144 = 56.
"""

from __future__ import annotations

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.lending import ElasticSpec
from sim.serving.execute.multi import Instance, build_instances, charge_peer_copies, start_lending
from sim.serving.requests import load_requests, request_table

Q8 = get_model("Qwen3-8B")
B = 16


def _run(n_i: str):
    rows = [{"request_id": 0, "arrival_s": 0.0, "session_id": 3, "turn": 0,
             "input_tokens": 150, "output_tokens": 10},
            {"request_id": 1, "arrival_s": 15.0, "session_id": 3, "turn": 1,
             "input_tokens": 200, "output_tokens": 10}]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    design = get_design("gpu-only")
    spec = ElasticSpec(window_s=5.0, check_interval_s=10.0, n_i=n_i)
    insts = [
        Instance("master", Q8, design, EngineConfig(gpu_blocks=64, gpu="gpu0"), [], role="master"),
        Instance("w", Q8, design, EngineConfig(gpu_blocks=10, gpu="gpu1"), reqs, role="worker",
                 lend_bytes=20 * B * Q8.kv_bytes_per_token, elastic=spec),
    ]  # fmt: skip
    engines = build_instances(load_profile("h20-4gpu-nvlink"), insts)
    lend = start_lending(insts, engines)["w"]
    charge_peer_copies(engines)
    for e in engines:
        e.start()
    engines[0].env.run()
    req = engines[1].collect().requests.to_pandas().set_index("request_id")
    return lend.resizes, req.loc[1]


def test_free_lends_the_cached_conversation_and_recomputes_it():
    resizes, turn1 = _run("free")
    assert [(t, d) for t, d, _ in resizes[:2]] == [(10.0, -10), (15.0, 14)]
    assert turn1["hit_blocks_gpu"] == 0 and turn1["computed_tokens"] == 200


def test_idle_lends_only_the_empty_block_and_keeps_the_history():
    resizes, turn1 = _run("idle")
    assert [(t, d) for t, d, _ in resizes[:2]] == [(10.0, -1), (15.0, 14)]
    assert turn1["hit_blocks_gpu"] == 9 and turn1["computed_tokens"] == 200 - 144
