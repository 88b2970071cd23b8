"""GPU step time from measured kernel tables (:mod:`sim.hw.measured`).

kvtier's iteration times are held to aiconfigurator-core's own calls with
arguments worked out by hand, and to its independent whole-phase entry points
(a lone prefill is ``predict_prefill_latency``, a decode-only batch
``mixed_step_latency``); a derived card to the roofline ratio by hand; an
uncovered GPU to the roofline by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core.sdk.engine", reason="aiconfigurator-core cannot load")

from hwprofiles import load_profile  # noqa: E402
from sim.executor import simulate  # noqa: E402
from sim.hw.measured import (  # noqa: E402
    MODELS,
    GpuTime,
    MeasuredError,
    _handle,
    default_version,
    resolve,
    system_of,
)
from sim.models import get_model  # noqa: E402
from sim.serving.build import build_engine  # noqa: E402
from sim.serving.designs import get_design  # noqa: E402
from sim.serving.execute.engine import EngineConfig  # noqa: E402
from sim.serving.requests import load_requests, request_table  # noqa: E402

B = 16
LLAMA = get_model("Llama-3.1-8B")
MEASURED = GpuTime("measured")  # vllm at the version nearest seed 004's v0.13.0: 0.24.0
AUTO = GpuTime("auto")  # measured where the tables have the GPU and model, else the roofline


def handle():
    """The library's own estimator for Llama-3.1-8B on h100_sxm, vllm 0.24.0."""
    return _handle("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", "0.24.0")


def rows(*reqs: tuple[int, int]) -> list[dict]:
    """Requests (input tokens, output tokens), all at t = 0, no shared blocks."""
    out, h = [], 0
    for rid, (tokens, outputs) in enumerate(reqs):
        n = -(-tokens // B)
        out.append({"request_id": rid, "arrival_s": 0.0, "session_id": -1, "turn": 0,
                    "input_tokens": tokens, "output_tokens": outputs,
                    "block_hashes": list(range(h, h + n))})  # fmt: skip
        h += n
    return out


def serve(hw: str, reqs: list[dict], **cfg):
    ec = EngineConfig(gpu_blocks=4096, block_tokens=B, **cfg)
    engine = build_engine(load_profile(hw), LLAMA, get_design("gpu-only"), ec,
                          load_requests(request_table(reqs, B), B))  # fmt: skip
    return engine, engine.run()


def iterations(rec) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, step) of each iteration's compute op, in order."""
    ops = rec.ops.to_pandas().query("kind == 'compute' and tag == 'iteration'")
    return (ops["end_s"] - ops["start_s"]).to_numpy(), ops["step"].to_numpy()


def test_version_nearest_the_seeds() -> None:
    # seed 004 ran vLLM v0.13.0; h100_sxm has 0.24.0 (current) and 0.27.0 (next),
    # a100_sxm only 0.14.0: the nearest at or above it
    assert default_version("h100_sxm", "vllm") == "0.24.0"
    assert default_version("a100_sxm", "vllm") == "0.14.0"


@pytest.mark.parametrize(
    "model, system, derived",
    [
        ("NVIDIA H100 SXM5 80 GB", "h100_sxm", False),  # dgx-h100
        ("NVIDIA H100 PCIe 80 GB", "h100_sxm", True),  # h100-2dimm-2ssd
        ("NVIDIA H200 SXM 141 GB", "h200_sxm", False),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm", False),
        ("NVIDIA A100 PCIe 80 GB", "a100_sxm", True),
        ("NVIDIA B200", "b200_sxm", False),
        ("NVIDIA GB200", "gb200", False),
        ("NVIDIA L40S", "l40s", False),
        ("NVIDIA H200 NVL", None, False),  # a 600 W PCIe card: not the SXM's tables
        ("NVIDIA H100 NVL", None, False),
        ("NVIDIA GH200", None, False),
        ("NVIDIA L40", None, False),
        ("NVIDIA H20", None, False),
        ("NVIDIA GB10 (Blackwell GPU, unified LPDDR5X)", None, False),
    ],
)
def test_gpu_models_map_to_the_librarys_systems(model: str, system, derived: bool) -> None:
    row = system_of(model)
    assert (row.system, row.derived) == (system, derived) if row else system is None


