"""Measured GPU step time with tensor parallelism (:mod:`sim.hw.measured`, ``tp > 1``).

Llama-3.1-70B (and -8B) on H100 SXMs (``dgx-h100``), one 8,192-token document,
one decode.  The library compiled at ``tp_size=N`` times one rank's step with the
model's all-reduces from its measured collective tables; kvtier takes that step less
the two per-layer all-reduces and simulates them after the compute as an NVLink copy
(:mod:`sim.serving.execute.tp`) lasting, alone, the library's measured all-reduce.
kvtier's NCCL ring model (the roofline GPUs'), by hand, for ``T`` tokens at tp 2:
80 layers x 2 x 2 (N-1)/N x T x 8,192 x 2 B over NVLink at 450 x 0.85 GB/s (the
profile's figure and efficiency), plus 160 x (3.6 + 2 x 0.47) us = 0.7264 ms of
NCCL latency.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("aiconfigurator_core.sdk.engine", reason="aiconfigurator-core cannot load")

import aiconfigurator_core  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from hwprofiles import load_profile  # noqa: E402
from sim.config import ScenarioConfig, ServingParams, Variant, _check_gpu_time  # noqa: E402
from sim.hw.machine import Machine  # noqa: E402
from sim.hw.measured import GpuTime, MeasuredError, MeasuredStep, _handle, resolve  # noqa: E402
from sim.models import get_model  # noqa: E402
from sim.runner import run  # noqa: E402
from sim.serving.execute.online import OnlineOps  # noqa: E402
from sim.serving.execute.tp import TensorParallel, rank_profile  # noqa: E402

HF70 = "meta-llama/Meta-Llama-3.1-70B"
HF8 = "meta-llama/Meta-Llama-3.1-8B"
NVLINK = 450e9 * 0.85  # dgx-h100: nvlink_h100 450 GB/s a direction, efficiency.nvlink 0.85
LATENCY_S = 160 * (3.6e-6 + 2 * 0.47e-6)  # NCCL ring, LL: 0.7264 ms
TABLE = (
    Path(aiconfigurator_core.__file__).parent
    / "systems/data/h100_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet"
)


def ring_allreduce_s(tokens: int) -> float:
    """kvtier's ring model of 80 layers' all-reduces of ``tokens`` tokens at tp 2."""
    return 80 * 2 * 2 * (1 / 2) * tokens * 8192 * 2 / NVLINK + LATENCY_S


def library_allreduce_ms(tokens: int, tp: int = 2, hf: str = HF70) -> float:
    """The library's measured per-layer all-reduces (``context_ar_1`` + ``context_ar_2``)
    of one tp-N iteration of ``tokens`` tokens, from its compiled model's per-op list."""
    h = _handle(hf, "h100_sxm", "vllm", "0.24.0", tp)
    ops = {op[0]: op[1] for op in h.mixed_step_breakdown_per_op(tokens, 0, tokens, 1, 0)[0]}
    return ops["context_ar_1"] + ops["context_ar_2"]


def table_ms(tp: int, elements: int) -> float:
    """The row of vLLM 0.24.0's measured all-reduce table on h100_sxm (CUDA graphs)."""
    t = pq.read_table(TABLE).to_pandas()
    row = t[(t.backend == "vllm_graph") & (t.num_gpus == tp) & (t.message_size == elements)]
    assert len(row) == 1
    return float(row.latency.iloc[0])


def summary(gpu_time: str, tp: int = 2, model: str = "Llama-3.1-70B") -> dict:
    w = ServingParams(
        model=model, design="gpu-only", trace="long_doc", context_tokens=8192,
        docs=1, output_tokens=2, block_tokens=256, gpu_prefix_cache=False, tp=tp,
        gpu_time=gpu_time,
    )  # fmt: skip
    cfg = ScenarioConfig("t", "t", 0, w, (Variant("gpu-only"),))
    return run(cfg, load_profile("dgx-h100"), None).variants[0].summary


