"""The designs part of ``kvtier real validate``: table arithmetic by hand, the
scaled design config, and end-to-end runs on paced files (no root) and on
throttled loop devices (root)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from hwprofiles import load_profile
from kvtier.cli.main import main
from kvtier.compare.designs import (
    KEY_DESIGNS,
    footprint,
    paced,
    plan_designs,
    run_designs,
    scaled_designs,
)
from kvtier.compare.devices import Devices
from kvtier.compare.metrics import busy_time, design_metrics, design_table, ranking
from kvtier.contracts.records import Records
from real import blkio
from real.targets import Limits, Target
from sim.config import ConfigError
from sim.executor import simulate
from sim.registry import WORKLOADS

MS = 1e-3
TINY = """\
name: tiny
description: three designs and a twin of one, small enough for a test
seed: 0
workload:
  kind: swarm
  model: Qwen3-32B
  context_tokens: 1024
  batch: 1
  sparsity: 0.1
  steps: 3
  profile_steps: 64
  layers: 2
  local_window: 64
  design: swarm
variants:
  - {name: Swarm, design: swarm}
  - {name: "No Cluster (scoring included)", design: nocluster}
  - {name: InfLLM, design: infllm}
  - {name: Swarm twin, design: swarm}
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def _records(reads: list[tuple[int, float, float]], steps: list[tuple[float, float]], nbytes):
    """Read ops ``(step, start, end)`` and one compute op per step ``(start, end)``;
    the SSD read ``nbytes`` in all."""
    rows = [("read", s, a, b) for s, a, b in reads] + [
        ("compute", k, a, b) for k, (a, b) in enumerate(steps)
    ]
    n = len(rows)
    ops = pa.table(
        {
            "op_id": list(range(n)),
            "step": [r[1] for r in rows],
            "kind": [r[0] for r in rows],
            "start_s": [r[2] for r in rows],
            "end_s": [r[3] for r in rows],
        }
    )
    dev = pa.table({"device": ["ssd0"], "type": ["ssd"], "bytes_read": [nbytes], "n_ios": [10]})
    return Records(ops, dev)


