"""The analysis notebooks, built from their ``.py``, run end to end on tiny results,
and what they draw equals what the records say."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analysis.plots import LABELS as SWEEP_LABELS
from analysis.serving_plots import LABELS as SERVING_LABELS
from hwprofiles import load_profile
from kvtier.contracts.provenance import provenance
from kvtier.contracts.records import Records
from real.profile_yaml import scaled_profile
from real.validate import compare, regime_plan, write_report
from sim.config import load_scenario
from sim.executor import simulate
from sim.runner import run, slug
from sim.sweep import sweep


def lines_of(figure: str) -> str:
    """A kernel expression: {(axis title, y label): {line label: (x, y)}} of ``figure``."""
    return (
        "{(ax.get_title(), ax.get_ylabel()): {ln.get_label(): "
        "(list(map(float, ln.get_xdata())), list(map(float, ln.get_ydata()))) "
        f"for ln in ax.lines}} for ax in ({figure}).axes}}"
    )


def test_swarm_notebook_draws_every_sweep(run_notebook, tmp_path: Path) -> None:
    cfg = load_scenario("tiers")
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, steps=1, layers=2))
    df = sweep(cfg, load_profile("h20-8ssd"), "ssds", [1, 2], jobs=1)
    df.to_parquet(tmp_path / "sweep-ssds.parquet", index=False)
    probes = {
        "files": "[f.name for f in files]",
        "metrics": "METRICS",
        "panels": lines_of('figures["ssds"]'),
        "summary": "summary[cols].groupby(['sweep', 'variant']).mean()",
    }
    _, got = run_notebook("swarm", {"RESULTS": str(tmp_path)}, probes)
    assert got["files"] == ["sweep-ssds.parquet"]  # 1 sweep table
    present = [m for m in got["metrics"] if m in df]
    assert present and len(got["panels"]) == len(present)
    for metric in present:
        lines = got["panels"][("", SWEEP_LABELS.get(metric, metric))]
        assert set(lines) == set(df["variant"])
        for variant, g in df.groupby("variant"):
            g = g.sort_values("ssds")
            assert lines[variant][0] == g["ssds"].tolist()  # one point per SSD count
            assert lines[variant][1] == pytest.approx(g[metric].tolist())
    means = df.groupby("variant")["tokens_per_s"].mean()
    summary = got["summary"].loc["ssds"]
    assert summary["tokens_per_s"].to_dict() == pytest.approx(means.to_dict())


def _serving_runs(root: Path) -> None:
    chat = load_scenario("paged-ssd")
    chat = dataclasses.replace(
        chat,
        workload=dataclasses.replace(chat.workload, sessions=6, session_rate=6.0),
        variants=chat.variants[:2],
    )
    run(chat, load_profile("dgx-spark"), root / "paged-ssd")
    pool = load_scenario("unified-pooling")
    matrix = {"model": ["Llama-3.1-8B"], "context_tokens": [1024, 4096]}
    pool = dataclasses.replace(
        pool,
        workload=dataclasses.replace(pool.workload, matrix=matrix),
        variants=pool.variants[:2],
    )
    run(pool, load_profile("h100-2dimm-2ssd"), root / "pooling")


def test_serving_notebook_draws_both_scenarios(run_notebook, tmp_path: Path) -> None:
    _serving_runs(tmp_path)
    probes = {
        "runs": "sorted(loaded)",
        "figures": "sorted(figures)",
        "tables": "tables",
        "ttft": lines_of('figures["pooling ttft"]'),
        "blocked": lines_of('figures["pooling blocked"]'),
        "remaining": lines_of('figures["paged-ssd remaining"]'),
        "cdf": lines_of('figures["paged-ssd ttft cdf"]'),
    }
    _, got = run_notebook("serving", {"RESULTS": str(tmp_path)}, probes)
    assert got["runs"] == ["paged-ssd", "pooling"]  # 2 serving runs
    # 4 figures: TTFT and blocked I/O vs context; remaining and TTFT CDF
    assert got["figures"] == [
        "paged-ssd remaining",
        "paged-ssd ttft cdf",
        "pooling blocked",
        "pooling ttft",
    ]
    pool = pd.read_parquet(tmp_path / "pooling" / "summary.parquet")
    assert got["tables"]["pooling"]["ttft_mean_s"].tolist() == pool["ttft_mean_s"].tolist()
    for key, metric in (("ttft", "ttft_mean_s"), ("blocked", "blocked_io_mean_s")):
        lines = got[key][("Llama-3.1-8B", SERVING_LABELS[metric])]
        assert set(lines) == set(pool["design"])
        for design, g in pool.groupby("design"):
            g = g.sort_values("context_tokens")
            assert lines[design] == (g["context_tokens"].tolist(), g[metric].tolist())
    _check_request_curves(tmp_path / "paged-ssd", got["remaining"], got["cdf"])


def _check_request_curves(root: Path, remaining: dict, cdf: dict) -> None:
    """Per design: the CDF's points are the TTFTs, whose mean is the summary's (computed
    by the simulator); the remaining curve counts released, unfinished requests."""
    summary = pd.read_parquet(root / "summary.parquet").set_index("variant")
    (solid,) = remaining.values()
    (curves,) = cdf.values()
    for name, row in summary.iterrows():
        req = pd.read_parquet(root / "variants" / slug(name) / "requests.parquet")
        done = req[~req["rejected"]]
        x, y = curves[name]
        assert len(x) == row["requests"] - row["rejected"] == len(done)
        assert np.mean(x) == pytest.approx(row["ttft_mean_s"])
        assert y == pytest.approx(np.arange(1, len(x) + 1) / len(x))
        t, n = (np.asarray(v) for v in solid[name])
        rel, fin = done["release_s"].to_numpy(), done["finish_s"].to_numpy()
        inside = (rel[None, :] <= t[:, None]) & (fin[None, :] > t[:, None])
        assert n.tolist() == inside.sum(axis=1).tolist()
        assert n[-1] == 0 and t[-1] == fin.max()  # everyone released has finished


SLOWER = 1.25  # the "real" run: every op of the simulated one, 25% longer


def _slowed(rec: Records, factor: float) -> Records:
    """``rec`` as a replay would record it, every time scaled by ``factor`` (each
    duration ``factor`` x longer), with the SSDs its only devices."""
    ops = rec.ops
    for col in ("ready_s", "start_s", "end_s"):
        i = ops.schema.get_field_index(col)
        ops = ops.set_column(i, col, pa.array(ops.column(col).to_numpy() * factor))
    return Records(ops, rec.devices.filter(pc.equal(rec.devices["type"], "ssd")))


def test_validation_notebook_renders_the_report(run_notebook, tmp_path: Path) -> None:
    prof = scaled_profile(load_profile("h20-8ssd"), 2, 0.02, 1 << 30)
    plan, steps = regime_plan(prof, steps_per_regime=2, step_s=0.01, n_ssd=2, warmup=0)
    sim = simulate(plan, prof)
    result = compare(sim, _slowed(sim, SLOWER), steps)
    write_report(result, tmp_path, provenance(engine=f"the simulator, x {SLOWER}"))
    probes = {
        "bytes_match": "report['bytes_match']",
        "by_regime": "by_regime",
        "steps": lines_of("fig"),
        "bytes": "device_bytes",
    }
    _, got = run_notebook("validation", {"OUT": str(tmp_path)}, probes)
    assert got["bytes_match"] is True
    # (sim - real) / real = (1 - 1.25) / 1.25 = -0.2 for every step of every regime
    br = got["by_regime"]
    assert set(br.index) == {"latency", "iops", "bandwidth", "write"}
    assert br["bias"].tolist() == pytest.approx([-0.2] * 4)
    assert br["median"].tolist() == pytest.approx([0.2] * 4)
    assert br["max"].tolist() == pytest.approx([0.2] * 4)
    lines = got["steps"][("step time", "ms")]
    ops = sim.ops.to_pandas()
    by_step = ops.groupby("step")["end_s"].max() - ops.groupby("step")["start_s"].min()
    for regime, g in steps.groupby("regime"):
        x, y_sim = lines[f"{regime} sim"]
        assert x == g["step"].tolist()
        assert y_sim == pytest.approx((by_step.loc[g["step"]] * 1e3).tolist())
        assert lines[f"{regime} real"][1] == pytest.approx([SLOWER * v for v in y_sim])
    # bytes per SSD as the plan asks: reads from it plus writes to it
    p = plan.to_pandas()
    want = p[p["kind"] == "read"].groupby("src")["bytes"].sum()
    got_bytes = got["bytes"].set_index("device")
    assert got_bytes["match"].all()
    assert got_bytes.loc[want.index, "bytes_read_sim"].tolist() == want.tolist()