def test_the_measured_allreduce_of_a_message_is_the_librarys_table_row():
    """70B's 8,192-token message at tp 2 is 8,192 x 8,192 = 67,108,864 bf16 elements
    (128 MiB): ``allreduce_ms`` returns vLLM 0.24.0's measured row for it on h100_sxm,
    0.4688 ms; one decode token at tp 8, 8,192 elements (16 KiB), its row too.  Two
    a layer over 80 layers is the compiled model's ``context_ar_1 + context_ar_2``,
    the amount the measured step takes off (an independent path through the library)."""
    card = get_model("Llama-3.1-70B")
    for tp, tokens in ((2, 8192), (8, 1), (4, 1024)):
        step = MeasuredStep(_handle(HF70, "h100_sxm", "vllm", "0.24.0", tp), "", tp=tp, card=card)
        assert step.allreduce_ms(tokens) == table_ms(tp, tokens * 8192)
        assert 2 * 80 * step.allreduce_ms(tokens) == pytest.approx(
            library_allreduce_ms(tokens, tp), rel=1e-12
        )
    assert table_ms(2, 8192 * 8192) == pytest.approx(0.4688, abs=1e-4)
    step8 = MeasuredStep(_handle(HF8, "h100_sxm", "vllm", "0.24.0", 2), "", tp=2,
                         card=get_model("Llama-3.1-8B"))  # fmt: skip
    assert step8.allreduce_ms(8192) == table_ms(2, 8192 * 4096)  # 8B: hidden 4,096


def test_the_allreduce_copy_lasts_the_measured_time_alone_and_shares_nvlink():
    """Rank 0 of tp 2 on dgx-h100: the measured all-reduces of one layer of 8,192
    tokens (2 x 0.4688 ms) become one copy gpu0 -> gpu1 of 0.9375 ms x 382.5 GB/s =
    358.6 MB (NVLink's achievable rate; route latency 0): alone it lasts the measured
    0.9375 ms.  Beside a KV copy of the same bytes started with it on the same
    port, max-min gives each half the port: both end at twice that."""
    card = get_model("Llama-3.1-70B")
    step, _ = resolve(load_profile("dgx-h100"), card, GpuTime("measured"), 2)
    tp = TensorParallel(2, card).timed_by(step)
    assert tp.measured is step
    want_s = 2 * table_ms(2, 8192 * 8192) / 1e3
    for extra in (False, True):
        m = Machine(rank_profile(load_profile("dgx-h100"), 2))
        ops = OnlineOps(m)
        kv = None
        compute, _ = ops.compute("gpu0", 0.0, 0.0, [], 0, 0, "iteration", gpu_s=1e-6)
        op, _ = tp.allreduce(ops, after=compute, tokens=8192, layers=1, step=0, layer=0)
        if extra:
            kv, _ = ops.submit("copy", "gpu0", "gpu1", nbytes=round(want_s * NVLINK))
        m.env.run()
        took = ops.end_s[op] - ops.start_s[op]
        assert took == pytest.approx(want_s * (2 if extra else 1), rel=1e-9)
        if kv is not None:
            assert ops.end_s[kv] == pytest.approx(ops.end_s[op], rel=1e-9)
    assert want_s * NVLINK == pytest.approx(358.6e6, rel=1e-3)


def test_a_step_is_the_librarys_whole_step_and_the_ring_stays_elsewhere():
    """With measured compute, TTFT and TPOT are the library's own whole tp-N step
    (``predict_prefill_latency``, the decode-only ``mixed_step_latency``): the
    measured all-reduces it takes off come back as copies of the measured time.
    Before, kvtier's ring model made a tp-8 decode step 7.6% (70B) and 15% (8B)
    longer than the library's (docs/compute-time.md); now within 0.1%, at tp 8 too.
    A derived sibling card keeps the ring (the library measured the SXM's fabric),
    and so does the roofline."""
    for model, hf, tps in (("Llama-3.1-70B", HF70, (2, 8)), ("Llama-3.1-8B", HF8, (8,))):
        for tp in tps:
            h = _handle(hf, "h100_sxm", "vllm", "0.24.0", tp)
            s = summary("measured", tp, model)
            assert s["ttft_p99_s"] * 1e3 == pytest.approx(h.predict_prefill_latency(1, 8192, 0),
                                                         rel=1e-6)  # fmt: skip
            decode_ms = h.mixed_step_latency(0, 1, 8192, 1, 0)
            assert s["tpot_p99_s"] * 1e3 == pytest.approx(decode_ms, rel=1e-3)
    card = get_model("Llama-3.1-70B")
    step, _ = resolve(load_profile("dgx-h100"), card, GpuTime("measured"), 2)
    derived = MeasuredStep(step.handle, "", ((1.0, 1.0), (2.0, 2.0)), 2, card)
    assert TensorParallel(2, card).timed_by(derived).measured is None
    assert TensorParallel(2, card).timed_by(None).measured is None


