"""A finished transfer leaves nothing for the garbage collector.

Every job, stream and in-flight op of a serving run must go when its last
reference does (reference counting), not wait for the cyclic collector: a
cycle per op (say a stream holding a method bound to itself) keeps each
job's transfer, pieces and entries alive until a collection, and makes the
collections the run pays for larger.  Run with the collector off, no
stream, job or in-flight op may be left once the run is over."""

from __future__ import annotations

import gc

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.bench import mooncake_requests
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.online import _InFlight
from sim.serving.execute.transfers import Job, _Stream


def test_transfers_leave_no_cycles() -> None:
    profile, card, block = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B"), 16
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=False)  # fmt: skip
    design = get_design("paged-cpu-ssd", {"cpu_gib": 0.2, "ssd_gib": 2.0})
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        eng = build_engine(profile, card, design, cfg, mooncake_requests(30, block, 0))
        ops = len(eng.run(None).ops)
        kinds = {_Stream, Job, _InFlight}  # by exact type: isinstance would touch every
        left = [o for o in gc.get_objects() if type(o) in kinds]  # object (torch warns)
    finally:
        if was:
            gc.enable()
    assert ops > 300  # many transfers ran: stores, demotions (353 at 30 requests), copies
    assert left == []
