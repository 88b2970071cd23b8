"""``analysis/roofline_vs_measured.py``: a batched prefill's roofline worked out by
hand, the HBM bound that skips a prefill, and the measured side held to the
library's own calls where kvtier's composition and the library's must agree."""

from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core.sdk.engine", reason="aiconfigurator-core cannot load")

from analysis import roofline_vs_measured as rvm  # noqa: E402
from sim.hw.measured import GpuTime, system_spec, system_step  # noqa: E402
from sim.models import get_model  # noqa: E402

LLAMA, QWEN = get_model("Llama-3.1-8B"), get_model("Qwen3-32B")
GIB = 2**30


def h200_rows(card):
    """The script's rows for ``card`` on the library's H200 (no kvtier profile)."""
    spec = system_spec("h200_sxm")
    peak, bw = float(spec["bfloat16_tc_flops"]), float(spec["mem_bw"])
    step = system_step(card, "h200_sxm", GpuTime("measured"))
    assert not isinstance(step, str), step

    def roof(f: float, b: float) -> float:
        return max(f / (peak * rvm.TENSOR_EFF), b / (bw * rvm.HBM_EFF))

    return rvm.rows_for(card, "h200", float(spec["mem_capacity"]), roof, step)


def test_batched_prefill_roofline_by_hand():
    """Llama-3.1-8B, 4 prompts of 1,024 tokens in one iteration on the H200
    (989 TFLOP/s bf16 and 4.8 TB/s in the library's systems/h200_sxm.yaml):
    a layer holds (8.03e9 - 2 x 128,256 x 4,096) / 32 = 218,103,964 parameters;
    FLOPs = 32 x (2 x 218,103,964 x 4,096 + 4 x 32 x 128 x 4 x 1,024 x 1,025 / 2)
    + 2 x 128,256 x 4,096 x 4 (the output head, one token a prompt)
    = 32 x (1,786,707,673,088 + 34,393,292,800) + 4,202,692,608 = 58,279,433,601,024;
    at 0.75 x 989e12 that is 78.57 ms.  HBM: weights 2 x 218,103,964 x 32 +
    the head 2 x 128,256 x 4,096 + KV 4 x 1,024 x 131,072 = 15,546,197,760 B,
    3.60 ms at 0.9 x 4.8e12: compute-bound."""
    layer = (8.03e9 - 2 * 128_256 * 4_096) / 32
    flops = 32 * (2 * layer * 4096 + 4 * 32 * 128 * 4 * 1024 * 1025 / 2) + 2 * 128_256 * 4096 * 4
    assert flops == pytest.approx(58_279_433_601_024, rel=1e-9)
    hbm = 2 * layer * 32 + 2 * 128_256 * 4096 + 4 * 1024 * 131_072
    assert hbm == pytest.approx(15_546_197_760, rel=1e-9)
    want_ms = max(flops / (989e12 * 0.75), hbm / (4.8e12 * 0.9)) * 1e3
    assert want_ms == pytest.approx(78.571, abs=1e-3)
    row = next(
        r
        for r in h200_rows(LLAMA)
        if (r["phase"], r["batch"], r["context"]) == ("prefill", 4, 1024)
    )
    assert row["roofline_ms"] == pytest.approx(want_ms, rel=1e-9)
    assert row["ratio"] == pytest.approx(row["roofline_ms"] / row["measured_ms"], rel=1e-12)
    assert row["fits_hbm"]


def test_prefills_beyond_the_hbm_are_skipped():
    """Qwen3-32B on an 80 GiB H100: KV room 0.9 x 80 GiB - 65.6e9 B of weights =
    11,709,411,328 B, 44,667 tokens at 262,144 B each (64 layers x 8 KV heads x
    128 x 2 x 2 B): one prompt of 32K (32,768 tokens) and four of 8K fit; one of
    64K and four of 16K do not.  The 141 GiB (151,397,597,184 B) H200 holds
    (0.9 x 151,397,597,184 - 65.6e9) / 262,144 = 269,538 tokens: 64 of 4K."""
    h100 = 80 * GIB
    assert rvm.kv_room(QWEN, h100) == pytest.approx(11_709_411_328, rel=1e-12)
    assert rvm.fits(QWEN, 1, 32768, h100) and rvm.fits(QWEN, 4, 8192, h100)
    assert not rvm.fits(QWEN, 1, 65536, h100) and not rvm.fits(QWEN, 4, 16384, h100)
    assert rvm.skipped(QWEN, h100)[:2] == [(1, 65536), (1, 131072)]
    rows = h200_rows(QWEN)
    prefills = {(r["batch"], r["context"]) for r in rows if r["phase"] == "prefill"}
    assert (64, 4096) in prefills and (64, 8192) not in prefills
    assert not prefills & set(rvm.skipped(QWEN, float(system_spec("h200_sxm")["mem_capacity"])))
    # decodes are all kept, those beyond the HBM marked
    decodes = [r for r in rows if r["phase"] == "decode"]
    assert len(decodes) == len(rvm.BATCHES) * len(rvm.CONTEXTS)
    beyond = {(r["batch"], r["context"]) for r in decodes if not r["fits_hbm"]}
    assert (64, 8192) in beyond and (64, 4096) not in beyond


def test_measured_side_is_the_library_where_the_two_must_agree():
    """A lone prefill and a decode-only step: kvtier's composition of the
    library's breakdown equals the library's own whole-step call."""
    for r in h200_rows(LLAMA):
        if r["phase"] == "decode" or r["batch"] == 1:
            assert r["measured_ms"] == pytest.approx(r["library_ms"], rel=1e-9), r
