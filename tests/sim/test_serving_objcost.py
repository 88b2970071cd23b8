"""LMCache's per-object retrieval CPU work (issue 15, cause 1), by hand."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from hwprofiles.loader import load_profile
from sim.config import load_scenario
from sim.limits import _variants
from sim.scenarios.serving import prepare
from sim.serving.designs import get_design
from sim.serving.policy.objcost import retrieval_cpu_s

# one hit of 3 chunks whose layers 0-1 sit in host memory and 2-3 on an SSD (a pool entry)
TIER = SimpleNamespace(devices=("dram0", "ssd0"))
ENTRY = SimpleNamespace(runs=((0, 0, 2), (1, 2, 4)))
LOWER = [(TIER, ENTRY, 0, 3)]


def test_layerwise_kernel_fs_pays_a_lookup_per_layer_object_and_a_file_on_the_ssd() -> None:
    d = get_design("lmcache-lp", {"object_us": 10.0, "file_us": 30.0})
    got = retrieval_cpu_s(d, [LOWER, LOWER], 4, {"ssd0"})
    # 2 requests x 3 chunks per layer: 6 x 10 us in DRAM, 6 x (10 + 30) us on the SSD
    assert got == pytest.approx([60e-6, 60e-6, 240e-6, 240e-6])


def test_passthrough_opens_no_file_and_whole_chunks_are_one_object() -> None:
    pool = get_design("pool", {"object_us": 10.0, "file_us": 30.0})
    assert sum(retrieval_cpu_s(pool, [LOWER], 4, {"ssd0"})) == pytest.approx(12 * 10e-6)
    whole = get_design("lmcache", {"object_us": 10.0, "file_us": 30.0})
    ssd_entry = SimpleNamespace(runs=((1, 0, 4),))  # one chunk object per chunk, in a file
    got = retrieval_cpu_s(whole, [[(TIER, ssd_entry, 0, 3)]], 4, {"ssd0"})
    assert got == pytest.approx([3 * 40e-6, 0.0, 0.0, 0.0])


def test_paged_designs_carry_none() -> None:
    assert retrieval_cpu_s(get_design("paged-cpu-ssd"), [LOWER], 4, {"ssd0"}) == [0.0] * 4


def _ttft(object_us: float) -> tuple[float, float]:
    """Mean TTFT of LMCache at 8K (Llama, everything in host memory) and the
    chunks each query loads (its loaded bytes over a chunk's KV)."""
    cfg = load_scenario("sim/scenarios/unified-pooling.yaml")
    name, p = next((n, p) for n, p in _variants(cfg) if n.startswith("LMCache |"))
    p = dataclasses.replace(
        p, context_tokens=8192, design_params={**p.design_params, "object_us": object_us}
    )
    drive, summarize = prepare(p, load_profile("h100-2dimm-2ssd"), cfg.seed, name)
    s = summarize(drive())
    chunk = p.block_tokens * 32 * 8 * 128 * 2 * 2  # Llama-3.1-8B: 32 layers, 8 KV heads, bf16
    return s["ttft_mean_s"], s["load_gb"] * 1e9 / chunk / s["requests"]


def test_lmcache_ttft_grows_by_its_chunks_times_the_lookup() -> None:
    base, chunks = _ttft(0.0)
    more, _ = _ttft(1000.0)
    # 8K = 32 chunks; a fully hit prompt still computes its last chunk: 31 loaded
    assert chunks == pytest.approx(31)
    # one request in flight, no layer-wise retrieval: 31 chunk objects x 1 ms, serial
    assert more - base == pytest.approx(chunks * 1e-3, rel=1e-6)


@pytest.mark.parametrize("name", ["lmcache", "lmcache-lp", "pool"])
def test_vectorised_sum_equals_the_hit_by_hit_loop_to_the_bit(name: str) -> None:
    """Random hits over several layouts, tiers and block counts: the per-layer
    sums are those of the reference loop exactly (the same additions in the
    same order), not merely close."""
    import random

    from sim.serving.policy.objcost import _reference

    rng = random.Random(7)
    d = get_design(name, {"object_us": 1.37, "file_us": 23.9})
    tiers = [SimpleNamespace(devices=("dram0", "ssd0", "ssd1")), SimpleNamespace(devices=("ssd0",))]
    layouts = [((0, 0, 5), (1, 5, 9), (2, 9, 12)), ((1, 0, 12),), ((2, 0, 6), (0, 6, 12))]
    for _ in range(20):
        lowers = []
        for _r in range(rng.randint(1, 4)):
            lower = []
            for _h in range(rng.randint(0, 30)):
                tier = rng.choice(tiers)
                runs = rng.choice(layouts) if len(tier.devices) == 3 else ((0, 0, 12),)
                lower.append((tier, SimpleNamespace(runs=runs), 0, rng.randint(1, 300)))
            lowers.append(lower)
        want = _reference(d, lowers, 12, {"ssd0", "ssd1"})
        assert retrieval_cpu_s(d, lowers, 12, {"ssd0", "ssd1"}) == want
        assert any(want) or not any(lowers)


@pytest.mark.parametrize("name", ["lmcache", "lmcache-lp", "pool"])
def test_one_layout_sum_equals_the_hit_by_hit_loop_to_the_bit(name: str) -> None:
    """Hits all of one tier and one layout (the per-distinct-cost path) give
    the reference loop's per-layer sums exactly, for layouts over DRAM and
    SSDs, split in runs or whole."""
    import random

    from sim.serving.policy.objcost import _reference

    rng = random.Random(11)
    d = get_design(name, {"object_us": 1.37, "file_us": 23.9})
    tier = SimpleNamespace(devices=("dram0", "ssd0", "ssd1"))
    layouts = [((0, 0, 5), (1, 5, 9), (2, 9, 12)), ((1, 0, 12),), ((2, 0, 6), (0, 6, 12))]
    for runs in layouts:
        entry = SimpleNamespace(runs=runs)
        for _ in range(10):
            lowers = [
                [(tier, entry, 0, rng.randint(1, 300)) for _h in range(rng.randint(1, 40))]
                for _r in range(rng.randint(1, 3))
            ]
            want = _reference(d, lowers, 12, {"ssd0", "ssd1"})
            assert retrieval_cpu_s(d, lowers, 12, {"ssd0", "ssd1"}) == want
            assert any(want)


def test_lmcaches_object_cost_is_the_measured_lookup() -> None:
    """The preset's per-object cost is LMCache's own lookup as measured
    (analysis/measure_lmcache_object.py -> analysis/lmcache_object.csv, min_us of
    the lookup row), and its assumption range is half to twice it."""
    from pathlib import Path

    import pandas as pd

    from sim.registry import SERVING_DESIGNS
    from sim.serving.designs import LMCACHE_OBJECT_US

    csv = pd.read_csv(Path(__file__).parents[2] / "analysis" / "lmcache_object.csv")
    (measured,) = csv.loc[csv["part"] == "lookup", "min_us"]
    assert measured == LMCACHE_OBJECT_US
    (a,) = [a for a in SERVING_DESIGNS.assumptions() if a.param == "object_us"]
    assert (a.low, a.value, a.high) == pytest.approx((measured / 2, measured, 2 * measured))
    assert SERVING_DESIGNS.params("lmcache", {}).object_us == measured
