"""AsyncKV's two legs (sim.serving.policy.asyncload): SSD -> host at arrival, host -> GPU
in the layer-wise forward pass; by hand and as invariants between designs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles.loader import load_profile
from sim.config import load_scenario
from sim.limits import _variants
from sim.scenarios.serving import prepare
from sim.serving.policy.asyncload import split_prefetch
from sim.serving.policy.jobs import Piece
from tests.sim.test_serving_engine import requests, row, run

EXT = np.array([[4096, 100], [8192, 100]], dtype=np.int64)


def test_an_ssd_piece_splits_into_a_read_to_its_bounce_module_and_a_copy_to_the_gpu() -> None:
    pieces = [Piece("ssd0", "gpu0", 200.0, 3, EXT, 100), Piece("dram1", "gpu0", 50.0, 3)]
    arrival, forward = split_prefetch(pieces, {"ssd0", "ssd1"}, {"ssd0": "dram0"}, "gpu0")
    assert [(p.src, p.dst, p.nbytes, p.layer) for p in arrival] == [("ssd0", "dram0", 200.0, 3)]
    assert arrival[0].extents is EXT and arrival[0].length == 100  # the same SSD ranges
    got = [(p.src, p.dst, p.nbytes, p.layer) for p in forward]
    assert got == [("dram0", "gpu0", 200.0, 3), ("dram1", "gpu0", 50.0, 3)]


def test_host_memory_hits_have_nothing_to_prefetch() -> None:
    pieces = [Piece("dram0", "gpu0", 64.0, li) for li in range(4)]
    arrival, forward = split_prefetch(pieces, {"ssd0"}, {"ssd0": "dram0"}, "gpu0")
    assert arrival == [] and forward == pieces


def _ttft(design: str, context: int) -> float:
    cfg = load_scenario("sim/scenarios/unified-pooling.yaml")
    name, p = next((n, p) for n, p in _variants(cfg) if n.startswith("LMCache |"))
    p = dataclasses.replace(p, context_tokens=context, design=design)
    drive, summarize = prepare(p, load_profile("h100-2dimm-2ssd"), cfg.seed, name)
    return summarize(drive())["ttft_mean_s"]


def test_asynckv_with_hits_in_host_memory_and_no_queue_is_layerwise_pipelining() -> None:
    # one request in flight, all of a 4K document in host memory: the prefetch has no
    # SSD bytes and no queueing to hide in, so +AsyncKV must cost what +LP costs
    # (before the split it loaded everything to the GPU first: 45 ms against 31 ms)
    assert _ttft("lmcache-lp-async", 4096) == pytest.approx(_ttft("lmcache-lp", 4096), rel=1e-9)


def test_pool_reads_ssd_hits_into_host_memory_before_the_layerwise_copies() -> None:
    hashes = list(range(1, 65))  # 64 blocks of 16 tokens: 1,024 tokens
    warm = [row(0, 0.0, 1024, hashes)]
    rec = run(
        [row(1, 1.0, 1024, hashes)], "pool", {"cpu_gib": 4.0, "ssd_gib": 4.0},
        prefix_cache=False, warm=warm,
    )  # fmt: skip
    ops = rec.ops.to_pandas()
    load = ops[ops.tag == "load"]
    reads = load[load.kind == "read"]
    copies = load[load.kind == "copy"]
    assert set(reads.dst) <= {"dram0", "dram1"}  # SSD -> its bounce module, not the GPU
    assert set(copies.dst) == {"gpu0"}
    # every SSD byte crosses to the GPU once more, from host memory
    ssd_bytes = reads.bytes.sum()
    assert ssd_bytes > 0
    dram_direct = copies.bytes.sum() - ssd_bytes
    assert dram_direct > 0  # Algorithm 1 put part of the document in host memory
    # the arrival leg ends before the forward pass copies anything ...
    assert copies.start_s.min() >= reads.end_s.max() - 1e-12
    # ... and the copies still pipeline with the compute: layer 0 computes before the
    # last layer's KV is in
    comp = ops[ops.kind == "compute"].sort_values("start_s")
    assert len(comp) == LAYERS
    assert comp.start_s.iloc[0] < copies.end_s.max()
    assert requests(rec).loc[1, "hit_blocks_pool"] == 63  # the last block is computed


LAYERS = 32
