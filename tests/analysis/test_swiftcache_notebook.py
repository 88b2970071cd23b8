"""analysis/swiftcache.ipynb on a tiny swiftcache run: its tables are the summary's
arithmetic, and it writes the Parquet tables and PNG plots it promises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.runner import run


def _tiny_run(root: Path) -> Path:
    cfg = load_scenario("swiftcache")
    names = ("vLLM+LMCache", "SwiftCache")
    cfg = dataclasses.replace(
        cfg,
        workload=dataclasses.replace(cfg.workload, sessions=2, turns=1, session_rate=1.0),
        variants=tuple(v for v in cfg.variants if v.name in names),
    )
    out = root / "swift"
    run(cfg, load_profile("h20-4gpu-nvlink"), out)
    return out


def test_swiftcache_notebook_on_a_tiny_run(run_notebook, tmp_path: Path) -> None:
    out = _tiny_run(tmp_path)
    probes = {"tables": "tables", "written": "[p.name for p in written]", "share": "lend_share"}
    _, got = run_notebook("swiftcache", {"RESULTS": str(out)}, probes)
    assert got["share"] == 1.0  # Fig. 9: Eq. 2's C_worker, each worker's whole KV memory
    summary = pd.read_parquet(out / "summary.parquet")
    br = got["tables"]["breakdown"]
    assert br["design"].tolist() == summary["design"].tolist()
    # queueing + blocked load + execution = the master's mean TTFT, per design
    parts = br["queue_s"] + br["load_s"] + br["execution_s"]
    assert parts.tolist() == pytest.approx(summary["ttft_mean_s"].tolist())
    assert (br["queue_s"] == summary["queue_mean_s"]).all()
    # interference: the lending variant's workers against the one that lends nothing
    inter = got["tables"]["interference"].set_index("worker")
    lend = summary[summary["lent_gb"] > 0].iloc[0]
    idle = summary[summary["lent_gb"] == 0].iloc[0]
    for w in ("wlwm", "w14b"):
        assert inter.loc[w, "ttft_alone_s"] == pytest.approx(idle[f"{w}_ttft_mean_s"])
        assert inter.loc[w, "tpot_lending_s"] == pytest.approx(lend[f"{w}_tpot_mean_s"])
    # 3 masters x 4 GPU sizes, and the files
    assert len(got["tables"]["max-context"]) == 12
    for name in ("breakdown", "interference", "max-context"):
        back = pd.read_parquet(out / f"swift-{name}.parquet")
        assert back.shape == got["tables"][name].shape
    assert {"swift-ttft.png", "swift-max-context.png"} <= set(got["written"])
    assert (out / "swift-ttft.png").stat().st_size > 0
