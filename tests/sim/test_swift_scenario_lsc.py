"""A master with a separate stream area (``lsc: true``, the workers'
``stream_share``) builds its cache by Eq. 2-5 over that area
(``sim/scenarios/serving_instances.py``): the swiftcache scenario's instances
with each worker lending 40% and holding 10% for streamed blocks (its main
variant now streams from the lent region itself: ``test_swift_region.py``).

By hand, Qwen3-32B (64 layers, 8 KV heads of 128, fp16): one single-layer
block of 16 tokens is M_block = 2 x 16 x 8 x 128 x 2 = 65,536 B (Eq. 1), a
full-layer block 64 x 65,536 = 4,194,304 B.  A worker with T blocks keeps
T - floor(0.4 T) - floor(0.1 T), lends floor(0.4 T) to the elastic cache and
holds floor(0.1 T) of its own blocks for the streamed ones: LWM-Text-1M's
945 blocks (of 9,452) x 16 x 524,288 B = 7,927,234,560 B (7,560 MiB) hold
K = 7,560 MiB / 4 MiB = 1,890 master blocks; Qwen3-14B's 2,409 x 16 x
163,840 B = 6,315,048,960 B hold floor(1,505.6) = 1,505 (Eq. 2).  N_LSC =
1,890 + 1,505 = 3,395 (Eq. 4, below K_master), and the master's 6,478
full-layer blocks leave N_RC = floor((6,478 x 64 - 3,395) / 64) =
floor(6,424.95) = 6,424 (Eq. 5): it admits on 9,819 blocks, against 6,478
without the LSC.
"""

from __future__ import annotations

import dataclasses
import math

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.serving import engine_config, trace_tables
from sim.scenarios.serving_instances import instance_params, make_instances
from sim.serving.execute.multi import build_instances
from sim.serving.requests import KeySpace


def _separate_area(spec: dict) -> dict:
    if spec.get("role") == "worker":
        return {**spec, "lend_share": 0.4, "stream_share": 0.1}
    return {**spec, "lsc": True}


def test_a_separate_stream_area_splits_the_master_by_eq_2_to_5():
    cfg = load_scenario("swiftcache")
    p, prof = cfg.workload, load_profile("h20-4gpu-nvlink")
    p = dataclasses.replace(p, instances=tuple(_separate_area(s) for s in p.instances))
    space = KeySpace()  # one run's key space
    insts = [b(space) for b in make_instances(p, prof, cfg.seed, engine_config, trace_tables)]
    master, wlwm, w14 = insts
    for inst, spec in zip((wlwm, w14), p.instances[1:], strict=True):
        total = engine_config(instance_params(p, spec), prof).gpu_blocks
        lend, stream = math.floor(0.4 * total), math.floor(0.1 * total)
        assert inst.cfg.gpu_blocks == total - lend - stream
        assert inst.stream_bytes == stream * 16 * inst.card.kv_bytes_per_token
    assert (master.lsc, master.cfg.gpu_blocks) == (True, 6478)
    assert (wlwm.card.name, w14.card.name) == ("LWM-Text-1M", "Qwen3-14B")  # §5.1
    assert wlwm.stream_bytes == 945 * 16 * 524_288
    assert w14.stream_bytes == 2409 * 16 * 163_840
    stream = build_instances(prof, insts)[0].stream
    assert (stream.n_lsc, stream.n_rc) == (1890 + 1505, 6424)
    assert stream.e.mgr.gpu.capacity == 6424 + 3395
