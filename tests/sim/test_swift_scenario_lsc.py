"""The swiftcache scenario's main variant builds the master's cache by Eq. 2-5
over the workers' ``stream_share`` (``sim/scenarios/serving_instances.py``).

By hand, Qwen3-32B (64 layers, 8 KV heads of 128, fp16): one single-layer
block of 16 tokens is M_block = 2 x 16 x 8 x 128 x 2 = 65,536 B (Eq. 1), a
full-layer block 64 x 65,536 = 4,194,304 B.  A worker with T blocks keeps
T - floor(0.4 T) - floor(0.1 T), lends floor(0.4 T) to the elastic cache and
holds floor(0.1 T) of its own blocks for the streamed ones: Qwen3-8B's
3,237 blocks x 16 x 147,456 B = 7,637,041,152 B hold K = floor(7,637,041,152
/ 4,194,304) = 1,820 master blocks; Qwen3-14B's 2,409 x 16 x 163,840 B =
6,315,048,960 B hold 1,505 (Eq. 2).  N_LSC = 1,820 + 1,505 = 3,325 (Eq. 4,
below K_master), and the master's 6,478 full-layer blocks leave N_RC =
floor((6,478 x 64 - 3,325) / 64) = floor(6,426.05) = 6,426 (Eq. 5): it
admits on 9,751 blocks, against 6,478 without the LSC.
"""

from __future__ import annotations

import math

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.serving import engine_config, trace_tables
from sim.scenarios.serving_instances import instance_params, make_instances
from sim.serving.execute.multi import build_instances


def test_main_variant_splits_the_master_by_eq_2_to_5():
    cfg = load_scenario("swiftcache")
    p, prof = cfg.workload, load_profile("h20-4gpu-nvlink")
    insts = [b() for b in make_instances(p, prof, cfg.seed, engine_config, trace_tables)]
    master, w8, w14 = insts
    for inst, spec in zip((w8, w14), p.instances[1:], strict=True):
        total = engine_config(instance_params(p, spec), prof).gpu_blocks
        lend, stream = math.floor(0.4 * total), math.floor(0.1 * total)
        assert inst.cfg.gpu_blocks == total - lend - stream
        assert inst.stream_bytes == stream * 16 * inst.card.kv_bytes_per_token
    assert (master.lsc, master.cfg.gpu_blocks) == (True, 6478)
    assert w8.stream_bytes == 3237 * 16 * 147_456
    assert w14.stream_bytes == 2409 * 16 * 163_840
    stream = build_instances(prof, insts)[0].stream
    assert (stream.n_lsc, stream.n_rc) == (1820 + 1505, 6426)
    assert stream.e.mgr.gpu.capacity == 6426 + 3325
