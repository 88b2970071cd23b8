"""The swiftcache scenario's report tables against hand-made summaries, and its trace."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from sim.config import ServingParams
from sim.scenarios.swift_traces import sharegpt_long_tables
from sim.scenarios.swiftcache import prefill_breakdown, worker_interference


def _summary() -> pa.Table:
    return pa.Table.from_pylist([
        {"design": "LMCache", "lent_gb": 0.0, "ttft_mean_s": 0.5, "queue_mean_s": 0.1,
         "blocked_io_mean_s": 0.25, "store_gb": 3.0, "w_ttft_mean_s": 0.10, "w_tpot_mean_s": 0.02},
        {"design": "HiCache", "lent_gb": 0.0, "ttft_mean_s": 0.4, "queue_mean_s": 0.0,
         "blocked_io_mean_s": 0.1, "store_gb": 3.0, "w_ttft_mean_s": 0.30, "w_tpot_mean_s": 0.04},
        {"design": "Swift", "lent_gb": 10.0, "ttft_mean_s": 0.3, "queue_mean_s": 0.05,
         "blocked_io_mean_s": 0.05, "store_gb": 6.0, "w_ttft_mean_s": 0.22, "w_tpot_mean_s": 0.033},
    ])  # fmt: skip


def test_interference_against_the_mean_of_the_idle_variants():
    rows = worker_interference(_summary()).to_pylist()
    assert [(r["design"], r["worker"]) for r in rows] == [("Swift", "w")]
    r = rows[0]
    # alone: (0.10 + 0.30) / 2 = 0.20 s; lending 0.22 s -> +10%
    assert r["ttft_alone_s"] == pytest.approx(0.20) and r["ttft_increase"] == pytest.approx(0.10)
    # alone: (0.02 + 0.04) / 2 = 0.03 s; lending 0.033 s -> +10%
    assert r["tpot_alone_s"] == pytest.approx(0.03) and r["tpot_increase"] == pytest.approx(0.10)


def test_interference_carries_the_copies_through_each_workers_hbm():
    s = _summary().to_pylist()
    s[2].update(peer_hbm_gb_gpu1=72.0, duration_s=100.0)
    s[0].update(peer_hbm_gb_gpu1=None, duration_s=100.0)
    s[1].update(peer_hbm_gb_gpu1=None, duration_s=100.0)
    (r,) = worker_interference(pa.Table.from_pylist(s), {"w": "gpu1"}, 3600.0).to_pylist()
    # 72 GB through an HBM of 3,600 GB/s is 20 ms of its time over a 100 s run: 0.02%
    assert r["peer_hbm_gb"] == 72.0
    assert r["hbm_share"] == pytest.approx(72.0 / (100.0 * 3600.0))
    assert r["hbm_share"] == pytest.approx(0.0002)
    assert r["peer_sm_s"] == 0.0 and r["sm_share"] == 0.0  # no copy_sm_share: no SM held


def test_interference_carries_the_sms_the_copies_held():
    # 72 GB of copies into gpu1 at 170 GB/s take 0.4235 s; at copy_sm_share 0.205 the NCCL
    # kernels held 0.205 x 0.4235 = 0.0868 GPU-s of its SMs, 0.0868% of a 100 s run
    s = _summary().to_pylist()
    held = 0.205 * 72e9 / 170e9
    s[2].update(peer_hbm_gb_gpu1=72.0, peer_sm_s_gpu1=held, duration_s=100.0)
    for i in (0, 1):  # the idle variants copy nothing
        s[i].update(peer_hbm_gb_gpu1=None, peer_sm_s_gpu1=None, duration_s=100.0)
    (r,) = worker_interference(pa.Table.from_pylist(s), {"w": "gpu1"}, 3600.0).to_pylist()
    assert r["peer_sm_s"] == pytest.approx(0.086824, rel=1e-4)
    assert r["sm_share"] == pytest.approx(0.00086824, rel=1e-4)


def test_breakdown_parts_add_up_to_ttft():
    rows = prefill_breakdown(_summary()).to_pylist()
    assert rows[0]["execution_s"] == pytest.approx(0.5 - 0.1 - 0.25)
    for r in rows:
        assert r["queue_s"] + r["load_s"] + r["execution_s"] == pytest.approx(r["ttft_mean_s"])


def test_sharegpt_long_trace():
    p = ServingParams(trace="sharegpt_long", sessions=2000, turns=3, session_rate=1.0,
                      prompt_tokens=37, reply_tokens=200, context_tokens=20_000,
                      max_context=40_000)  # fmt: skip
    table, warm = sharegpt_long_tables(p, seed=1)
    t, w = table.to_pandas(), warm.to_pandas()
    hist = dict(zip(w["session_id"], w["input_tokens"], strict=True))
    # warm-up histories in [20K, 40K - 4096]; every measured input in [20K, 40K]
    assert w["input_tokens"].between(20_000, 40_000 - 4096).all()
    assert (t["input_tokens"] + t["output_tokens"] <= 40_000).all()
    assert (t["input_tokens"] > t["session_id"].map(hist)).all()
    # first turn's prompt = input - warm history: log-normal, median 37, sigma 1, so its
    # 90th percentile is 37 e^1.2816 = 133 (ShareGPT: 90% of prompts under 132 tokens)
    first = t[t["turn"] == 1]
    prompts = (first["input_tokens"] - first["session_id"].map(hist)).to_numpy()
    assert np.percentile(prompts, 90) == pytest.approx(37 * math.exp(1.2816), rel=0.12)
    assert np.median(prompts) == pytest.approx(37, rel=0.12)
    # request ids: measured first, then the warm-ups, all distinct
    ids = np.concatenate([t["request_id"], w["request_id"]])
    assert len(set(ids)) == len(ids)