def test_every_mapped_model_has_the_cards_shape_in_the_library() -> None:
    import aiconfigurator_core

    configs = Path(aiconfigurator_core.__file__).parent / "model_configs"
    for name, hf_id in MODELS.items():
        cfg = json.loads((configs / f"{hf_id.replace('/', '--')}_config.json").read_text())
        card = get_model(name)
        got = (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
               cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg[
                   "num_attention_heads"])  # fmt: skip
        assert got == (card.layers, card.hidden_size, card.q_heads, card.kv_heads, card.head_dim)


def test_an_engine_iteration_takes_the_library_time_of_its_batch() -> None:
    """Chunked prefill at 2048 tokens an iteration, request 0 of 1000 tokens
    (4 out), request 1 of 5000 (1 out), both at t = 0.  By hand:
    iteration 0 prefills 1000 of r0 and 1048 of r1; iteration 1 decodes r0
    (1000 cached) and prefills 2047 of r1 after its 1048; iteration 2 decodes
    r0 (1001) and prefills r1's last 1905 after 3095; iteration 3 decodes r0
    (1002)."""
    engine, rec = serve("dgx-h100", rows((1000, 4), (5000, 1)), max_batched_tokens=2048,
                        gpu_time=MEASURED)  # fmt: skip
    h = handle().mixed_step_breakdown  # (total, shared, context attention, decode attention) ms
    want_ms = [
        h(2048, 0, 2048, 1, 0)[1] + h(1000, 0, 1000, 1, 0)[2] + h(1048, 0, 1048, 1, 0)[2],
        h(2048, 0, 2048, 1, 0)[1] + h(3095, 0, 3095, 1, 1048)[2] + h(0, 1, 1000, 1, 0)[3],
        h(1906, 0, 1906, 1, 0)[1] + h(5000, 0, 5000, 1, 3095)[2] + h(0, 1, 1001, 1, 0)[3],
        h(0, 1, 1002, 1, 0)[0],
    ]
    secs, steps = iterations(rec)
    assert steps.tolist() == [0, 1, 2, 3]
    assert secs == pytest.approx(np.array(want_ms) / 1e3, rel=1e-9)
    assert engine.gpu_time_source == "aiconfigurator-core 0.12.0 vllm 0.24.0 h100_sxm"
    assert rec.stats["gpu_time"] == engine.gpu_time_source
    again = simulate(rec.plan, load_profile("dgx-h100")).ops.to_pandas()  # the plan's gpu_s
    assert np.allclose(again["end_s"], rec.ops.to_pandas()["end_s"], rtol=1e-9, atol=1e-12)


def test_a_lone_prefill_and_a_decode_batch_are_the_librarys_whole_phases() -> None:
    """Independent entry points: ``predict_prefill_latency`` (the static
    context phase) and ``mixed_step_latency`` with decodes only."""
    step, _ = resolve(load_profile("dgx-h100"), LLAMA, MEASURED)
    assert step is not None
    lib = handle()
    assert step.ms([(8192, 0)], []) == pytest.approx(lib.predict_prefill_latency(1, 8192, 0))
    # the last 512 tokens after a 127.5K cached prefix (65 ms, measured with the library)
    last = step.ms([(512, 130560)], [])
    assert last == pytest.approx(lib.predict_prefill_latency(1, 131072, 130560), rel=1e-12)
    assert 60 < last < 70
    assert step.ms([], [4096] * 8) == pytest.approx(lib.mixed_step_latency(0, 8, 4096, 1, 0))
    # a batch of unequal contexts at its mean: (1000 + 1004 + 1009) / 3 = 1004.33 -> 1004
    assert step.ms([], [1000, 1004, 1009]) == lib.mixed_step_latency(0, 3, 1004, 1, 0)


def test_the_h100_pcie_derives_from_the_sxm_by_the_roofline_ratio() -> None:
    """h100-2dimm-2ssd's H100 PCIe (756 TFLOP/s, 2000 GB/s) against h100_sxm's
    datasheet (989 TFLOP/s, 3350 GB/s): compute-bound work takes 989 / 756 of
    the SXM's measured time, memory-bound work 3350 / 2000."""
    pcie, source = resolve(load_profile("h100-2dimm-2ssd"), LLAMA, MEASURED)
    sxm, _ = resolve(load_profile("dgx-h100"), LLAMA, MEASURED)
    assert pcie is not None and sxm is not None
    assert source.endswith("scaled by the roofline ratio of the two cards' datasheet peaks "
                           "to NVIDIA H100 PCIe 80 GB")  # fmt: skip
    batch = ([(4096, 0)], [2000, 3000])
    base = sxm.seconds(*batch, 1.0, 1.0)
    assert pcie.seconds(*batch, 1e15, 1e9) == pytest.approx(base * 989 / 756, rel=1e-12)
    assert pcie.seconds(*batch, 1e9, 1e12) == pytest.approx(base * 3350 / 2000, rel=1e-12)


