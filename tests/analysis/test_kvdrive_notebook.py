"""analysis/kvdrive: built from its ``.py``, run on a tiny kvdrive-sweep run; what it
tabulates equals what the records measure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.runner import run

KEEP = ("KVDrive (SFC)", "KVDrive (DRAM only)", "Quest")


def test_kvdrive_notebook_breakdown_and_dram_ratio_match_the_records(run_notebook, tmp_path: Path):
    cfg = load_scenario("kvdrive-sweep")
    small = dict(context_tokens=2048, batch=2, steps=2, profile_steps=16, layers=2)
    cfg = dataclasses.replace(
        cfg,
        workload=dataclasses.replace(cfg.workload, **small),
        variants=tuple(v for v in cfg.variants if v.name in KEEP),
    )
    result = run(cfg, load_profile("l20-server"), tmp_path / "kvdrive-sweep" / "l20-server")
    probes = {
        "rows": "len(runs)",
        "stage_sums": "breakdown.sum(axis=1).droplevel(KEYS).to_dict()",  # by variant
        "ratio": "ssd_over_dram.tolist()",
        "bars": "len(fig_breakdown.axes[0].patches)",
    }
    _, got = run_notebook("kvdrive", {"RESULTS": str(tmp_path)}, probes)
    assert got["rows"] == len(KEEP)
    assert got["bars"] == 6 * len(KEEP)  # one bar per stage and variant
    makespan = {
        v.variant.name: max(v.records.ops.column("end_s").to_pylist()) for v in result.variants
    }
    # the SSD tier over DRAM-only: tokens/s = batch x steps / makespan, so the ratio
    # of throughputs is the inverse ratio of the records' makespans
    assert got["ratio"] == [
        pytest.approx(makespan["KVDrive (DRAM only)"] / makespan["KVDrive (SFC)"])
    ]
    for v in result.variants:
        cols = [
            f"{s}_ms_per_layer" for s in ("select", "lookup", "kv_fetch", "h2d", "cpu_attn", "attn")
        ]
        assert got["stage_sums"][v.variant.name] == pytest.approx(sum(v.summary[c] for c in cols))
