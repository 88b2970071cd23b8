"""analysis/swift_p99.py's pooled table, on hand-made requests."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.swift_p99 import DESIGNS, p99_table


def test_pooled_p99_by_hand():
    # two seeds of 100 requests each: design k's TTFTs are (1..100) x (k + 1) / 100 s,
    # the same in both seeds; SwiftCache (k = 2) three times LMCache's (k = 0)
    rows = [{"design": d, "seed": s, "ttft_s": i * (k + 1) / 100}
            for k, d in enumerate(DESIGNS) for s in (0, 1) for i in range(1, 101)]  # fmt: skip
    t = p99_table(pd.DataFrame(rows))
    # numpy's P99 of 1..100 (each twice) is 99 + 0.01 x 1 = 99.01 at linear interpolation
    assert t.loc["vLLM+LMCache", "p99_s"] == pytest.approx(0.9901)
    assert t.loc["SwiftCache", "p99_s"] == pytest.approx(3 * 0.9901)
    assert t.loc["vLLM+LMCache", "requests"] == 200
    assert t.loc["vLLM+LMCache", "above_p99"] == 2  # the two requests of 1.00 s
    assert t.loc["vLLM+LMCache", "swift_p99_change"] == pytest.approx(2.0)
    assert t.loc["SGLang HiCache", "swift_p99_change"] == pytest.approx(0.5)
    # each seed alone has the same P99 as the pool here
    assert t.loc["SGLang HiCache", "seed_p99_min_s"] == pytest.approx(2 * 0.9901)


def test_paper_rows_beside_the_pooled_p99_by_hand():
    from analysis.swift_p99 import paper_comparison

    # P99s 1.0 / 0.5 / 0.25 s: SwiftCache -75% vs LMCache, -50% vs HiCache, HiCache/LMCache 0.5
    table = pd.DataFrame({"p99_s": [1.0, 0.5, 0.25], "swift_p99_change": [-0.75, -0.5, 0.0]},
                         index=list(DESIGNS))  # fmt: skip
    rows = paper_comparison(table, "leval_long")
    assert list(rows["paper"]) == [-0.58, -0.69, 1.355]
    assert list(rows["kvtier"]) == [-0.75, -0.5, 0.5]
    assert rows["ratio"].tolist() == pytest.approx([0.75 / 0.58, 0.5 / 0.69, 0.5 / 1.355])
    assert paper_comparison(table, "sharegpt_long")["paper"].tolist() == [-0.54, -0.67, 1.394]
