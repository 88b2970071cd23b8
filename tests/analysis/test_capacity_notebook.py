"""The capacity notebook draws plan.parquet: every evaluated point once, the front's line
is the front computed independently from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.capacity_plots import LABELS
from sim.capacity.evaluate import Question
from sim.capacity.prices import add_costs, load_prices
from sim.capacity.search import Space, pareto, search


def test_capacity_notebook_draws_a_tiny_plan(run_notebook, tmp_path: Path) -> None:
    q = Question(docs=2, context_tokens=16384)
    space = Space(("pool",), ("Samsung 9100 PRO 2 TB",), (1, 2), (1,), (32.0,))
    df = add_costs(search(q, space).rows, q.base, load_prices())
    df.to_parquet(tmp_path / "plan.parquet", index=False)
    probes = {
        "n": "len(ok)",
        "lines": "{ax.get_ylabel(): [list(map(float, ln.get_xdata())) for ln in ax.lines] "
        "for ax in front.axes}",
        "points": "sum(len(c.get_offsets()) for c in front.axes[0].collections)",
        "panels": "len(bmap.axes)",
    }
    _, got = run_notebook("capacity", {"RESULTS": str(tmp_path)}, probes)
    ok = df[df["status"] == "ok"]
    assert got["n"] == len(ok) == 2 and got["points"] == 2  # each point drawn once
    front = pareto(df, "cost_usd", "ttft_p99_s")
    assert got["lines"][LABELS["ttft_p99_s"]] == [pytest.approx(front["cost_usd"].tolist())]
    assert got["panels"] == 1  # one design x one SSD model
