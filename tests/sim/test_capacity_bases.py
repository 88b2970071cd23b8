"""A plan over several base profiles (GPU models): the answer priced by hand, the fronts
across bases against the per-base plans, the walks kept within a base, the KV cache
arithmetic against the engine (a two-base plan on Ray: tests/sim/test_parallel.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.capacity.evaluate import Question
from sim.capacity.load import add_unit_costs
from sim.capacity.prices import add_costs, add_hourly, load_prices
from sim.capacity.search import Space, pareto, search
from sim.capacity.store import ResultStore
from sim.config import ConfigError
from sim.parallel import LocalExecutor

PM9A3 = "Samsung PM9A3 3.84 TB U.2"
# shipped prices: platform 10,000 (assumed) + 64 GiB x 18.58 + PM9A3 600 (assumed) + slot 50
# (assumed) beside the GPU: L20 8,000 (assumed), H20 12,000 (street)
REST = 10000 + 64 * 18.58 + 600 + 50
L20_USD, H20_USD = REST + 8000, REST + 12000  # 19,839.12 and 23,839.12
TINY = ["plan", "--base", "h20-server,l20-server", "--docs", "2", "--context-tokens", "4096",
        "--designs", "pool", "--ssd-models", "PM9A3", "--ssd-counts", "1", "--dram-modules", "1",
        "--dram-gib", "64", "--no-prune", "--jobs", "1"]  # fmt: skip


def test_two_base_plan_answers_the_cheapest_worked_out_from_the_prices(tmp_path, capsys) -> None:
    from kvtier.cli.main import main

    out = tmp_path / "plan"
    assert main([*TINY, "--ttft-p99", "1000", "--gpu-time", "auto", "--out", str(out)]) == 0
    first = capsys.readouterr().out
    df = pd.read_parquet(out / "plan.parquet").set_index("base")
    assert list(df["status"]) == ["ok", "ok"]
    assert df.loc["l20-server", "cost_usd"] == pytest.approx(L20_USD)
    assert df.loc["h20-server", "cost_usd"] == pytest.approx(H20_USD)
    assert list(df["gpu_model"]) == ["NVIDIA H20", "NVIDIA L20"]
    # --gpu-time auto: neither GPU is in the measured tables, each row says it fell back
    assert all(t.startswith("roofline") and "is not in" in t for t in df["gpu_time"])
    # purchase price over 3 years of 8,760 h
    assert df.loc["l20-server", "usd_per_hour"] == pytest.approx(L20_USD / (3 * 8760))
    # every point meets a 1000 s TTFT: the cheaper machine answers, its cost 94% assumed
    # (platform, L20, PM9A3 and slot: 18,650 of 19,839.12)
    assert "its profile: " in first and "/profiles/l20-server--" in first
    assert f"rests {18650 / L20_USD:.0%} on assumed prices" in first
    # decode reads the weights every step: L20 (864 GB/s HBM) is slower than H20 (4.0 TB/s);
    # a TPOT limit between the two leaves the dearer H20 machine (44.7% assumed: 10,650)
    l20, h20 = df.loc["l20-server", "tpot_p99_s"], df.loc["h20-server", "tpot_p99_s"]
    assert l20 > 2 * h20
    limit = str((l20 * h20) ** 0.5)
    again = [*TINY, "--ttft-p99", "1000", "--tpot-p99", limit, "--out", str(out)]
    assert main([*again, "--gpu-time", "auto"]) == 0
    second = capsys.readouterr().out
    assert "simulated 0 points this run" in second  # judged again from the stored points
    assert "/profiles/h20-server--" in second
    assert f"rests {10650 / H20_USD:.0%} on assumed prices" in second


def test_hourly_cost_and_cost_per_million_tokens_by_hand() -> None:
    # 26,280 $ over 3 x 8,760 h = 1 $/h; 1,000 output tok/s = 3.6 M tok/h: 0.2778 $/M tok
    df = pd.DataFrame({"cost_usd": [26280.0], "max_load_req_s": [4.0], "max_load_tok_s": [1000.0]})
    got = add_unit_costs(add_hourly(df)).iloc[0]
    assert got["usd_per_hour"] == pytest.approx(1.0)
    assert got["usd_per_mtok"] == pytest.approx(1 / 3.6)
    assert (got["usd_per_req_s"], got["usd_per_tok_s"]) == (26280.0 / 4, 26.28)
    assert add_hourly(df, 5.0)["usd_per_hour"].iloc[0] == pytest.approx(0.6)


BASES = ("h20-8ssd", "dgx-h100", "l20-server")


def _space(bases: tuple[str, ...]) -> Space:
    return Space(("pool",), (PM9A3,), (1, 2), (1,), (64.0,), (1, 2), bases=bases)


def test_front_across_bases_is_the_front_of_the_per_base_plans() -> None:
    """Llama-3.1-8B, TP 1 or 2, on H20s, H100 SXMs and an L20 (one GPU: its TP-2 chain is
    unfit).  One search over the three bases, and one search per base (each its own store,
    simulated again): the same points ran per base (the walks stay within a base), and the
    fronts of the joint plan are the fronts of the union of the per-base plans' fronts."""
    q = Question(docs=2, context_tokens=8192)
    prices, ex = load_prices(), LocalExecutor(1)
    joint = search(q, _space(BASES), ex, ResultStore())
    alone = [search(Question(base=b, docs=2, context_tokens=8192), _space(()), ex, ResultStore())
             for b in BASES]  # fmt: skip
    assert joint.grid == sum(r.grid for r in alone) == 3 * 4
    j = add_costs(joint.rows, q.base, prices)
    for b, r in zip(BASES, alone, strict=True):
        mine = j[j["base"] == b]
        ran = set(r.rows.loc[r.rows["evaluated"], "key"])
        assert set(mine.loc[mine["evaluated"], "key"]) == ran
    unfit = j[j["status"].str.startswith("skipped: unfit")]
    assert set(unfit["base"]) == {"l20-server"} and set(unfit["gpus"]) == {2}
    assert "l20-server has 1 GPU(s), 2 asked" in unfit["status"].iloc[0]
    per_base = [pareto(add_costs(r.rows, b, prices), "cost_usd", m)
                for b, r in zip(BASES, alone, strict=True)
                for m in ("ttft_p99_s", "throughput_tok_s")]  # fmt: skip
    union = pd.concat(per_base).drop_duplicates("key")
    for metric in ("ttft_p99_s", "throughput_tok_s"):
        front = pareto(j, "cost_usd", metric)
        assert set(front["key"]) == set(pareto(union, "cost_usd", metric)["key"]), metric
    # the cost-vs-TTFT front spans GPU models: the cheapest machine is the L20's
    front = pareto(j, "cost_usd", "ttft_p99_s")
    assert front.iloc[0]["gpu_model"] == "NVIDIA L20" and front["gpu_model"].nunique() >= 2


