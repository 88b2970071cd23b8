"""Swarm's index + cache DRAM budget is an assumption a sensitivity run varies
(``workload.dram_budget``, :mod:`sim.scenarios.swarm_budget`).

The Swarm scenarios set 0.2 of the prefix's KV bytes per lane; the range is
0.15-0.3.  By hand, for default.yaml's lane (Qwen3-32B: 8 KV heads x 128 x 2 B
x K and V = 4,096 B per entry and layer; prefix 49,152 + 256 profiling queries =
49,408 entries): 0.2 is 40,475,033 B (40.47 MB, docs/swarm-vs-paper.md), the low
end 0.15 x 49,408 x 4,096 = 30,356,275 B, the high end 60,712,550 B.
"""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.scenarios.swarm import layout_for
from sim.sensitivity import apply, knobs

KNOB = "workload.dram_budget"


def test_the_swarm_scenarios_vary_their_budget_from_015_to_03():
    for name in ("default", "default-matched", "swarm-ablations"):
        (k,) = knobs(load_scenario(name), load_profile("h20-8ssd"), only=[KNOB])
        assert (k.low, k.value, k.high) == (0.15, 0.2, 0.3), name


@pytest.mark.parametrize("budget", ["0.25", "0"])
def test_a_scenario_with_its_own_budget_or_none_is_left_alone(tmp_path, budget):
    path = tmp_path / "s.yaml"
    cache = "0" if budget != "0" else "0.05"
    path.write_text(
        "name: s\ndescription: d\nseed: 0\nworkload:\n  kind: swarm\n"
        f"  dram_cache: {cache}\n  dram_budget: {budget}\n"
        "variants:\n  - {name: a, design: swarm}\n  - {name: b, design: infllm}\n"
    )
    with pytest.raises(ConfigError, match="no assumption 'workload.dram_budget'"):
        knobs(load_scenario(path), load_profile("h20-8ssd"), only=[KNOB])


def test_each_end_is_every_variants_lane_budget_by_hand():
    cfg, h20 = load_scenario("default"), load_profile("h20-8ssd")
    (k,) = knobs(cfg, h20, only=[KNOB])
    want = {0.15: 30_356_275, 0.2: 40_475_033, 0.3: 60_712_550}
    for end, dram_bytes in want.items():
        c, p = apply(cfg, h20, k, end)
        assert p is h20
        for v in c.variants:
            params = c.variant_params(v)
            prefix = params.context_tokens + params.profile_steps
            lay = layout_for(params, h20, len(h20.ssd_names), prefix)
            assert (params.dram_budget, lay.entry_bytes) == (end, 4096), v.name
            assert lay.dram_bytes == dram_bytes, (v.name, end)
