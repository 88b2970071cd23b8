"""The scenarios' own assumed numbers carry ranges a sensitivity run varies
(:mod:`sim.scenarios.scenario_assumptions`): KVDrive's 4 GB pinned buffer (set per
variant), the KVDrive hosts' 8 GB reserved memory, SwiftCache's 64K LWM trace bound.

By hand, on the L20 (100 GiB of DRAM = 107,374,182,400 B): the host budget of
kvdrive-headline is 107,374,182,400 - 8e9 = 99,374,182,400 B as given,
103,374,182,400 B at 4 GB reserved and 91,374,182,400 B at 16.
"""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.scenarios.kvdrive_memory import host_budget
from sim.sensitivity import apply, knobs


def test_kvdrive_ranges_its_pinned_buffer_in_the_variants_that_take_it():
    cfg, l20 = load_scenario("kvdrive-headline"), load_profile("l20-server")
    (k,) = knobs(cfg, l20, only=["workload.pinned_mb"])
    assert (k.low, k.value, k.high) == (2000.0, 4000.0, 8000.0)
    for end in (2000.0, 8000.0):
        c, p = apply(cfg, l20, k, end)
        assert p is l20
        got = {v.name: c.variant_params(v).pinned_mb for v in c.variants}
        # ShadowKV sets no pinned buffer (0): not an assumption of it, left alone
        assert got == {"KVDrive (calibrated)": end, "ShadowKV": 0.0}


def test_kvdrive_reserved_host_memory_moves_the_budget_by_hand():
    cfg, l20 = load_scenario("kvdrive-headline"), load_profile("l20-server")
    (k,) = knobs(cfg, l20, only=["workload.host_reserved_gb"])
    assert (k.low, k.value, k.high) == (4.0, 8.0, 16.0)
    assert host_budget(cfg.variant_params(cfg.variants[0]), l20) == 99_374_182_400
    for end, budget in ((4.0, 103_374_182_400), (16.0, 91_374_182_400)):
        c, _ = apply(cfg, l20, k, end)
        for v in c.variants:
            assert host_budget(c.variant_params(v), l20) == budget, (v.name, end)


def test_swiftcache_lwm_ranges_its_trace_bound_and_other_serving_scenarios_do_not():
    h20 = load_profile("h20-4gpu-nvlink")
    cfg = load_scenario("swiftcache-lwm")
    (k,) = knobs(cfg, h20, only=["workload.max_context"])
    assert (k.low, k.value, k.high) == (48000, 64000, 128000)
    c, _ = apply(cfg, h20, k, 128000)
    assert {c.variant_params(v).max_context for v in c.variants} == {128000}
    with pytest.raises(ConfigError, match="no assumption 'workload.max_context'"):
        knobs(load_scenario("swiftcache"), h20, only=["workload.max_context"])


def test_a_variant_with_another_pinned_buffer_has_made_its_own_choice(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ndescription: d\nseed: 0\nworkload:\n  kind: kvdrive\n  model: Llama-3-8B\n"
        "variants:\n  - {name: a, design: kvdrive, pinned_mb: 2500}\n"
        "  - {name: b, design: shadowkv}\n"
    )
    with pytest.raises(ConfigError, match="no assumption 'workload.pinned_mb'"):
        knobs(load_scenario(path), load_profile("l20-server"), only=["workload.pinned_mb"])


def test_swiftcache_scenarios_range_the_sms_a_copy_holds_and_others_do_not():
    # 16 NCCL CTAs of the H20's 78 SMs = 0.205; 0 (copy engines) to 32 / 78 = 0.41
    h20 = load_profile("h20-4gpu-nvlink")
    for name in ("swiftcache", "swiftcache-leval-lwm", "swiftcache-fig8"):
        (k,) = knobs(load_scenario(name), h20, only=["workload.copy_sm_share"])
        assert (k.low, k.value, k.high) == (0.0, 0.205, 0.41)
        assert round(16 / 78, 3) == k.value and round(32 / 78, 2) == k.high
        c, _ = apply(load_scenario(name), h20, k, 0.0)
        assert {c.variant_params(v).copy_sm_share for v in c.variants} == {0.0}
    with pytest.raises(ConfigError, match="no assumption 'workload.copy_sm_share'"):
        knobs(load_scenario("router"), h20, only=["workload.copy_sm_share"])
