"""The ``kvtier`` command line: exit statuses, one-line errors and what it writes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from hwprofiles import PROFILE_DIR
from kvtier.cli.main import main
from kvtier.cli.simulate import REPORTS
from kvtier.contracts.plan import PlanBuilder, read_plan, write_plan
from sim.config import SCENARIO_DIR, load_scenario
from sim.models import get_model
from sim.registry import WORKLOADS
from sim.runner import slug

VARIANT_FILES = ("plan.parquet", "ops.parquet", "devices.parquet", "steps.parquet", "trace.json")


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvtier: error: "), err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["sim", "--hw", "no-such-box"], "no-such-box"),
        (["profiles", "show", "no-such-box"], "no-such-box"),
        (["sim", "--scenario", "no-such-scenario"], "no-such-scenario"),
        (["sim", "--steps", "0"], "--steps"),
        (["sim", "--steps", "-3"], "--steps"),
        (["models", "show", "nosuchmodel"], "nosuchmodel"),
        (["models", "show"], "NAME"),
        (["profiles", "show"], "NAME"),
        (["bench", "--steps", "0"], "--steps"),
        (["bench", "--layers", "0"], "--layers"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--out", str(tmp_path)] if argv[0] in ("sim", "bench") else argv) == 2
    assert needle in error_line(capsys)
    assert not any(tmp_path.iterdir())  # nothing written on error


def test_misspelt_profile_key_names_file_line_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (PROFILE_DIR / "h20-8ssd.yaml").read_text()
    assert text.count("read_gbps:") == 1
    line = text[: text.index("read_gbps:")].count("\n") + 1
    path = tmp_path / "typo.yaml"
    path.write_text(text.replace("read_gbps:", "read_gbs:"))
    assert main(["sim", "--hw", str(path), "--out", str(tmp_path / "out")]) == 2
    msg = error_line(capsys)
    assert f"{path}:{line}: ssds[0].read_gbs" in msg
    assert not (tmp_path / "out").exists()


def test_variant_the_profile_cannot_run_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "wide.yaml"
    scenario.write_text(
        "name: wide\ndescription: too many SSDs\nseed: 0\nworkload:\n"
        "  {model: Llama-3.2-1B, context_tokens: 1024, batch: 1, sparsity: 0.5,"
        " steps: 1, layers: 1}\nvariants:\n  - {name: nine, ssds: 9}\n"
    )
    out = tmp_path / "out"
    assert main(["sim", "--scenario", str(scenario), "--out", str(out)]) == 2
    msg = error_line(capsys)
    assert "'nine'" in msg and "9" in msg
    assert not out.exists()


def test_subprocess_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    kvtier = Path(sys.executable).with_name("kvtier")  # the installed console script
    assert kvtier.is_file(), f"{kvtier} missing: pip install -e . in the venv"
    proc = subprocess.run(
        [str(kvtier), "sim", "--hw", "no-such-box", "--out", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("kvtier: error: ") and "no-such-box" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    argv = ["sim", "--scenario", "tiers", "--hw", "h20-8ssd", "--steps", "2", "--out", str(out)]
    assert main([*argv, "--trace"]) == 0
    return out / "tiers" / "h20-8ssd"


def test_sim_writes_results_and_provenance(sim_run: Path) -> None:
    for name in ("summary.csv", "summary.parquet", "run.json", "scenario.yaml", "profile.yaml"):
        assert (sim_run / name).is_file(), name
    assert (sim_run / "profile.yaml").read_bytes() == (PROFILE_DIR / "h20-8ssd.yaml").read_bytes()
    run = json.loads((sim_run / "run.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", run["git"]["sha"])
    assert run["seed"] == load_scenario("tiers").seed
    assert run["machine"]["cpus"] == os.cpu_count()
    assert run["packages"]["simpy"] == importlib.metadata.version("simpy")
    assert run["scenario"]["workload"]["steps"] == 2
    # the effective scenario written beside the results loads back to the same config
    assert load_scenario(sim_run / "scenario.yaml").to_dict() == run["scenario"]


def test_sim_summary_has_one_row_per_variant(sim_run: Path) -> None:
    cfg = load_scenario("tiers")
    csv = pd.read_csv(sim_run / "summary.csv")
    parquet = pd.read_parquet(sim_run / "summary.parquet")
    names = [v.name for v in cfg.variants]
    assert csv["variant"].tolist() == names
    assert parquet["variant"].tolist() == names
    # every variant reads the same working set per step
    w = cfg.workload
    card = get_model(w.model)
    per_step = (
        round(w.context_tokens * w.sparsity) * w.batch * card.layers * card.kv_bytes_per_token_layer
    )
    assert (csv["fetch_bytes_per_step"] == per_step).all()
    expected_ssds = [
        (cfg.variant_params(v).ssds or 8) if cfg.variant_params(v).tier == "ssd" else 0
        for v in cfg.variants
    ]
    assert csv["ssds"].tolist() == expected_ssds


def test_sim_writes_per_variant_records(sim_run: Path) -> None:
    for v in load_scenario("tiers").variants:
        vdir = sim_run / "variants" / slug(v.name)
        for name in VARIANT_FILES:
            assert (vdir / name).is_file(), (v.name, name)
        plan = read_plan(vdir / "plan.parquet")
        ops = pq.read_table(vdir / "ops.parquet")
        assert ops.num_rows == plan.num_rows
        assert pq.read_table(vdir / "steps.parquet").column("step").to_pylist() == [0, 1]
        trace = json.loads((vdir / "trace.json").read_text())
        assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == plan.num_rows


def test_every_workload_kind_has_the_report_it_names() -> None:
    """``kvtier sim`` prints a kind's run by the report its registry entry names."""
    named = {WORKLOADS.entry(n).kind.report for n in WORKLOADS.names()}
    assert named == set(REPORTS) == {"decode", "swarm", "kvdrive", "serving"}


