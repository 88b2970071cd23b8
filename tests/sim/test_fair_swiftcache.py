"""SwiftCache's comparison (``swiftcache.yaml``, seed 002) held to one HBM budget per
GPU and one host budget, counted from what each run held.

vLLM+LMCache and SGLang HiCache lend nothing; SwiftCache's workers lend part of their
KV memory to the master.  The lent HBM is counted against the worker that lends it:
at every point of the run where an engine's counts change (its timeline samples),

* worker GPU: the worker's own blocks (capacity, and in use) plus what the master's
  peer tier may hold (capacity) and holds (bytes in use) on that GPU plus the
  master's streamed KV there, never above the worker's KV memory in the variants
  that lend nothing (the same GPU, model and utilisation);
* master GPU: the master's blocks in use less those its layer stream cache keeps on
  the workers, never above its own KV memory in the variants that lend nothing;
* host: the master's host tier's address space (its allocators' high-water mark)
  never above the 96 GiB every design is given.

The scenario's workload is cut to 3 sessions of 2 turns (the workers' own traces
are unchanged) so that the six variants run in about a second.
"""

from __future__ import annotations

import dataclasses

import pytest

import sim.serving.execute.multi as multi
from hwprofiles import load_profile
from sim.config import load_scenario
from sim.runner import run

GIB = 2**30
# one 16-token block of each model's KV: tokens x layers x KV heads x head dim x (K, V) x 2 B
BLOCK = {
    "master": 16 * 64 * 8 * 128 * 2 * 2,  # Qwen3-32B: 4,194,304 B
    "wlwm": 16 * 32 * 32 * 128 * 2 * 2,  # LWM-Text-1M (Llama-2-7B, no GQA): 8,388,608 B
    "w14b": 16 * 40 * 8 * 128 * 2 * 2,  # Qwen3-14B: 2,621,440 B
}
WORKER_GPU = {"wlwm": "gpu1", "w14b": "gpu2"}


@pytest.fixture(scope="module")
def runs() -> dict:
    """Per variant: the instances, and the samples of every engine's GPU blocks (capacity,
    in use), the master's peer tier per worker GPU (capacity, used) and its streamed
    bytes, taken whenever any engine's timeline samples."""
    cfg = load_scenario("swiftcache")
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, sessions=3, turns=2))
    caught = []
    real = multi.build_instances

    def keep(profile, instances):
        engines = real(profile, instances)
        samples: list[dict] = []

        def snap() -> None:
            row = {}
            for inst, e in zip(instances, engines, strict=True):
                peer = {}
                for t in e.mgr.tiers:
                    if t.name == "peer":
                        peer = {d: (t.capacity[i], t.used[i]) for i, d in enumerate(t.devices)}
                streamed = {}
                region = getattr(e.stream, "region", None)
                if region is not None:
                    streamed = dict(zip(region.tier.devices, region.streamed, strict=True))
                row[inst.name] = (e.mgr.gpu.capacity, e.mgr.gpu.used, peer, streamed)
            samples.append(row)

        for e in engines:

            def sampled(orig=e._sample) -> None:
                orig()
                snap()

            e._sample = sampled
        caught.append((instances, engines, samples))
        return engines

    mp = pytest.MonkeyPatch()
    mp.setattr(multi, "build_instances", keep)
    try:
        res = run(cfg, load_profile("h20-4gpu-nvlink"), None)
    finally:
        mp.undo()
    assert len(caught) == len(res.variants) == 6
    return {v.variant.name: c for v, c in zip(res.variants, caught, strict=True)}


def _kv_blocks(runs, variant: str) -> dict[str, int]:
    """Each instance's GPU KV blocks in a variant that lends nothing."""
    instances, _, samples = runs[variant]
    assert all(i.lend_bytes == 0 and i.stream_bytes == 0 for i in instances)
    return {name: cap for name, (cap, _, _, _) in samples[0].items()}


def test_the_designs_that_lend_nothing_give_each_gpu_the_same_kv_memory(runs):
    lm, hi = _kv_blocks(runs, "vLLM+LMCache"), _kv_blocks(runs, "SGLang HiCache")
    assert lm == hi
    # 9,452 x 8 MiB = 79.29 GB (LWM); 24,097 x 2.5 MiB = 63.17 GB (Qwen3-14B);
    # 6,478 x 4 MiB = 27.17 GB (the master, Qwen3-32B's 65.5 GB of weights beside it)
    assert lm == {"master": 6478, "wlwm": 9452, "w14b": 24097}


def test_lent_hbm_is_counted_against_the_worker_at_every_sample(runs):
    total = {w: n * BLOCK[w] for w, n in _kv_blocks(runs, "vLLM+LMCache").items()}
    lent_seen = 0
    for name, (_, _, samples) in runs.items():
        assert len(samples) > 10, name
        for row in samples:
            _, _, peer, streamed = row["master"]
            for w, gpu in WORKER_GPU.items():
                cap, used, _, _ = row[w]
                peer_cap, peer_used = peer.get(gpu, (0, 0))
                on_worker = streamed.get(gpu, 0)
                # capacity: own + lent (peer tier and stream) is the worker's memory;
                # with layer-major workers a reclaim's blocks join the worker's cache at
                # once, reserved (in use) until its copies end, and leave the master's
                # table only then (lending.py): the overlap is at most those reserved
                # blocks (up to 195 of them here), never blocks both sides can fill
                over = cap * BLOCK[w] + peer_cap + on_worker - total[w]
                if "layer-major" in name:
                    assert over <= used * BLOCK[w], (name, w, row)
                else:
                    assert over <= 0, (name, w, row)
                # in use: the worker's own blocks and the master's bytes on its GPU
                assert used * BLOCK[w] + peer_used + on_worker <= total[w], (name, w, row)
                assert peer_used <= peer_cap, (name, w)
                lent_seen = max(lent_seen, peer_used)
    assert lent_seen > 0  # the master did hold bytes on a worker: the bound was exercised


def test_the_master_uses_no_more_of_its_own_gpu_than_without_lending(runs):
    own = _kv_blocks(runs, "vLLM+LMCache")["master"] * BLOCK["master"]
    for name, (_, _, samples) in runs.items():
        for row in samples:
            _, used, _, streamed = row["master"]
            assert used * BLOCK["master"] - sum(streamed.values()) <= own, (name, row["master"])


def test_every_master_has_the_same_host_budget_and_stays_under_it(runs):
    for name, (instances, engines, _) in runs.items():
        master = engines[[i.role for i in instances].index("master")]
        host = [t for t in master.mgr.tiers if t.name == "cpu"]
        assert len(host) == 1, name  # 96 GiB of host memory, no SSD tier, in every design
        assert sum(host[0].capacity) == pytest.approx(96 * GIB, abs=1), name
        assert sum(a.end for a in host[0].allocators) <= 96 * GIB, name
        assert not any(t.name == "ssd" for t in master.mgr.tiers), name
