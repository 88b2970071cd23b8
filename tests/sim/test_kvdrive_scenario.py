"""The kvdrive workload end to end: plan, simulate, and what the records measure."""

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.executor import simulate
from sim.scenarios.kvdrive import plan_kvdrive
from sim.scenarios.kvdrive_kind import KVDriveParams

SMALL = dict(context_tokens=2048, batch=2, steps=2, profile_steps=16, layers=2, trace="positional")


@pytest.fixture(scope="module")
def l20():
    return load_profile("l20-server")


def _run(profile, **kw):
    p = KVDriveParams(**{**SMALL, **kw})
    splan = plan_kvdrive(p, profile, seed=0)
    return p, splan, simulate(splan.plan, profile)


def test_ssd_bytes_measured_equal_the_decisions(l20):
    p, splan, rec = _run(l20, micro_batches=2)
    decided = sum(
        d.read_bytes * (p.layers // p.layers_modeled)
        for lane in splan.lanes.values()
        for d in lane.decisions
    )
    ops = rec.ops.to_pandas()
    assert int(ops.loc[ops["kind"] == "read", "bytes"].sum()) == decided
    # one select, lookup and (when anything misses) copy per micro-batch and group
    assert (ops["tag"] == "select").sum() == p.micro_batches * p.steps * p.layers


def test_flexgen_reads_every_layers_whole_kv_each_step(l20):
    p, splan, rec = _run(l20, design="flexgen")
    entry = splan.layout.entry_bytes
    prefix = p.context_tokens + p.profile_steps
    whole = sum(p.batch * p.layers * (prefix + t + 1) * entry for t in range(p.steps))
    ops = rec.ops.to_pandas()
    assert int(ops.loc[ops["kind"] == "read", "bytes"].sum()) == whole


def test_sfc_and_sequential_move_the_same_bytes(l20):
    reads = []
    for mb in (1, 2):
        _, _, rec = _run(l20, micro_batches=mb)
        ops = rec.ops.to_pandas()
        reads.append((int(ops.loc[ops["kind"] == "read", "bytes"].sum()), ops["bytes"].sum()))
    assert reads[0] == reads[1]


def test_the_kvdrive_scenario_loads_and_names_bad_keys(tmp_path):
    cfg = load_scenario("kvdrive")
    assert cfg.workload.kind == "kvdrive" and cfg.workload.micro_batches >= 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: b\ndescription: d\nseed: 0\nworkload:\n  kind: kvdrive\n  micro_batches: 0\n"
    )
    with pytest.raises(ValueError, match="micro_batches"):
        load_scenario(str(bad))
    assert np.isfinite(cfg.workload.sparsity)


@pytest.mark.parametrize("design", ["kvdrive", "quest"])
def test_matched_recall_raises_the_budget_to_the_target(l20, design):
    from dataclasses import replace

    from sim.scenarios.matched import mean_recall
    from sim.scenarios.swarm import build_lanes, replay_lane

    kw = dict(sparsity=0.05, design=design, match_recall=0.6, match_step=0.25)
    p, splan, _ = _run(l20, **kw)
    info = splan.info
    assert info["match_reached"] and info["match_recall"] >= 0.6
    # the plan's own lanes, replayed at the scale found, give the search's recall
    assert mean_recall(splan.lanes.values()) == pytest.approx(info["match_recall"])
    assert splan.layout.budget_scale == info["match_scale"]
    if info["match_scale"] > 0.25:  # one grid step less falls short of the target
        _, layout, built = build_lanes(p, l20, 0)
        lower = replace(layout, budget_scale=info["match_scale"] - 0.25)
        assert mean_recall(replay_lane(b, p, lower) for b in built.values()) < 0.6