def test_sim_of_a_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = PlanBuilder()
    r0 = b.read("ssd0", "dram0", 1 << 20, 256, io_path="io_uring")
    r1 = b.read("ssd1", "dram0", 1 << 20, 256, io_path="io_uring")
    c = b.copy("dram0", "gpu0", 2 << 20, depends_on=[r0, r1])
    b.compute("gpu0", 1e9, 1e6, depends_on=[c])
    write_plan(b.table(), tmp_path / "plan.parquet")
    out = tmp_path / "records"
    assert (
        main(
            ["sim", "--hw", "h20-8ssd", "--plan", str(tmp_path / "plan.parquet"), "--out", str(out)]
        )
        == 0
    )
    assert "ssd0" in capsys.readouterr().out
    ops = pq.read_table(out / "ops.parquet").to_pandas()
    assert ops["op_id"].tolist() == [0, 1, 2, 3]
    # the copy waits for both reads, the compute for the copy
    assert ops.at[2, "start_s"] >= max(ops.at[0, "end_s"], ops.at[1, "end_s"])
    assert ops.at[3, "start_s"] >= ops.at[2, "end_s"]
    dev = pq.read_table(out / "devices.parquet").to_pandas().set_index("device")
    assert dev.at["ssd0", "bytes_read"] == 1 << 20
    assert dev.at["ssd1", "n_ios"] == 256
    assert dev.at["ssd2", "bytes_read"] == 0
    assert (out / "steps.parquet").is_file()


