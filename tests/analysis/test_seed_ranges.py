"""analysis/seed_ranges.py: a seed figure across a sensitivity run's rows, by hand.

Two designs, a and b; the figure is a / b on ``tokens_per_s`` with the relation
"> 1".  As given a = 12, b = 10 (1.2, ok); assumption x at its low end gives a = 9
(0.9: the relation breaks, OFF), at its high end a = 15 (1.5); assumption y moves
only b, to 8 and 12 (1.5 and 1.0: at 1.0 the relation "> 1" breaks).  So the
figure's low is 0.9 at "x low", its high 1.5 at "x high" (the first of the two
1.5s), and its verdict changes at "x low" and "y high".  A second figure, "= 1.0"
on b alone with the default 25% tolerance: 10 as given is OFF (ratio 10); it never
changes.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.seed_ranges import ranges

YAML = """name: toy
description: d
seed: 0
workload: {kind: swarm}
variants: [{name: a}, {name: b}]
seed_figures:
  seed: toy
  figures:
    - {name: a over b, section: s, metric: tokens_per_s, unit: x, relation: ">", seed: 1.0,
       at: {variant: a}, over: {variant: b}}
    - {name: b alone, section: s, metric: tokens_per_s, unit: tok/s, seed: 1.0,
       at: {variant: b}}
"""


def _runs() -> pd.DataFrame:
    rows = []
    for assumption, at, a, b in [
        ("(as given)", "base", 12.0, 10.0),
        ("x", "low", 9.0, 10.0),
        ("x", "high", 15.0, 10.0),
        ("y", "low", 12.0, 8.0),
        ("y", "high", 12.0, 12.0),
    ]:
        rows += [
            {"assumption": assumption, "at": at, "variant": "a", "tokens_per_s": a},
            {"assumption": assumption, "at": at, "variant": "b", "tokens_per_s": b},
        ]
    return pd.DataFrame(rows)


def test_a_figure_across_the_assumption_ends_by_hand(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(YAML)
    t = ranges(path, _runs()).set_index("figure")
    r = t.loc["a over b"]
    assert (r.kvtier, r.verdict) == (pytest.approx(1.2), "ok")
    assert (r.low, r.low_at) == (pytest.approx(0.9), "x low")
    assert (r.high, r.high_at) == (pytest.approx(1.5), "x high")
    assert r.verdict_changes_at == "x low; y high"
    b = t.loc["b alone"]
    assert (b.kvtier, b.verdict, b.verdict_changes_at) == (10.0, "OFF", "")
    assert (b.low, b.high) == (8.0, 12.0)


def test_a_plain_summary_is_one_run(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(YAML)
    base = _runs().query("at == 'base'").drop(columns=["assumption", "at"])
    t = ranges(path, base).set_index("figure")
    assert t.loc["a over b", "kvtier"] == pytest.approx(1.2)
    assert t.loc["a over b", "low_at"] == "(as given)"


KVD_YAML = """name: toy-pairs
description: d
seed: 0
workload: {kind: kvdrive}
variants: [{name: a}, {name: b}]
seed_figures:
  seed: toy
  figures:
    - {name: a over b, section: s, metric: tokens_per_s, unit: x, relation: ">", seed: 1.0,
       at: {variant: a}, over: {variant: b}}
"""


def test_a_kvdrive_run_over_pairs_is_read_by_design_name(tmp_path):
    # kvtier sim names a kvdrive run's rows "a | 60K | 8"; the figures select "a".
    # Two pairs: a / b = 12 / 10 = 1.2 at 60K x 8 and 6 / 8 = 0.75 at 120K x 4 (OFF)
    path = tmp_path / "toy.yaml"
    path.write_text(KVD_YAML)
    rows = [
        {"variant": f"{v} | {pair}", "context_tokens": n, "batch": b, "tokens_per_s": t}
        for v, pair, n, b, t in [
            ("a", "60K | 8", 61440, 8, 12.0),
            ("b", "60K | 8", 61440, 8, 10.0),
            ("a", "120K | 4", 122880, 4, 6.0),
            ("b", "120K | 4", 122880, 4, 8.0),
        ]
    ]
    t = ranges(path, pd.DataFrame(rows))
    assert t["kvtier"].tolist() == [pytest.approx(1.2), pytest.approx(0.75)]
    assert t["verdict"].tolist() == ["ok", "OFF"]
