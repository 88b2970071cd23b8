"""Fitting the generator: the loss, recovery of a known parameter, the fitted preset, the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kvtier.cli.main import main
from traces import fit
from traces.access import write_access_trace
from traces.generator import PRESETS, generate


def test_loss_is_zero_on_equal_stats_and_weighted_relative_otherwise() -> None:
    real = {"overlap_next": 0.5, "partners_mean": 0.5}
    assert fit.loss(real, real) == 0.0
    # overlap: weight 2, scale 0.5 -> 2 * (0.1 / 0.5)^2; partners: weight 1, floor 1 -> 0.25
    assert fit.loss(real, {"overlap_next": 0.6, "partners_mean": 1.0}) == pytest.approx(
        2 * 0.04 + 0.25
    )


def test_fit_recovers_the_drift_of_a_generated_trace() -> None:
    truth = generate("default", 1024, 96, kv_heads=2, sparsity=0.1, local_window=32,
                     drift=0.2).trace(with_scores=True)  # fmt: skip
    real = fit.real_targets(fit.st.per_head(truth))
    start = dataclasses.replace(PRESETS["default"], drift=0.01)
    best, best_loss = fit.fit(truth, real, passes=1, seeds=2, start=start,
                              grids={"drift": (0.01, 0.05, 0.2, 0.4)})  # fmt: skip
    assert best.drift == 0.2  # the generating value, same seeds: loss 0
    assert best_loss == 0.0


def test_fitted_preset_generates_valid_traces() -> None:
    assert PRESETS["smollm2-fitted"] != PRESETS["default"]
    trace = generate("smollm2-fitted", 512, 8, local_window=16).trace()
    trace.validate()
    assert trace.meta.source == "generator:smollm2-fitted"


def test_cli_compares_a_preset(tmp_path, capsys) -> None:
    path = tmp_path / "t.parquet"
    write_access_trace(generate("default", 512, 40, local_window=16).trace(with_scores=True), path)
    out = tmp_path / "new" / "fit.json"  # a directory not made yet, as --out may name
    assert main(["trace", "fit", str(path), "--preset", "stable", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["params"]["drift"] == PRESETS["stable"].drift
    assert "overlap_next" in doc["table"]
    assert "overlap_next" in capsys.readouterr().out


def test_cli_unknown_preset_is_one_line_error(tmp_path, capsys) -> None:
    path = tmp_path / "t.parquet"
    write_access_trace(generate("default", 256, 8, local_window=16).trace(), path)
    assert main(["trace", "fit", str(path), "--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvtier: error: --preset 'nope'") and err.count("\n") == 1
