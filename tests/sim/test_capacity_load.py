"""The load search of ``kvtier plan --max-load`` (sim.capacity.load): the bisection on a
pure function with a known threshold, and on a real serving run whose SLO boundary is
worked out by hand from one lone request's TTFT."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.capacity.evaluate import Point, Question, evaluate, with_slos
from sim.capacity.load import LoadSearch, add_unit_costs, bisect, search_loads, trace_rate
from sim.capacity.variants import Hardware, resolve_ssd
from sim.config import ConfigError
from traces.requests import RequestTrace, build_table


def test_bisection_finds_a_known_threshold_in_the_probes_worked_out() -> None:
    # bracket [1, 4], width 3: after k midpoints it is 3 / 2^k wide; 3/2^8 = 0.0117 > 0.01,
    # 3/2^9 = 0.0059 <= 0.01: 9 midpoints + the 2 ends = 11 probes
    b = bisect(lambda s: s <= 2.7, LoadSearch(1.0, 4.0, 0.01, 20))
    assert b.bound == "tol"
    assert b.probes == 11
    assert b.ok <= 2.7 < b.fail
    assert b.fail - b.ok == pytest.approx(3 / 2**9)


def test_bisection_ends_at_the_bracket_or_at_the_probe_cap() -> None:
    none = bisect(lambda s: False, LoadSearch(1.0, 4.0, 0.01, 20))
    assert (none.bound, none.probes) == ("none", 2) and math.isnan(none.ok)
    high = bisect(lambda s: True, LoadSearch(1.0, 4.0, 0.01, 20))
    assert (high.bound, high.ok, high.probes) == ("high", 4.0, 2)
    capped = bisect(lambda s: s <= 2.7, LoadSearch(1.0, 4.0, 0.01, 4))
    # ends, then 2.5 (meets), 3.25 (misses)
    assert (capped.bound, capped.probes, capped.ok, capped.fail) == ("probes", 4, 2.5, 3.25)


@pytest.mark.parametrize(
    ("low", "high", "tol", "probes", "flag"),
    [(2.0, 1.0, 0.1, 8, "--load-low"), (1.0, 1.0, 0.1, 8, "--load-low"),
     (1.0, 2.0, 0.0, 8, "--load-tol"), (1.0, 2.0, -1.0, 8, "--load-tol"),
     (0.0, 2.0, 0.1, 8, "--load-low"), (1.0, 2.0, 0.1, 1, "--load-probes")],
)  # fmt: skip
def test_bad_bracket_is_refused(low, high, tol, probes, flag) -> None:
    with pytest.raises(ConfigError, match=flag):
        LoadSearch(low, high, tol, probes)


N = 20  # requests, one a second at scale 1, each an 8,192-token prompt and one output token


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("load") / "t.parquet"
    table = build_table(np.arange(N, dtype=float), np.full(N, 8192), np.full(N, 1))
    RequestTrace(table, 16, "test: evenly spaced prompts").write_parquet(path)
    return str(path)


def test_real_search_brackets_the_hand_worked_boundary(trace: str) -> None:
    """A lone request's TTFT is its prefill time T.  At scale s request k arrives at k/s
    and, while the queue never holds two, starts when k-1 ends: TTFT_k = T + k (T - 1/s).
    numpy's P99 of 20 values sits 0.81 of the way from the 19th to the 20th, so
    P99 = T + 18.81 (T - 1/s), and P99 <= T + d holds up to 1/s* = T - d / 18.81."""
    point = Point("gpu-only", Hardware(resolve_ssd("9100 PRO"), 1, 1, 64.0))
    lone = evaluate(Question(trace=trace, arrival_scale=0.01), point)
    t = lone["ttft_p99_s"]
    d = 0.05
    s_star = 1 / (t - d / 18.81)
    assert 19 * d / 18.81 < t - d / 18.81  # the queue never holds two: the formula holds
    q = Question(trace=trace, slo_ttft_p99_s=t + d)
    assert trace_rate(q) == pytest.approx(1.0)  # 19 gaps over 19 s
    rules = LoadSearch(1.0, 8.0, 0.01, 12)
    rows = pd.DataFrame([{**evaluate(q, point), "cost_usd": 1000.0}])
    got = search_loads(q, rows, rules).iloc[0]
    assert got["max_load_bound"] == "tol"
    assert got["max_load_scale"] <= s_star < got["max_load_fail_scale"]
    assert got["max_load_req_s"] == pytest.approx(got["max_load_scale"])
    # the answer meets the SLO; one tolerance above it does not
    at = evaluate(replace(q, arrival_scale=float(got["max_load_scale"])), point)
    above = evaluate(replace(q, arrival_scale=float(got["max_load_scale"]) + rules.tol), point)
    assert with_slos(q, at)["meets_slo"] and not with_slos(q, above)["meets_slo"]
    # one output token a request, the last one's at its arrival (N-1)/s plus its TTFT
    s = float(got["max_load_scale"])
    last = (N - 1) / s + t + (N - 1) * (t - 1 / s)
    assert got["max_load_tok_s"] == pytest.approx(N / last, rel=1e-9)
    costs = add_unit_costs(rows.merge(pd.DataFrame([got]), on="key")).iloc[0]
    assert costs["usd_per_req_s"] == pytest.approx(1000.0 / got["max_load_req_s"])


def test_a_trace_without_a_rate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "once.parquet"
    RequestTrace(build_table(np.zeros(3), np.full(3, 64), np.full(3, 1)), 16, "t").write_parquet(
        path
    )
    with pytest.raises(ConfigError, match="no arrival rate"):
        trace_rate(Question(trace=str(path)))


def test_two_round_robin_replicas_move_the_boundary_as_worked_out(trace: str) -> None:
    """Two one-GPU replicas behind round_robin: each gets every other request, 2/s apart,
    so replica r's k-th request (k = 0..9) has TTFT T + k (T - 2/s), the same on both.
    Sorted, the 20 TTFTs come in equal pairs; numpy's P99 (index 18.81) lies inside the
    last pair: P99 = T + 9 (T - 2/s), and P99 <= T + d holds up to 2/s* = T - d/9."""
    ssd = resolve_ssd("9100 PRO")
    lone = evaluate(Question(base="h20-8ssd", trace=trace, arrival_scale=0.01),
                    Point("gpu-only", Hardware(ssd, 1, 1, 64.0, 1)))  # fmt: skip
    t, d = lone["ttft_p99_s"], 0.05
    s_star = 2 / (t - d / 9)
    q = Question(base="h20-8ssd", trace=trace, slo_ttft_p99_s=t + d)
    pair = Point("gpu-only", Hardware(ssd, 1, 1, 64.0, 2), replicas=2, router="round_robin")
    row = evaluate(q, pair)
    assert (row["status"], row["replicas"], row["router"]) == ("ok", 2, "round_robin")
    got = search_loads(q, pd.DataFrame([row]), LoadSearch(0.5, 4 * s_star, 0.01, 16)).iloc[0]
    assert got["max_load_bound"] == "tol"
    assert got["max_load_scale"] <= s_star < got["max_load_fail_scale"]


def test_probes_in_a_process_pool_give_the_search_of_this_process(trace: str) -> None:
    """The probes of two candidates run on a two-worker pool (sim.parallel, the plan's
    default executor) and in this process: the same brackets, probe for probe."""
    from sim.parallel import LocalExecutor

    ssd = resolve_ssd("9100 PRO")
    q = Question(base="h20-8ssd", trace=trace, slo_ttft_p99_s=1.5)
    points = [
        Point("gpu-only", Hardware(ssd, 1, 1, 64.0, 1)),
        Point("gpu-only", Hardware(ssd, 1, 1, 64.0, 2), replicas=2, router="round_robin"),
    ]
    rows = pd.DataFrame([evaluate(q, p) for p in points])
    rules = LoadSearch(0.5, 4.0, 0.1, 6)
    here = search_loads(q, rows, rules, LocalExecutor(1))
    pool = search_loads(q, rows, rules, LocalExecutor(2))
    pd.testing.assert_frame_equal(here, pool)
    one, two = here["max_load_scale"]
    assert two > one  # two replicas take more load than one of their GPUs alone


def test_arrival_scale_divides_the_arrival_times(trace: str) -> None:
    from sim.config import ServingParams
    from sim.registry import ParamError
    from sim.scenarios.serving import trace_tables

    table, _ = trace_tables(ServingParams(trace=trace, arrival_scale=4.0), 0)
    assert table.column("arrival_s").to_pylist() == [k / 4 for k in range(N)]
    assert table.column("input_tokens").to_pylist() == [8192] * N
    with pytest.raises(ParamError, match="arrival_scale"):
        ServingParams(trace="long_doc", arrival_scale=2.0)