def test_an_uncovered_gpu_keeps_the_roofline_by_hand() -> None:
    """An H20 (148 TFLOP/s, 4000 GB/s, efficiencies 0.75 and 0.9) is not in the
    library: under ``auto`` one 2048-token prefill takes max(F / (148e12 x 0.75),
    B / (4000e9 x 0.9)) for the FLOPs and bytes its plan row carries, and the run
    says so."""
    engine, rec = serve("h20-8ssd", rows((2048, 1)), gpu_time=AUTO)
    assert engine.step_time is None
    assert engine.gpu_time_source == (
        "roofline (tensor efficiency 0.75, HBM efficiency 0.9): "
        "NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems"
    )
    plan = rec.plan.to_pandas().query("kind == 'compute'")
    flops, hbm = float(plan["flops"].iloc[0]), float(plan["hbm_bytes"].iloc[0])
    assert plan["gpu_s"].tolist() == [0.0]
    secs, _ = iterations(rec)
    assert secs.tolist() == pytest.approx([max(flops / (148e12 * 0.75), hbm / (4000e9 * 0.9))])


def test_a_model_the_library_lacks_keeps_the_roofline_under_auto() -> None:
    step, source = resolve(load_profile("dgx-h100"), get_model("Qwen3-14B"), AUTO)
    assert step is None and "Qwen3-14B is not in aiconfigurator-core 0.12.0's model" in source


def test_measured_by_name_refuses_what_the_tables_lack() -> None:
    """``gpu_time: measured`` on a GPU or model the tables lack is one line naming
    it and what the tables have, not a silent roofline."""
    for hw, model, lacks in (
        ("h20-8ssd", LLAMA, "NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems"),
        ("dgx-h100", get_model("Qwen3-14B"), "Qwen3-14B is not in aiconfigurator-core"),
    ):
        with pytest.raises(MeasuredError) as exc:
            resolve(load_profile(hw), model, MEASURED)
        msg = str(exc.value)
        assert msg.startswith(f"gpu_time: measured: {lacks}") and "\n" not in msg
        assert "h100_sxm, h200_sxm, a100_sxm" in msg and "gpu_time: auto" in msg


def test_an_unknown_framework_version_is_one_line_naming_it() -> None:
    with pytest.raises(MeasuredError) as exc:
        resolve(load_profile("dgx-h100"), LLAMA, GpuTime("measured", "vllm", "0.13.0"))
    msg = str(exc.value)
    assert msg.startswith("framework_version: vllm 0.13.0 ") and "\n" not in msg
    assert "0.24.0, 0.27.0" in msg  # what it has


def test_auto_keeps_the_roofline_where_the_run_cannot_be_timed_whole_and_says_why() -> None:
    """A layer stream cache (it times its own per-layer ops): ``auto`` is the
    roofline for the run, its source naming why; ``measured`` is refused.  (Tensor
    parallelism is measured: tests/sim/test_measured_tp.py.)"""
    from types import SimpleNamespace

    from sim.config import ParamError, _check_gpu_time

    profile = load_profile("h100-2dimm-2ssd")  # a covered GPU: auto alone would measure
    lsc = SimpleNamespace(gpu_time="auto", framework="vllm", framework_version="auto", tp=1,
                          instances=({"lsc": True},))  # fmt: skip
    setting = GpuTime.of(lsc)
    assert setting.mode == "roofline" and "layer stream cache" in setting.why
    step, source = resolve(profile, LLAMA, setting)
    assert step is None
    assert source.endswith("a layer stream cache (lsc) times its own per-layer ops")
    assert GpuTime.of(SimpleNamespace(**{**vars(lsc), "instances": ()})).mode == "auto"
    _check_gpu_time(lsc)  # auto: accepted
    with pytest.raises(ParamError, match="layer stream cache"):
        _check_gpu_time(SimpleNamespace(**{**vars(lsc), "gpu_time": "measured"}))
