"""LMCache's write-through runs on the disk backend's own thread, not the store path's.

LMCache's storage manager hands each backend its puts (``batched_submit_put_task``):
the CPU backend keeps the object at once, the local disk backend writes it on its own
event-loop thread (``local_disk_backend.py``: ``asyncio.run_coroutine_threadsafe``).
So a request's GPU -> host store never queues behind an earlier request's host -> SSD
write.  Two requests of 4,096 tokens on h100-2dimm-2ssd (Llama-3.1-8B, 256-token
chunks, buffered kernel_fs writes: each chunk's write-through takes far longer than its
GPU copy): the second request's stores start while the first's write-through is still
writing, which a single store worker (every store FCFS) could not do.
"""

from __future__ import annotations

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.requests import Request


def test_a_store_does_not_wait_for_an_earlier_write_through():
    profile, card = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B")
    design = get_design("lmcache", {"cpu_gib": 8.0, "ssd_gib": 16.0})
    reqs = [Request(0, 0.0, 0, 0, 4096, 2, tuple(range(1, 17))),
            Request(1, 0.15, 1, 0, 4096, 2, tuple(range(101, 117)))]  # fmt: skip
    cfg = EngineConfig(gpu_blocks=2000, block_tokens=256, keep_plan=True)
    rec = build_engine(profile, card, design, cfg, reqs).run()
    ops = rec.ops.to_pandas()
    gpu_stores = ops[(ops["tag"] == "store") & (ops["src"] == "gpu0")]
    writes = ops[(ops["tag"] == "store") & (ops["kind"] == "write")]
    assert len(gpu_stores) > 0 and len(writes) > 0
    first_wt_end = writes["end_s"].max()
    # the first request's store: one 512 MiB GPU copy (~31 ms), then its write-through,
    # one 512 MiB buffered write (~0.35 s, CPU-bound on one core); the second request
    # arrives 0.15 s in and prefills (~0.1 s) while that write is under way
    first_wt = writes.sort_values("start_s").iloc[0]
    second = gpu_stores[gpu_stores["start_s"] > 0.15]
    assert len(second) == 1
    # its GPU -> host copy starts at its prefill's end, inside the first's write-through
    assert first_wt["start_s"] < second["start_s"].iloc[0] < first_wt["end_s"]
    # and takes a GPU copy's time, not the rest of an SSD write
    assert second["end_s"].iloc[0] - second["start_s"].iloc[0] < 0.05
    assert first_wt_end > second["end_s"].iloc[0]