def test_sim_of_a_bad_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = PlanBuilder()
    b.read("ssd0", "dram9", 4096, 1, io_path="io_uring")
    write_plan(b.table(), tmp_path / "plan.parquet")
    assert (
        main(["sim", "--plan", str(tmp_path / "plan.parquet"), "--out", str(tmp_path / "out")]) == 2
    )
    assert "op 0: dst 'dram9'" in error_line(capsys)
    assert (
        main(["sim", "--plan", str(tmp_path / "missing.parquet"), "--out", str(tmp_path / "out")])
        == 2
    )
    assert "no such file" in error_line(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["profiles"],
        ["profiles", "list"],
        ["profiles", "show", "h20-8ssd"],
        ["models"],
        ["models", "show", "Qwen3-8B"],
        ["models", "show", "qwen3-8b"],
    ],
)
def test_catalog_commands(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out


def test_profiles_show_accepts_a_yaml_path(tmp_path: Path) -> None:
    path = tmp_path / "copy.yaml"
    shutil.copyfile(PROFILE_DIR / "h20-8ssd.yaml", path)
    assert main(["profiles", "show", str(path)]) == 0


def test_bench_writes_bench_json(tmp_path: Path) -> None:
    assert main(["bench", "--steps", "2", "--layers", "2", "--out", str(tmp_path)]) == 0
    bench = json.loads((tmp_path / "bench.json").read_text())
    run = bench["runs"][0]
    assert run["ssd_flows"] == 2 * 2 * 8
    assert run["ops"] == 2 * 2 * (8 + 2)  # 8 reads, a copy and a compute per layer
    assert (run["steps"], run["layers"], run["ssds"]) == (2, 2, 8)
    # the bare-simpy reference ran, and the ratios are the two timings' quotients
    assert run["bare_simpy_s"] > 0 and run["bare_simpy_cpu_s"] > 0
    assert run["ratio_to_bare"] == pytest.approx(run["sim_cpu_s"] / run["bare_simpy_cpu_s"])
    assert run["wall_ratio_to_bare"] == pytest.approx(run["sim_s"] / run["bare_simpy_s"])
    assert "git" in bench and "machine" in bench


@pytest.mark.parametrize("ssds", [2, 12])
def test_bench_ssds_sets_the_number_of_ssds(tmp_path: Path, ssds: int) -> None:
    argv = ["bench", "--steps", "2", "--layers", "3", "--ssds", str(ssds), "--out", str(tmp_path)]
    assert main(argv) == 0
    run = json.loads((tmp_path / "bench.json").read_text())["runs"][0]
    assert (run["ssds"], run["ssd_flows"]) == (ssds, 2 * 3 * ssds)
    assert run["ops"] == 2 * 3 * (ssds + 2)


def test_variants_the_profile_cannot_run_are_skipped_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "mixed.yaml"
    scenario.write_text(
        "name: mixed\ndescription: one runnable variant\nseed: 0\nworkload:\n"
        "  {model: Llama-3.2-1B, context_tokens: 1024, batch: 1, sparsity: 0.5,"
        " steps: 1, layers: 1}\nvariants:\n  - {name: nine, ssds: 9}\n  - {name: two, ssds: 2}\n"
    )
    out = tmp_path / "out"
    assert main(["sim", "--scenario", str(scenario), "--out", str(out)]) == 0
    assert "skipped" in capsys.readouterr().out
    run = json.loads((out / "mixed" / "h20-8ssd" / "run.json").read_text())
    assert list(run["skipped"]) == ["nine"] and "9" in run["skipped"]["nine"]
    summary = pd.read_csv(out / "mixed" / "h20-8ssd" / "summary.csv")
    assert summary["variant"].tolist() == ["two"]


def test_sweep_two_factors_writes_one_table_with_a_column_per_factor(tmp_path: Path) -> None:
    argv = ["sweep", "--scenario", "tiers", "--steps", "1", "--jobs", "1", "--out", str(tmp_path)]
    factors = ["--factor", "ssds=1,2", "--factor", "batch=1,4"]
    assert main([*argv, *factors]) == 0
    out = tmp_path / "tiers" / "h20-8ssd"
    df = pd.read_parquet(out / "sweep-ssds-batch.parquet")
    n_variants = len(load_scenario("tiers").variants)
    assert len(df) == 4 * n_variants
    pairs = df[["ssds", "batch"]].drop_duplicates().itertuples(index=False)
    assert [tuple(p) for p in pairs] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert any((out / "plots").glob("*.png"))
    meta = json.loads((out / "sweep-ssds-batch.json").read_text())
    assert meta["factors"] == {"ssds": [1, 2], "batch": [1, 4]}
    assert meta["executor"] == {"executor": "local", "workers": 1}  # --jobs 1: in-process


@pytest.mark.parametrize(
    "factors, needle",
    [
        (["--factor", "ssdz=1,2"], "factor ssdz: unknown workload key"),
        (["--factor", "ssds=1,many"], "factor ssds: must be int, got 'many'"),
        (["--factor", "ssds"], "--factor ssds: no values"),
        (["--factor", "ssds=1", "--factor", "ssds=2"], "--factor ssds: given twice"),
        (["--factor", "ssds=1", "--factor", "batch=1", "--values", "2"], "--values goes with"),
    ],
)
def test_sweep_bad_factor_exits_2_with_one_line(
    factors: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sweep", "--scenario", "tiers", "--steps", "1", "--out", str(tmp_path)]
    assert main([*argv, *factors]) == 2
    assert needle in error_line(capsys)
    assert not any(tmp_path.iterdir())


def test_misspelt_design_param_exits_2_naming_file_line_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (SCENARIO_DIR / "default.yaml").read_text()
    bad = tmp_path / "x.yaml"
    bad.write_text(
        text.replace("  design: swarm\n", "  design: swarm\n  design_params: {radus: 1}\n")
    )
    line = bad.read_text().splitlines().index("  design_params: {radus: 1}") + 1
    assert main(["sim", "--scenario", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == (
        f"kvtier: error: {bad}:{line}: workload.design_params.radus: unknown parameter of swarm "
        "(one of: radius, target_size, replicate, medoid_only, balance_placement, retrieval, "
        "dedup, cache, maintenance, maintenance_rule, join_radius, shuffle)"
    )


@pytest.mark.parametrize("module", ["kvtier", "kvtier.cli"])
def test_python_dash_m_runs_the_command_line(module: str) -> None:
    """``python -m kvtier`` and ``python -m kvtier.cli`` are the ``kvtier`` command:
    its usage line on --help (exit 0), and its one-line error on a bad command (exit 2)."""
    ok = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: kvtier ")
    bad = subprocess.run(
        [sys.executable, "-m", module, "nosuchcmd"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("kvtier: error: ") and "nosuchcmd" in bad.stderr


def test_sweep_sensitivity_writes_the_tornado(tmp_path: Path, capsys) -> None:
    """One assumption, so three runs (as given, low, high) of every variant; the base
    rows are the scenario's plain summary (the same simulations, no assumption moved)."""
    argv = ["sweep", "--scenario", "tiers", "--steps", "1", "--jobs", "1", "--out", str(tmp_path)]
    assert main([*argv, "--sensitivity", "--assumptions", "efficiency.ssd"]) == 0
    out = tmp_path / "tiers" / "h20-8ssd" / "sensitivity"
    table = pd.read_csv(out / "tornado.csv")
    assert list(table["assumption"]) == ["efficiency.ssd"]
    assert (table["low"].item(), table["high"].item()) == (0.85, 1.0)
    runs = pd.read_csv(out / "sensitivity-runs.csv")
    n_variants = len(load_scenario("tiers").variants)
    assert len(runs) == 3 * n_variants
    # efficiency.ssd's high end is its value as given (1.0): those runs equal the base's
    base = runs[runs["at"] == "base"].reset_index(drop=True)
    high = runs[runs["at"] == "high"].reset_index(drop=True)
    assert list(base["tokens_per_s"]) == list(high["tokens_per_s"])
    assert (out / "tornado.png").stat().st_size > 0
    assert "fragile assumptions" in capsys.readouterr().out
