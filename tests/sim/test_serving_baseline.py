"""``python -m sim.serving.baseline``: a saved run compares equal to itself run
again, and a one-ulp change of one TTFT is caught and named."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.serving import baseline


def test_a_saved_baseline_compares_equal_and_a_changed_ttft_is_named(tmp_path, capsys) -> None:
    assert baseline.main(["save", str(tmp_path), "--designs", "lmcache", "--quick"]) == 0
    files = sorted(p.name for p in tmp_path.glob("*.parquet"))
    # three configurations, each requests/ops/devices; the small-tier one keeps its plan too
    assert len(files) == 3 * 3 + 1 and "lmcache__b16-small__plan.parquet" in files
    capsys.readouterr()
    assert baseline.main(["cmp", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count(": same") == 3
    cols = sum(pq.read_table(tmp_path / f).num_columns for f in files)
    assert f"0 of {cols} columns differ" in out

    path = tmp_path / "lmcache__b256__requests.parquet"
    t = pq.read_table(path)
    ttft = t.column("first_token_s").to_numpy(zero_copy_only=False).copy()
    ttft[0] = np.nextafter(ttft[0], math.inf)  # one ulp later
    i = t.column_names.index("first_token_s")
    pq.write_table(t.set_column(i, "first_token_s", pa.array(ttft)), path)
    assert baseline.main(["cmp", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "lmcache b256: DIFFER requests.first_token_s" in out
    assert f"1 of {cols} columns differ" in out


def test_nan_equals_nan_and_nothing_else_is_forgiven() -> None:
    a = pa.table({"x": [1.0, float("nan")], "y": [[1, 2], [3]]})
    assert baseline.differing(a, a) == []
    b = pa.table({"x": [1.0, 0.0], "y": [[1, 2], [3]]})
    assert baseline.differing(a, b) == ["x"]
    c = pa.table({"x": [1.0, float("nan")]})
    assert baseline.differing(a, c) == ["y"]  # a column gone is a difference


def test_bad_arguments_are_one_line(tmp_path, capsys) -> None:
    assert baseline.main(["cmp", str(tmp_path / "none")]) == 2
    assert "no baseline.json" in capsys.readouterr().err
    assert baseline.main(["save", str(tmp_path), "--designs", "nope"]) == 2
    assert "unknown nope" in capsys.readouterr().err