def test_the_plans_kv_arithmetic_is_the_engines_rejection(tmp_path) -> None:
    """The planner's GPU KV cache (kv_tokens: vLLM's 0.9 of HBM less the weights, in
    blocks) against the engine's own: a request of exactly that many tokens runs, one
    token more is refused before the run (which the engine would reject), and the
    planner calls only that one unfit, naming it, with the run's own words."""
    import numpy as np

    from sim.capacity.evaluate import kv_tokens, scenario, unfit
    from sim.capacity.variants import Hardware, derive
    from sim.runner import run
    from traces.requests import RequestTrace, build_table

    hw = Hardware(PM9A3, 1, 1, 64.0, 1)
    cap = kv_tokens(Question(base="h20-server"), hw)
    # 0.9 x 96 GiB - 14.96 GiB of Llama-3.1-8B weights, over 128 KiB of KV a token
    assert cap == 2286 * 256
    path = tmp_path / "t.parquet"
    table = build_table(np.array([0.0, 1.0]), np.array([cap - 1, cap]), np.array([1, 1]))
    RequestTrace(table, 16, "test: at and one over the cache").write_parquet(path)
    q = Question(base="h20-server", trace=str(path))
    profile = derive(q.base, hw, tmp_path)
    with pytest.raises(ConfigError, match=f"request 1 holds {cap + 1:,} tokens of KV"):
        run(scenario(q, "gpu-only", profile), profile, None)
    at = Question(base="h20-server", trace=str(path), requests=1)
    v = run(scenario(at, "gpu-only", profile), profile, None).variants[0]
    assert v.summary["gpu_kv_blocks"] * 256 == cap
    assert v.records.requests.column("rejected").to_pylist() == [False]
    assert unfit(Question(base="h20-server", trace=str(path), requests=1), hw) == ""
    assert unfit(q, hw).startswith(f"request 1 holds {cap + 1:,} tokens of KV")


def test_gpu_time_auto_falls_back_per_base() -> None:
    """--gpu-time auto on an H100 PCIe base (the tables' H100 SXM, scaled by the datasheet
    peaks) and an H20 base (not in the tables: the roofline), in one search: each row
    names what timed it."""
    q = Question(docs=2, context_tokens=4096, gpu_time="auto")
    space = Space(("pool",), (PM9A3,), (1,), (1,), (64.0,), bases=("h100-2dimm-2ssd", "h20-server"))
    rows = search(q, space, LocalExecutor(1), ResultStore()).rows.set_index("base")
    assert rows.loc["h100-2dimm-2ssd", "gpu_time"].startswith("aiconfigurator-core")
    assert "scaled by the roofline ratio" in rows.loc["h100-2dimm-2ssd", "gpu_time"]
    assert rows.loc["h20-server", "gpu_time"].startswith("roofline")
    assert "NVIDIA H20 is not in" in rows.loc["h20-server", "gpu_time"]
