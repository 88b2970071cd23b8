"""Seed 004's comparison (``unified-pooling.yaml``) held to one GPU KV budget, one host
DRAM budget and one SSD capacity, counted from what each run did.

Every variant (LMCache, +LP, +LP+AsyncKV, the pool and its two ablations) runs
Llama-3.1-8B's Long Doc QA at 32K, where the 8 documents' KV (34.4 GB) is more than
the 20 GB of host memory, so the budgets bite.  Counted from the run:

* host DRAM and SSD: the address space each run handed out on each device (its slot
  allocator's high-water mark: freed slots are reused, so this is the most the
  device ever held, in 4 KiB-aligned layer strides), summed over the DRAM modules
  and over the SSDs, never above seed 004 §III-A's 20 GB and 200 GB;
* GPU: the blocks in use at every point of the run's timeline, never above one cap,
  the same for every design.
"""

from __future__ import annotations

import dataclasses

import pytest

import sim.scenarios.serving as serving
from hwprofiles import load_profile
from sim.config import load_scenario
from sim.models import get_model
from sim.runner import run

GIB = 2**30
HOST, SSD = 18.63 * GIB, 186.26 * GIB  # §III-A: "20 GB of host memory and 200 GB of SSD"
LLAMA_TOKEN = 32 * 8 * 128 * 2 * 2  # layers x KV heads x head dim x (K, V) x bf16 = 131,072 B


@pytest.fixture(scope="module")
def runs():
    """Each variant's summary, records and engine (captured as the runner builds it)."""
    cfg = load_scenario("unified-pooling")
    w = dataclasses.replace(
        cfg.workload, matrix={"model": ["Llama-3.1-8B"], "context_tokens": [32768]}
    )
    engines = []
    real = serving.build_engine

    def keep(*a, **kw):
        engines.append(real(*a, **kw))
        return engines[-1]

    mp = pytest.MonkeyPatch()
    mp.setattr(serving, "build_engine", keep)
    try:
        res = run(dataclasses.replace(cfg, workload=w), load_profile("h100-2dimm-2ssd"), None)
    finally:
        mp.undo()
    assert len(engines) == len(res.variants) == 6
    return [(v.summary, v.records, e) for v, e in zip(res.variants, engines, strict=True)]


def _held(engine, devices: tuple[str, ...]) -> int:
    """Bytes the run's allocators handed out on ``devices`` (high-water marks)."""
    out = 0
    for tier in engine.mgr.tiers:
        for dev, alloc in zip(tier.devices, tier.allocators, strict=True):
            if dev in devices:
                out += alloc.end
    return out


def test_the_workload_overflows_host_memory_so_the_budgets_bite():
    # 8 documents x 32,768 tokens x 131,072 B = 34.36 GB, over 18.63 GiB = 20.0 GB
    assert get_model("Llama-3.1-8B").kv_bytes_per_token_layer * 32 == LLAMA_TOKEN
    assert 8 * 32768 * LLAMA_TOKEN == 34_359_738_368 > HOST


def test_every_design_holds_at_most_the_shared_host_and_ssd_budget(runs):
    profile = load_profile("h100-2dimm-2ssd")
    drams, ssds = tuple(profile.dram_names), tuple(profile.ssd_names)
    for summary, _, engine in runs:
        host, ssd = _held(engine, drams), _held(engine, ssds)
        name = summary["design"]
        assert host <= HOST, (name, host / GIB)
        assert ssd <= SSD, (name, ssd / GIB)
        # every document's chunks are somewhere: all but its last 256-token chunk
        # (recomputed), 127 of 128 chunks x 8 documents x 33,554,432 B = 34.09 GB
        assert host + ssd >= 8 * 127 * 256 * LLAMA_TOKEN, name
        # what the run loaded came from what it held: 34.09 GB, once per query
        assert summary["load_gb"] * 1e9 == pytest.approx(8 * 127 * 256 * LLAMA_TOKEN, rel=1e-9)
    # LMCache fills its 20 GB of host memory and spills the rest: within one 32-layer
    # chunk (33.6 MB, each layer 1 MiB already 4 KiB-aligned) of the budget
    lm = next(e for s, _, e in runs if s["design"] == "LMCache")
    assert HOST - 256 * LLAMA_TOKEN < _held(lm, drams) <= HOST


def test_every_design_uses_the_same_gpu_block_cap(runs):
    # H100 PCIe 80 GiB x 0.9 utilisation less Llama-3.1-8B's weights, in 256-token
    # blocks of 33,554,432 B: (77,309,411,328 - weights) / 33,554,432 = 1,825 blocks
    card = get_model("Llama-3.1-8B")
    want = int((80 * GIB * 0.9 - card.weight_bytes) // (256 * LLAMA_TOKEN))
    assert want == 1825
    for summary, records, _ in runs:
        assert summary["gpu_kv_blocks"] == records.stats["gpu_blocks"] == want, summary["design"]
        used = records.timeline.to_pandas()["gpu_blocks_used"]
        # one 32K request at a time: 128 blocks of prompt, 129 with its output
        assert 128 <= used.max() <= 129 <= want, (summary["design"], used.max())
