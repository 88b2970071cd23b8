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
    # a GPU dimension: Llama-3.1-8B tensor parallel over 1 or 2 of h20-8ssd's GPUs
    q = Question(base="h20-8ssd", docs=2, context_tokens=16384)
    space = Space(("pool",), ("Samsung PM9A3 3.84 TB U.2",), (1, 2), (1,), (32.0,), (1, 2))
    df = add_costs(search(q, space).rows, q.base, load_prices())
    df.to_parquet(tmp_path / "plan.parquet", index=False)
    probes = {
        "n": "len(ok)",
        "lines": "{ax.get_ylabel(): [list(map(float, ln.get_xdata())) for ln in ax.lines] "
        "for ax in front.axes}",
        "points": "sum(len(c.get_offsets()) for c in front.axes[0].collections)",
        "panels": "len(bmap.axes)",
        "titles": "[ax.get_title() for ax in bmap.axes]",
        "by_gpus": "by_gpus.reset_index()[['gpus', 'points', 'best_ttft_s']].values.tolist()",
    }
    _, got = run_notebook("capacity", {"RESULTS": str(tmp_path)}, probes)
    ok = df[df["status"] == "ok"]
    assert got["n"] == len(ok) == 4 and got["points"] == 4  # each point drawn once
    front = pareto(df, "cost_usd", "ttft_p99_s")
    assert got["lines"][LABELS["ttft_p99_s"]] == [pytest.approx(front["cost_usd"].tolist())]
    # one design x one SSD model x two GPU counts: a panel per GPU count
    assert got["panels"] == 2 and all("(TP)" in t for t in got["titles"])
    for g, n, ttft in got["by_gpus"]:  # per GPU count: its points, its best TTFT
        assert n == 2 and ttft == pytest.approx(ok[ok["gpus"] == g]["ttft_p99_s"].min())