def test_busy_time_is_the_union_of_intervals():
    # [0,10] holds [2,3] and overlaps [5,12]: 12 s; then a gap; [20,25]: 5 s
    start, end = np.array([5.0, 0.0, 20.0, 2.0]), np.array([12.0, 10.0, 25.0, 3.0])
    assert busy_time(start, end) == pytest.approx(17.0)
    assert busy_time(np.array([]), np.array([])) == 0.0
    assert busy_time(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == pytest.approx(2.0)


def test_design_metrics_by_hand():
    # steps end at 10, 30 and 50 ms: after the warm-up step, 20 and 20 ms per step.
    # reads [0,10], [5,15] and [30,40] ms: in flight 25 ms; 25 MB in 25 ms = 1 GB/s
    rec = _records(
        [(0, 0, 10 * MS), (1, 5 * MS, 15 * MS), (2, 30 * MS, 40 * MS)],
        [(8 * MS, 10 * MS), (15 * MS, 30 * MS), (40 * MS, 50 * MS)],
        25_000_000,
    )
    m = design_metrics(rec, warmup=1)
    assert m["step_ms"] == pytest.approx(20.0)
    assert m["read_io_s"] == pytest.approx(0.025)
    assert m["read_gbps"] == pytest.approx(1.0)
    assert m["bytes_read"] == 25_000_000 and m["n_ios"] == 10
    # without the warm-up step: 10, 20, 20 ms from the first op's start
    assert design_metrics(rec, warmup=0)["step_ms"] == pytest.approx(50 / 3)


def _m(step_ms: float, gbps: float, nbytes: int = 100) -> dict:
    return {"step_ms": step_ms, "read_gbps": gbps, "bytes_read": nbytes, "n_ios": 4}


def test_design_table_errors_and_ranking_with_one_swap():
    sim = {"A": _m(10, 1.2), "B": _m(20, 0.5), "C": _m(30, 0.4)}
    real = {"A": _m(10, 1.0), "B": _m(35, 0.5), "C": _m(30, 0.5, nbytes=99)}
    t = design_table(sim, {k: [v] for k, v in real.items()}).set_index("design")
    assert t.loc["A", "step_error"] == pytest.approx(0.0)
    assert t.loc["B", "step_error"] == pytest.approx((20 - 35) / 35)
    assert t.loc["A", "gbps_error"] == pytest.approx(0.2)
    assert t.loc["C", "gbps_error"] == pytest.approx(-0.2)
    assert t["bytes_match"].tolist() == [True, True, False]
    r = ranking(t.reset_index())
    assert r["sim_order"] == ["A", "B", "C"] and r["real_order"] == ["A", "C", "B"]
    assert r["same_order"] is False
    # pairs AB, AC concordant, BC discordant: tau = (2 - 1) / 3
    assert r["kendall_tau"] == pytest.approx(1 / 3)
    same = ranking(design_table(sim, {k: [v] for k, v in sim.items()}))
    assert same["same_order"] is True and same["kendall_tau"] == pytest.approx(1.0)


def test_repeats_give_the_median_and_the_noise_by_hand():
    # A: 12, 10, 11 ms -> median 11, range 10-12, noise (12 - 10) / (2 x 11) = 1/11;
    # B's three repeats read 100 bytes; one of C's read 99: no match for C
    sim = {"A": _m(10, 1.0), "B": _m(20, 1.0), "C": _m(30, 1.0)}
    real = {
        "A": [_m(12, 0.9), _m(10, 1.1), _m(11, 1.0)],
        "B": [_m(20, 1.0)] * 3,
        "C": [_m(30, 1.0), _m(30, 1.0, nbytes=99), _m(30, 1.0)],
    }
    t = design_table(sim, real).set_index("design")
    assert t.loc["A", "real_step_ms"] == 11 and t.loc["A", "real_read_gbps"] == 1.0
    assert (t.loc["A", "real_step_ms_min"], t.loc["A", "real_step_ms_max"]) == (10, 12)
    assert t.loc["A", "noise"] == pytest.approx(1 / 11)
    assert t.loc["A", "step_error"] == pytest.approx((10 - 11) / 11)
    assert t.loc["B", "noise"] == 0.0 and t.loc["B", "repeats"] == 3
    assert t["bytes_match"].tolist() == [True, True, False]


def _ranked(rows: list[tuple[str, float, float, float]]) -> dict:
    cols = ["design", "sim_step_ms", "real_step_ms", "noise"]
    return ranking(pd.DataFrame(rows, columns=cols))


def test_tied_designs_are_left_out_of_the_ranking_check():
    # A and B: 10 +- 5% = [9.5, 10.5] and 10.4 +- 5% = [9.88, 10.92] overlap: tied,
    # and their real order (B first) is no swap.  C = 12 +- 0 lies 1.08 above B's
    # band: separable.  D = 20 +- 10% = [18, 22].  Separable pairs AC AD BC BD CD,
    # all in the same order for real: tau over them 1; over all six (AB discordant)
    # (5 - 1) / 6.
    rows = [("A", 10, 11, 0.05), ("B", 10.4, 10.5, 0.05), ("C", 12, 13, 0.0), ("D", 20, 19, 0.1)]
    r = _ranked(rows)
    assert r["tied"] == [["A", "B"]] and r["separable_pairs"] == 5
    assert (r["concordant"], r["discordant"]) == (5, 0)
    assert r["kendall_tau_separable"] == 1.0 and r["separable_same_order"] is True
    assert r["kendall_tau"] == pytest.approx(4 / 6) and r["same_order"] is False
    assert r["noise_band"] == 0.1
    assert r["sim_order_ties"] == "A ~ B < C < D"
    # D measured at 12.5, below C's 13: the separable pair CD swaps: (4 - 1) / 5
    rows[3] = ("D", 20, 12.5, 0.1)
    r = _ranked(rows)
    assert (r["concordant"], r["discordant"]) == (4, 1)
    assert r["kendall_tau_separable"] == pytest.approx(0.6)
    assert r["separable_same_order"] is False


def test_noise_as_wide_as_the_gaps_ties_every_pair():
    # 10, 11, 12 at +-5%: 10.5 vs 10.45 (AB) and 11.55 vs 11.4 (BC) overlap, and AC's
    # 2 ms gap exceeds 0.5 + 0.6 = 1.1: A ~ B ~ C, one separable pair (AC), swapped
    r = _ranked([("A", 10, 12, 0.05), ("B", 11, 11, 0.05), ("C", 12, 10, 0.05)])
    assert r["tied"] == [["A", "B"], ["B", "C"]] and r["separable_pairs"] == 1
    assert r["kendall_tau_separable"] == -1.0 and r["sim_order_ties"] == "A ~ B ~ C"
    # no noise measured (one repeat): every pair is compared
    r = _ranked([("A", 10, 12, 0.0), ("B", 11, 11, 0.0)])
    assert r["separable_pairs"] == 1 and r["kendall_tau_separable"] == -1.0
    # nothing separable: NaN, and no swap
    r = _ranked([("A", 10, 12, 0.2), ("B", 11, 11, 0.2)])
    assert r["separable_pairs"] == 0 and math.isnan(r["kendall_tau_separable"])
    assert r["separable_same_order"] is True


def test_scaled_default_config_is_the_claimed_one():
    cfg = scaled_designs("default-matched,swarm-ablations", 4)
    w = cfg.workload
    assert (w.context_tokens, w.batch, w.layers, w.steps, w.profile_steps) == (
        4096,
        2,
        4,
        6,
        256,
    )
    assert w.ssds == 4 and w.model == "Qwen3-32B" and w.sparsity == 0.1
    assert [v.name for v in cfg.variants] == list(KEY_DESIGNS)
    designs = [cfg.variant_params(v).design for v in cfg.variants]
    assert len(set(designs)) == len(designs)
    assert len(scaled_designs("default-matched,swarm-ablations", 4, "all").variants) > len(
        KEY_DESIGNS
    )
    assert w.match_recall == 0  # equal budgets: matched recall is the simulator's question
    assert all(k != "match_recall" for v in cfg.variants for k, _ in v.overrides)


def test_caps_only_shrink_and_names_are_checked(tiny: Path):
    cfg = scaled_designs(str(tiny), 2, "all")
    w = cfg.workload
    assert (w.context_tokens, w.batch, w.layers, w.steps) == (1024, 1, 2, 3)
    assert w.profile_steps == 64 <= WORKLOADS.entry("swarm").kind.caps["profile_steps"]
    # no key design is missing from the tiny scenario but its twin: it is left out
    assert [v.name for v in scaled_designs(str(tiny), 2).variants] == [
        "Swarm",
        "No Cluster (scoring included)",
        "InfLLM",
    ]
    with pytest.raises(ConfigError, match="no variant 'PQCache'"):
        scaled_designs(str(tiny), 2, "Swarm,PQCache")
    with pytest.raises(ConfigError, match="swarm scenario"):
        scaled_designs("paged-ssd", 2)


def test_each_design_reads_its_plans_bytes_per_step(tiny: Path):

    cfg = scaled_designs(str(tiny), 2, "all")
    plans, skipped = plan_designs(cfg, load_profile("h20-8ssd"))
    assert list(plans) == ["Swarm", "No Cluster (scoring included)", "InfLLM"]
    assert skipped == {"Swarm twin": "same I/O as Swarm"}
    for name, plan in plans.items():
        p = plan.to_pandas()
        want = p[p["kind"] == "read"].groupby("step")["bytes"].sum()
        assert set(want.index) <= set(range(3)) and want.sum() > 0, name
        rec = simulate(plan, load_profile("h20-8ssd"))
        ops = rec.ops.to_pandas()
        got = ops[ops["kind"] == "read"].groupby("step")["bytes"].sum()
        pd.testing.assert_series_equal(got, want, check_names=False)
        assert design_metrics(rec)["bytes_read"] == int(want.sum()), name


def _designs_report(out: Path) -> tuple[pd.DataFrame, dict]:
    table = pd.read_parquet(out / "designs" / "designs.parquet")
    return table, json.loads((out / "designs" / "designs.json").read_text())


def test_designs_end_to_end_on_paced_files(tiny: Path, direct_dir: Path, tmp_path: Path):
    out = tmp_path / "val"
    rc = main(
        ["real", "validate", "--pace", "h20-8ssd", "--n", "2", "--steps", "1", "--step-s",
         "0.02", "--regimes", "bandwidth", "--no-fio", "--engine", "threads",
         "--designs", str(tiny), "--design-variants", "all",
         "--dir", str(direct_dir), "--out", str(out), "--informational"]
    )  # fmt: skip
    assert rc == 0
    table, report = _designs_report(out)
    assert table["design"].tolist() == ["Swarm", "No Cluster (scoring included)", "InfLLM"]
    assert report["skipped"] == {"Swarm twin": "same I/O as Swarm"}
    # each backend counted its own bytes: the replayer's reads equal the simulator's
    assert (table["real_bytes_read"] == table["sim_bytes_read"]).all()
    assert (table["real_n_ios"] == table["sim_n_ios"]).all() and report["bytes_match"]
    assert (table["real_bytes_read"] > 0).all() and (table["real_step_ms"] > 0).all()
    r = report["ranking"]
    names = set(table["design"])
    assert set(r["sim_order"]) == names and set(r["real_order"]) == names
    by = table.set_index("design")
    assert by.loc[r["sim_order"], "sim_step_ms"].is_monotonic_increasing
    assert by.loc[r["real_order"], "real_step_ms"].is_monotonic_increasing
    assert r["same_order"] == (r["sim_order"] == r["real_order"])
    assert -1.0 <= r["kendall_tau"] <= 1.0
    assert r["same_order"] is False or r["kendall_tau"] == pytest.approx(1.0)
    assert "git" in report and "machine" in report  # provenance
    assert (out / "designs" / "swarm" / "real" / "ops.parquet").exists()
    assert not list(direct_dir.rglob("kvtier-*.dat"))  # the replay removed its files


def test_designs_none_skips_them(direct_dir: Path, tmp_path: Path):
    out = tmp_path / "val"
    rc = main(
        ["real", "validate", "--pace", "h20-8ssd", "--n", "1", "--steps", "1", "--step-s",
         "0.02", "--regimes", "bandwidth", "--no-fio", "--engine", "threads",
         "--designs", "none", "--dir", str(direct_dir), "--out", str(out), "--informational"]
    )  # fmt: skip
    assert rc == 0 and (out / "report.json").exists() and not (out / "designs").exists()


NO_THROTTLE = blkio.throttle_unavailable()


@pytest.mark.skipif(NO_THROTTLE is not None, reason=f"needs root and blkio: {NO_THROTTLE}")
def test_designs_on_throttled_loop_devices(tiny: Path, tmp_path: Path):
    from real.emulate import emulate

    plans, _ = plan_designs(scaled_designs(str(tiny), 2), load_profile("h20-8ssd"))
    size = 64 << 20
    assert footprint(plans) <= size
    where = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    with emulate("h20-8ssd", 2, where=where, size=size, scale=0.02, out=tmp_path) as es:
        assert es.mode == "throttle"
        dev = Devices(
            es.profile,
            str(where),
            targets={t.node: t for t in es.targets},
            limits=es.targets[0].limits,
            throttled=es.joined,
        )
        table, _, _ = run_designs(dev, plans, seed=0, engine="auto")
    assert table["design"].tolist() == list(plans)
    assert table["bytes_match"].all()
    assert (table["real_bytes_read"] == table["sim_bytes_read"]).all()


def test_design_replays_are_paced_at_the_targets_own_limits():
    """Throttled targets keep their limits and are paced I/O by I/O too; a target
    without limits is left alone."""
    lim = Limits(read_bps=272_000_000, write_bps=160_000_000, read_iops=43_000, write_iops=7_800)
    targets = {
        "ssd0": Target("ssd0", "/dev/loop7", 1 << 30, limits=lim),
        "ssd1": Target("ssd1", "/dev/loop8", 1 << 30),
    }
    out = paced(targets)
    assert out["ssd0"].pacing and out["ssd0"].limits == lim
    assert out["ssd1"] == targets["ssd1"]
