"""A scenario's ``sweep_figures``: the seed's figures over factors, printed by
``kvtier sweep`` beside the sweep's values with the ratio (sim/scenarios/seedref.py).

The toy sweep is the tiers scenario (one SSD, one decode step) over two prefixes.
Its fetched bytes a step are worked by hand: batch 4 x round(10% of the prefix)
entries x 64 layers x 4,096 bytes (Qwen3-32B: 8 KV heads x 128 x K and V x 2 B),
i.e. 4 x 410 x 64 x 4096 = 429,916,160 at 4K and 4 x 819 x 64 x 4096 =
858,783,744 at 8K: their ratio is 819 / 410 = 1.99756.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hwprofiles import load_profile
from kvtier.cli.main import main
from sim.config import ConfigError, load_scenario, sweep_keys
from sim.scenarios.seedref import SWEEP, compare_sweep, load_seed_figures
from sim.sweep import sweep

RATIO = 819 / 410  # fetched bytes a step, 8K over 4K, by hand (module doc)
FIGURES = {
    "seed": "toy",
    "figures": [
        {
            "name": "fetched bytes 8K / 4K",
            "section": "toy Fig. 1",
            "metric": "fetch_bytes_per_step",
            "unit": "x",
            "seed": 3.0,
            # batch is neither swept nor a summary column: the scenario's 4 at every point
            "at": {"variant": "1 SSD", "context_tokens": 8192, "batch": 4},
            "over": {"context_tokens": 4096},
            "gap": "the toy seed's 3.0 is not the 2x the bytes double by",
        },
        {
            "name": "fetched bytes 4K / 8K",
            "section": "toy Fig. 1",
            "metric": "fetch_bytes_per_step",
            "unit": "x",
            "relation": "<",
            "seed": 1.0,
            "at": {"variant": "1 SSD", "context_tokens": 4096},
            "over": {"context_tokens": 8192},
        },
        {  # a point the sweep does not run: counted, not shown
            "name": "fetched bytes on two SSDs",
            "section": "toy Fig. 2",
            "metric": "fetch_bytes_per_step",
            "unit": "x",
            "seed": 1.0,
            "at": {"variant": "1 SSD", "ssds": 2},
            "over": {"ssds": 1},
        },
    ],
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiers.yaml with one variant, one decode step and the toy ``sweep_figures``."""
    raw = yaml.safe_load(Path("sim/scenarios/tiers.yaml").read_text())
    raw["name"] = "toy-sweep"
    raw["workload"].update(steps=1, context_tokens=4096)
    raw["variants"] = [{"name": "1 SSD", "ssds": 1}]
    raw[SWEEP] = FIGURES
    path = tmp_path_factory.mktemp("toy") / "toy-sweep.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_rows_carry_the_hand_worked_ratio(toy: Path) -> None:
    cfg = load_scenario(toy)
    df = sweep(cfg, load_profile("h20-8ssd"), {"context_tokens": [4096, 8192]}, jobs=1)
    figs = load_seed_figures(toy, ConfigError, SWEEP, sweep_keys(type(cfg.workload)))
    rows = compare_sweep(figs, df, ("context_tokens", "hw"), cfg.workload)
    up, down, missed = rows
    assert up.kvtier == pytest.approx(RATIO, rel=1e-12)
    assert up.ratio == pytest.approx(RATIO / 3.0, rel=1e-12) and up.off  # 0.666: > 25% off
    assert down.kvtier == pytest.approx(1 / RATIO, rel=1e-12) and not down.off  # < 1 holds
    assert missed.kvtier is None  # the sweep ran no point at two SSDs


def test_kvtier_sweep_prints_the_paper_rows_with_the_ratio(
    toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one table row a line, whatever the terminal
    argv = ["sweep", "--scenario", str(toy), "--jobs", "1", "--out", str(tmp_path)]
    assert main([*argv, "--factor", "context_tokens=4096,8192"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "fetched bytes" in ln]
    up = next(ln for ln in lines if "8K / 4K" in ln)
    # seed 3.00, kvtier 2.00 (1.998), ratio 1.998 / 3 = 0.67, off by more than 25%
    cells = [c.strip() for c in up.strip("│ ").split("│")]
    assert cells[-4:] == ["3.00", "2.00", "0.67", "OFF"]
    down = next(ln for ln in lines if "4K / 8K" in ln)
    cells = [c.strip() for c in down.strip("│ ").split("│")]
    assert cells[-5:] == ["<", "1.00", "0.501", "-", "ok"]  # 410 / 819 < 1: holds
    text = " ".join(out.split())  # the console wraps long lines
    assert "OFF fetched bytes 8K / 4K (8K): the toy seed's 3.0" in text
    assert "1 of the seed's 3 figures over factors need points this sweep did not run: " in text
    assert "fetched bytes on two SSDs" in text.split("did not run: ")[1]


def test_a_sweep_figure_selecting_an_unknown_column_is_one_line(toy: Path, tmp_path: Path) -> None:
    raw = yaml.safe_load(toy.read_text())
    raw[SWEEP]["figures"][0]["at"] = {"variant": "1 SSD", "ssdz": 2}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigError, match=r"sweep_figures\.figures\[0\]\.at\.ssdz") as err:
        load_scenario(bad)
    assert "bad.yaml" in str(err.value) and "\n" not in str(err.value)