def test_the_ring_model_against_the_measured_one():
    """What the roofline GPUs' ring model would give on this GPU.  An 8,192-token
    prefill's all-reduces: the ring moves 80 x 2 x 128 MiB / 2 = 21.5 GB a rank at
    382.5 GB/s, 56.1 ms (+ 0.73), where the library's measured vLLM tables give
    75.0 ms (0.76x: its all-reduce reaches 286 GB/s a rank, 0.64 of NVLink's 450,
    not the profile's 0.85).  One decode token: 0.733 ms against 0.719 at tp 2."""
    ours, theirs = ring_allreduce_s(8192) * 1e3, library_allreduce_ms(8192)
    assert ours == pytest.approx(56.86, abs=0.01)
    assert 74.5 < theirs < 75.5
    assert ours / theirs == pytest.approx(0.758, abs=0.005)
    assert ring_allreduce_s(1) * 1e3 == pytest.approx(0.7333, abs=1e-4)
    assert 0.70 < library_allreduce_ms(1) < 0.74


def test_the_source_names_the_degree_and_the_moe_exception():
    """run.json's source says the step is one rank's of two, its all-reduces measured;
    a MoE model at tp > 1 is not measured (the library folds its all-reduces into the
    MoE dispatch ops): ``auto`` keeps the roofline saying why, ``measured`` refuses
    in one line; the setting itself no longer refuses tp > 1."""
    h100 = load_profile("dgx-h100")
    step, source = resolve(h100, get_model("Llama-3.1-70B"), GpuTime("measured"), 2)
    assert step is not None and step.tp == 2
    assert source == ("aiconfigurator-core 0.12.0 vllm 0.24.0 h100_sxm tp 2 "
                      "(its measured all-reduces, as NVLink copies)")  # fmt: skip
    moe = get_model("Qwen3-30B-A3B")
    step, source = resolve(h100, moe, GpuTime("auto"), 2)
    assert step is None and "folds Qwen3-30B-A3B's MoE all-reduces" in source
    with pytest.raises(MeasuredError) as exc:
        resolve(h100, moe, GpuTime("measured"), 2)
    assert "\n" not in str(exc.value)
    assert resolve(h100, moe, GpuTime("measured"), 1)[0] is not None  # tp 1: measured
    tp2 = SimpleNamespace(gpu_time="measured", framework="vllm", framework_version="auto", tp=2)
    _check_gpu_time(tp2)  # accepted
    assert GpuTime.of(tp2).mode == "measured"


def test_tp1_takes_nothing_off_the_librarys_step():
    """At tp 1 the library's all-reduce ops are 0 (it compiles them, with nothing to
    reduce), so the subtraction is exact: the shared pass is the library's."""
    h = _handle(HF70, "h100_sxm", "vllm", "0.24.0", 1)
    ops = {op[0]: op[1] for op in h.mixed_step_breakdown_per_op(4096, 0, 4096, 1, 0)[0]}
    assert ops["context_ar_1"] == ops["context_ar_2"] == 0.0
    step, _ = resolve(load_profile("dgx-h100"), get_model("Llama-3.1-70B"), GpuTime("measured"))
    assert step is not None and step.allreduce_ms(4096) == 0.0
    assert step.ms([(4096, 0)], []) == h.predict_prefill_latency(1, 4096, 0)
