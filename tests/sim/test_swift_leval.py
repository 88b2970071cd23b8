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
    assert paper_rows("sharegpt_long", "Qwen3-32B") is PAPER


def test_sharegpt_rows_of_another_master_say_fig10_is_the_32b_masters():
    lwm = {r[0]: r for r in paper_rows("sharegpt_long", "LWM-Text-1M")}
    plain = {r[0]: r for r in PAPER}
    assert lwm["load_share"][:4] == plain["load_share"][:4]
    assert "Qwen3-32B master's" in lwm["load_share"][4] != plain["load_share"][4]
    assert all(lwm[k] == plain[k] for k in plain if k != "load_share")


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


# Fig. 7 on L-Eval with the other two masters (swiftcache-leval-lwm, swiftcache-leval-14b)
LWM_TOKENS = 96 * 2**30 // (32 * 32 * 128 * 2 * 2)  # Table 2 LWM 0.50 MB: 524,288 B -> 196,608
Q14_TOKENS = 96 * 2**30 // (40 * 8 * 128 * 2 * 2)  # Table 2 14B 0.156 MB: 163,840 B -> 629,145


def test_other_masters_are_the_sharegpt_scenarios_with_the_l_eval_trace():
    """Master, workers, history bounds, host memory and variants are swiftcache-lwm's and
    swiftcache-14b's (§5.1: one model the master, the other two workers); only the master's
    trace and its ShareGPT-only fields differ."""
    import dataclasses

    sharegpt_only = {"trace", "leval_qa_share", "turns", "prompt_tokens", "reply_tokens"}
    for leval, sharegpt in (("swiftcache-leval-lwm", "swiftcache-lwm"),
                            ("swiftcache-leval-14b", "swiftcache-14b")):  # fmt: skip
        a, b = load_scenario(leval), load_scenario(sharegpt)
        wa, wb = dataclasses.asdict(a.workload), dataclasses.asdict(b.workload)
        assert "trace" in {k for k in wa if wa[k] != wb[k]} <= sharegpt_only
        assert wa["trace"] == "leval_long" and wb["trace"] == "sharegpt_long"
        assert a.variants == b.variants
    models = {n: [i.get("model", load_scenario(n).workload.model)
                  for i in load_scenario(n).workload.instances]
              for n in ("swiftcache-leval-lwm", "swiftcache-leval-14b")}  # fmt: skip
    assert models["swiftcache-leval-lwm"] == ["LWM-Text-1M", "Qwen3-14B", "Qwen3-32B"]
    assert models["swiftcache-leval-14b"] == ["Qwen3-14B", "LWM-Text-1M", "Qwen3-32B"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lwm_master_documents_over_20k_fit_96_gb(seed):
    # §5.1: LWM requests "greater than 20K, with no upper limit" (bound 64K, the
    # swiftcache-lwm assumption); the whole conversations fit 96 GiB at LWM's 0.5 MB a token
    cfg = load_scenario("swiftcache-leval-lwm")
    p = instance_params(cfg.workload, cfg.workload.instances[0])
    assert (p.model, p.context_tokens, p.max_context, p.sessions) == ("LWM-Text-1M", 20_000,
                                                                      64_000, 4)  # fmt: skip
    req, warm = (t.to_pandas() for t in leval_long_tables(p, seed))
    assert req["input_tokens"].min() >= 20_000
    assert (req["input_tokens"] + req["output_tokens"]).max() <= 64_000
    last = req.sort_values("turn").groupby("session_id").last()
    assert (last["input_tokens"] + last["output_tokens"]).sum() <= LWM_TOKENS == 196_608
    assert 1 <= len(warm) <= 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_14b_master_takes_all_12_documents(seed):
    # 20K-40K tokens (§5.1); 12 conversations of at most 40,000 tokens are 480,000 tokens,
    # under the 629,145 Qwen3-14B tokens of 96 GiB, so host memory never stops the draw and
    # the run measures the same documents as the Qwen3-32B master's (same draw, same window)
    cfg = load_scenario("swiftcache-leval-14b")
    p = instance_params(cfg.workload, cfg.workload.instances[0])
    assert p.model == "Qwen3-14B" and Q14_TOKENS == 629_145 > 12 * 40_000
    req, warm = (t.to_pandas() for t in leval_long_tables(p, seed))
    assert len(warm) == 12
    assert req["input_tokens"].between(20_000, 40_000).all()
    ref = load_scenario("swiftcache-leval")
    req32 = leval_long_tables(instance_params(ref.workload, ref.workload.instances[0]), seed)[0]
    assert req32.to_pandas()[["input_tokens", "arrival_s"]].equals(
        req[["input_tokens", "arrival_s"]]
    )


def test_each_master_s_l_eval_rows_carry_its_own_notes():
    from sim.scenarios.swift_paper import LEVAL_14B, LEVAL_LWM, LEVAL_ROWS

    rows = {m: {r[0]: r for r in paper_rows("leval_long", m)}
            for m in ("", "Qwen3-32B", "LWM-Text-1M", "Qwen3-14B")}  # fmt: skip
    for m, r in rows.items():  # the paper's figure is the dataset's, the same for every master
        assert (r["p99_vs_lmcache"][2], r["p99_vs_hicache"][2]) == (-0.58, -0.69), m
        assert r["hicache_over_lmcache"] == rows[""]["hicache_over_lmcache"]
    assert rows["Qwen3-32B"] == rows[""]
    assert rows[""]["p99_vs_hicache"][4] == LEVAL_ROWS["p99_vs_hicache"][2]
    assert rows["LWM-Text-1M"]["p99_vs_hicache"][4] == LEVAL_LWM
    assert rows["Qwen3-14B"]["p99_vs_lmcache"][4] == LEVAL_14B
    # Fig. 10 measures the Qwen3-32B master: another master's row says so
    assert (
        rows["LWM-Text-1M"]["load_share"][4]
        == rows["Qwen3-14B"]["load_share"][4]
        != (rows[""]["load_share"][4])
    )


def test_the_cli_notes_name_the_master_of_the_scenario():
    # P99s 1.0 / 0.5 / 0.25 s: -75% vs LMCache (ratio 1.29) and -50% vs HiCache (0.72) are
    # both gaps over 25%, so each scenario's caption carries its master's note
    import pandas as pd

    from hwprofiles import load_profile
    from sim.scenarios.swift_paper import LEVAL_14B, LEVAL_HICACHE, LEVAL_LWM
    from tests.kvtier.test_narrow_tables import _RELOAD

    summary = pd.DataFrame([{"design": d, "ttft_p99_s": v, "ttft_mean_s": 0.2,
                             "blocked_io_mean_s": 0.01, "lent_gb": 0.0}
                            for d, v in (("vLLM+LMCache", 1.0), ("SGLang HiCache", 0.5),
                                         ("SwiftCache", 0.25))])  # fmt: skip
    prof = load_profile("h20-4gpu-nvlink")
    for name, note in (("swiftcache-leval", LEVAL_HICACHE), ("swiftcache-leval-lwm", LEVAL_LWM),
                       ("swiftcache-leval-14b", LEVAL_14B)):  # fmt: skip
        caption = _swift_paper_table(load_scenario(name), summary, prof, _RELOAD).caption
        assert note in caption, name
        others = {LEVAL_HICACHE, LEVAL_LWM, LEVAL_14B} - {note}
        assert not any(o in caption for o in others), name
