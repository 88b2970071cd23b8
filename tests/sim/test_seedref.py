"""The seed-figure table: ratio arithmetic, flagging, expansion, and the YAMLs' figures."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from kvtier.cli.tables import fit
from sim.config import ConfigError, load_scenario
from sim.scenarios.seedref import (
    SeedFigure,
    SeedFigures,
    compare,
    gap_lines,
    judge,
    load_seed_figures,
    seed_tables,
)

SCENARIOS = ("unified-pooling", "paged-ssd", "kvdrive")


def fig(seed: float, relation: str = "=", **kw) -> SeedFigure:
    at = kw.pop("at", {"design": "A"})
    metric = kw.pop("metric", "ttft_mean_s")
    return SeedFigure("f", "§1", metric, "s", seed, at, relation=relation, **kw)


# ---- judge: ratio and flag, worked by hand -------------------------------------------
def test_ratio_is_kvtier_over_seed_and_25_percent_is_the_edge():
    r = judge(fig(5.6), "", 2.8, 0.25)
    assert r.ratio == pytest.approx(0.5) and r.off  # 2.8 / 5.6 = 0.5: 50% away
    edge = judge(fig(2.0), "", 2.5, 0.25)  # 2.5 / 2.0 = 1.25: exactly 25%, not more
    assert edge.ratio == 1.25 and not edge.off
    assert judge(fig(2.0), "", 2.52, 0.25).off  # 1.26
    assert not judge(fig(2.0), "", 1.6, 0.25).off  # 0.80: 20% below
    assert judge(fig(2.0), "", 1.4, 0.25).off  # 0.70: 30% below
    assert not judge(fig(2.0), "", 2.52, 0.3).off  # a wider tolerance lets 1.26 pass


def test_orderings_and_zero_seeds_have_no_ratio():
    assert not judge(fig(1.0, ">"), "", 1.06, 0.25).off
    assert judge(fig(1.0, ">"), "", 1.0, 0.25).off  # equal is not slower
    assert judge(fig(10.0, "<"), "", 10.0, 0.25).off
    assert not judge(fig(10.0, "<"), "", 9.9, 0.25).off
    assert judge(fig(1.0, ">"), "", 5.0, 0.25).ratio is None
    zero_ok, zero_off = judge(fig(0.0), "", 0.0, 0.25), judge(fig(0.0), "", 0.001, 0.25)
    assert zero_ok.ratio is None and not zero_ok.off and zero_off.off
    missing = judge(fig(1.0), "", None, 0.25)
    assert missing.kvtier is None and not missing.off


# ---- compare: selection, ratios of two runs, expansion -------------------------------
def _summary() -> pd.DataFrame:
    rows = []
    for model, scale in (("M1", 1.0), ("M2", 2.0)):
        for ctx, t in ((1024, 0.5), (131072, 6.0)):
            rows.append({"design": "base", "model": model, "context_tokens": ctx,
                         "ttft_mean_s": scale * t, "blocked_io_mean_s": 0.0})  # fmt: skip
            rows.append({"design": "pool", "model": model, "context_tokens": ctx,
                         "ttft_mean_s": scale * t / 3, "blocked_io_mean_s": 0.0})  # fmt: skip
    return pd.DataFrame(rows)


def test_ratio_of_two_designs_and_of_two_contexts():
    figs = SeedFigures("t", (
        fig(3.0, at={"design": "base", "model": "M1", "context_tokens": 131072},
            over={"design": "pool"}),
        fig(4.0, at={"design": "base", "model": "M2", "context_tokens": 131072},
            over={"context_tokens": 1024}),
    ))  # fmt: skip
    a, b = compare(figs, _summary())
    assert a.kvtier == pytest.approx(3.0) and a.ratio == pytest.approx(1.0) and not a.off
    assert a.where == "M1 128K"
    assert b.kvtier == pytest.approx(12.0 / 1.0)  # 2 x 6.0 over 2 x 0.5
    assert b.ratio == pytest.approx(3.0) and b.off


def test_a_key_left_out_expands_one_row_per_value():
    figs = SeedFigures("t", (fig(2.0, at={"design": "pool", "context_tokens": 131072}),))
    rows = compare(figs, _summary())
    assert [r.where for r in rows] == ["M1 128K", "M2 128K"]
    assert [r.kvtier for r in rows] == pytest.approx([2.0, 4.0])
    assert [r.off for r in rows] == [False, True]  # 1.0 and 2.0 times the seed


def _pairs() -> pd.DataFrame:
    """Two variants of one design and a baseline at three (context, batch) pairs."""
    rows = []
    for ctx, batch, a, b, base in ((61440, 8, 8.0, 9.0, 8.0), (122880, 4, 4.0, 5.0, 4.0),
                                   (368640, 2, 1.0, 1.3, 1.0)):  # fmt: skip
        for variant, design, v in (("K (fixed)", "k", a), ("K (tuned)", "k", b),
                                   ("S", "s", base)):  # fmt: skip
            rows.append({"design": design, "variant": variant, "context_tokens": ctx,
                         "batch": batch, "ttft_mean_s": v})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_ratio_to_another_variant_keeps_the_pair_and_max_keeps_one_row():
    over = {"design": "s", "variant": "S"}
    each = fig(1.7, at={"variant": "K (tuned)"}, over=over)
    top = fig(1.7, at={"variant": "K (tuned)"}, over=over, reduce="max")
    rows = compare(SeedFigures("t", (each, top)), _pairs())
    # 9/8, 5/4, 1.3/1: the variant is not carried into the denominator, the pair is
    assert [r.kvtier for r in rows[:3]] == pytest.approx([1.125, 1.25, 1.3])
    assert [r.where for r in rows[:3]] == ["60K x 8", "120K x 4", "360K x 2"]
    assert rows[3].kvtier == pytest.approx(1.3) and rows[3].where == "max of 3: 360K x 2"
    assert rows[3].ratio == pytest.approx(1.3 / 1.7) and not rows[3].off  # 0.76: 24% away


def test_no_run_and_a_zero_denominator():
    figs = SeedFigures("t", (
        fig(1.0, at={"design": "absent"}),
        fig(1.0, metric="blocked_io_mean_s", at={"design": "base", "model": "M1",
            "context_tokens": 1024}, over={"design": "pool"}),
    ))  # fmt: skip
    absent, zero = compare(figs, _summary())
    assert absent.kvtier is None and not absent.off
    assert math.isnan(zero.kvtier) and zero.off  # 0 / 0: no ratio holds


def test_table_marks_every_off_row_and_truncates_nothing_when_narrow():
    df = _summary()
    figs = SeedFigures("t", (
        fig(3.0, at={"design": "base", "context_tokens": 131072}, over={"design": "pool"}),
        fig(9.0, at={"design": "pool", "context_tokens": 131072}),
        fig(1.0, at={"design": "absent"}),
    ))  # fmt: skip
    rows = compare(figs, df)
    console = Console(record=True, width=60, color_system=None)
    for table in seed_tables(figs, rows, "narrow"):
        for part in fit(table, console.width):
            console.print(part)
    text = console.export_text()
    marks = [line.rstrip(" │").split()[-1] for line in text.splitlines() if line.startswith("│")]
    assert marks.count("OFF") == sum(r.off for r in rows) == 2  # 2/9 and 4/9 of the seed
    assert text.count("no run") == 1 and "…" not in text


def test_gap_lines_name_each_off_figure_once_with_where_and_mechanism():
    df = _summary()
    figs = SeedFigures("t", (
        # base / pool = 3 at every model: seed 3.0 holds, seed 9.0 is off at both models
        fig(3.0, at={"design": "base", "context_tokens": 131072}, over={"design": "pool"},
            gap="never printed"),
        fig(9.0, at={"design": "base", "context_tokens": 131072}, over={"design": "pool"},
            gap="the mechanism"),
        fig(1.0, at={"design": "pool", "model": "M1", "context_tokens": 1024}),  # 0.5 / 1.0
    ))  # fmt: skip
    lines = gap_lines(compare(figs, df))
    assert lines == ["OFF f (M1 128K, M2 128K): the mechanism",
                     "OFF f (M1 1K): no mechanism given"]  # fmt: skip


# ---- the scenario YAMLs ----------------------------------------------------------------
def test_every_unified_pooling_figure_names_the_mechanism_of_a_gap():
    figs = load_seed_figures(load_scenario("unified-pooling").source_file)
    assert figs is not None
    assert [f.name for f in figs.figures if not f.gap] == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_seed_figure_names_a_section_and_a_run_of_its_scenario(name):
    cfg = load_scenario(name)
    figs = load_seed_figures(cfg.source_file)
    assert figs is not None and figs.figures
    designs = {v.name for v in cfg.variants}
    # a kvdrive summary's design column is the registry's design, not the variant's name
    kinds = {dict(v.overrides).get("design", cfg.workload.design) for v in cfg.variants}
    matrix = getattr(cfg.workload, "matrix", None) or {}
    for f in figs.figures:
        assert f.section.startswith(("§", "Abstract")), f.name
        for sel in (f.at, {**f.at, **f.over}):
            assert sel.get("design", next(iter(designs))) in designs | kinds, (f.name, sel)
            assert sel.get("variant", next(iter(designs))) in designs, (f.name, sel)
            for key in ("model", "context_tokens"):
                if key in sel and key in matrix:
                    assert sel[key] in matrix[key], (f.name, key)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("  - {name: x, metric: ttft_mean_s, unit: s, seed: 1.0, at: {design: a}}",
         "seed_figures.figures[0]: missing required key 'section'"),
        ("  - {name: x, section: '§1', metric: m, unit: hours, seed: 1.0, at: {design: a}}",
         "seed_figures.figures[0].unit"),
        ("  - {name: x, section: '§1', metric: m, unit: s, seed: 1.0, at: {gpu: a}}",
         "seed_figures.figures[0].at.gpu"),
        ("  - {name: x, section: '§1', metric: m, unit: s, seed: 1.0, at: {}, relation: '>='}",
         "seed_figures.figures[0].relation"),
    ],
)  # fmt: skip
def test_a_bad_figure_is_one_line_naming_file_line_and_key(tmp_path: Path, line, key):
    src = Path(load_scenario("paged-ssd").source_file).read_text()
    head = src.split("seed_figures:")[0]
    path = tmp_path / "s.yaml"
    path.write_text(head + "seed_figures:\n seed: t\n figures:\n" + line + "\n")
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(path))
    msg = str(exc.value)
    assert key in msg and f"{path}:" in msg and "\n" not in msg
