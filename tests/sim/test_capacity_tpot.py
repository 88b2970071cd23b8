"""What binds the TPOT (``bottleneck_tpot``, sim.capacity.binding over the P99-TPOT
request's decode), beside what binds the TTFT, on one lone request worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sim.capacity.evaluate import Point, Question, evaluate
from sim.capacity.variants import Hardware, resolve_ssd
from traces.requests import RequestTrace, build_table

POINT = Point("gpu-only", Hardware(resolve_ssd("9100 PRO"), 1, 1, 64.0))


def _trace(tmp_path, output_tokens: int) -> str:
    path = tmp_path / "one.parquet"
    table = build_table(np.zeros(1), np.full(1, 8192), np.full(1, output_tokens))
    RequestTrace(table, 16, "test: one request").write_parquet(path)
    return str(path)


def test_prefill_binds_the_ttft_and_the_weights_read_bind_the_tpot(tmp_path) -> None:
    """One 8,192-token prompt alone on an H100 with Llama-3.1-8B: its prefill does
    2 x 8e9 x 8192 ~ 1.3e14 FLOPs over ~16 GB of weights (~8,000 FLOPs a byte, far above
    the H100's ~300 FLOPs/B ridge): compute binds, and the TTFT window holds nothing else
    (share 1).  Each decode step reads the same 16 GB for one token a step (~1 FLOP a
    byte): HBM binds, and the decode window holds only those steps (share 1).  Over the
    whole run the two mix, and neither is saturated throughout."""
    row = evaluate(Question(trace=_trace(tmp_path, 33)), POINT)
    assert row["status"] == "ok"
    assert (row["bottleneck"], row["bottleneck_tpot"]) == ("gpu0.tensor", "gpu0.hbm")
    assert row["bottleneck_share"] == pytest.approx(1.0)
    assert row["bottleneck_tpot_share"] == pytest.approx(1.0)
    assert row["bottleneck_run_share"] < 1.0
    assert row["bottleneck_tpot_gpu_relieved"] and not row["bottleneck_tpot_ssd_only"]


def test_no_decode_names_no_tpot_resource(tmp_path) -> None:
    row = evaluate(Question(trace=_trace(tmp_path, 1)), POINT)
    assert row["status"] == "ok" and row["bottleneck"] == "gpu0.tensor"
    assert row["bottleneck_tpot"] == "" and row["bottleneck_tpot_share"] == 0.0
