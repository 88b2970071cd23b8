"""Seed 002's L-Eval workload as the master serves it (trace ``leval_long``,
sim/scenarios/swift_traces.py) and the Fig. 7 rows it is held against."""

from __future__ import annotations

import numpy as np
import pytest

from kvtier.cli.simulate import _swift_paper_table
from sim.config import load_scenario
from sim.scenarios.serving_instances import instance_params
from sim.scenarios.swift_paper import PAPER, paper_rows
from sim.scenarios.swift_traces import leval_long_tables


def _master(seed: int):
    cfg = load_scenario("swiftcache-leval")
    p = instance_params(cfg.workload, cfg.workload.instances[0])
    table, warm = leval_long_tables(p, seed)
    return p, table.to_pandas(), warm.to_pandas()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selected_requests_warm_ups_and_host_memory(seed):
    p, req, warm = _master(seed)
    # §5.1: requests of ~20K-40K tokens (context_tokens..max_context, input + output)
    assert req["input_tokens"].min() >= p.context_tokens
    assert (req["input_tokens"] + req["output_tokens"]).max() <= p.max_context
    # one warm-up history per document, at most `sessions` documents, each with a measured turn
    assert len(warm) <= p.sessions and sorted(warm["session_id"]) == list(range(len(warm)))
    assert set(req["session_id"]) == set(warm["session_id"])
    # the first measured turn re-sends the warm-up history, then asks one question
    first = req.sort_values("turn").groupby("session_id").first()
    question = first["input_tokens"] - warm.set_index("session_id")["input_tokens"]
    assert question.between(1, 2_048).all()
    # the whole conversations fit 96 GiB of host memory: Qwen3-32B keeps
    # 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 262,144 bytes a token
    # (seed 002 Table 2: 0.25 MB), so 96 x 2^30 / 262,144 = 393,216 tokens
    last = req.sort_values("turn").groupby("session_id").last()
    assert (last["input_tokens"] + last["output_tokens"]).sum() <= 393_216
    # arrivals: sorted, the documents' first measured turns in session order
    assert np.all(np.diff(req["arrival_s"].to_numpy()) >= 0)
    assert np.all(np.diff(first.sort_index()["arrival_s"].to_numpy()) > 0)


def test_host_memory_bounds_the_documents_taken():
    """With 10 GiB of host memory (10 x 2^30 / 262,144 = 40,960 Qwen3-32B tokens) and
    conversations of 20,000-40,000 tokens, one document always fits and few pairs do;
    with no host tier the run takes all `sessions` documents."""
    cfg = load_scenario("swiftcache-leval")
    p = instance_params(cfg.workload, cfg.workload.instances[0])
    import dataclasses

    small = dataclasses.replace(p, design_params={"cpu_gib": 10.0})
    for seed in range(3):
        req = leval_long_tables(small, seed)[0].to_pandas()
        last = req.sort_values("turn").groupby("session_id").last()
        assert 1 <= len(last) <= 2
        assert (last["input_tokens"] + last["output_tokens"]).sum() <= 40_960
    none = dataclasses.replace(p, design_params={})
    assert len(leval_long_tables(none, 0)[1]) == p.sessions


def test_leval_rows_by_hand():
    rows = {r[0]: r for r in paper_rows("leval_long")}
    assert rows["p99_vs_lmcache"][2] == -0.58 and rows["p99_vs_hicache"][2] == -0.69
    # implied HiCache / LMCache P99: (1 - 0.58) / (1 - 0.69) = 0.42 / 0.31 = 1.3548
    assert rows["hicache_over_lmcache"][2] == pytest.approx(0.42 / 0.31, abs=5e-4)
    # the other rows are ShareGPT's table's, unchanged
    assert [r[0] for r in paper_rows("leval_long")] == [r[0] for r in PAPER]
    assert rows["reload_5k_pcie_ms"] == PAPER[0]
    assert paper_rows("sharegpt_long") is PAPER


def test_the_cli_table_names_l_eval_for_its_scenario():
    import pandas as pd

    from hwprofiles import load_profile
    from tests.kvtier.test_narrow_tables import _RELOAD

    summary = pd.DataFrame([{"design": d, "ttft_p99_s": v, "ttft_mean_s": 0.2,
                             "blocked_io_mean_s": 0.01, "lent_gb": 0.0}
                            for d, v in (("vLLM+LMCache", 1.0), ("SGLang HiCache", 0.5),
                                         ("SwiftCache", 0.25))])  # fmt: skip
    prof = load_profile("h20-4gpu-nvlink")
    text = {}
    for name in ("swiftcache", "swiftcache-leval"):
        t = _swift_paper_table(load_scenario(name), summary, prof, _RELOAD)
        text[name] = list(t.columns[0]._cells)
    assert any("L-Eval" in c for c in text["swiftcache-leval"])
    assert not any("L-Eval" in c for c in text["swiftcache"])
