"""Measured GPU step time in the sparse-decode kinds and the capacity planner.

A sparse-decode layer's compute op (``sparse_decode``, ``swarm``, ``kvdrive``)
takes, under ``gpu_time: measured``, 1/layers of aiconfigurator-core's decode
step of the batch at the entries each sequence attends
(:func:`sim.hw.measured.decode_layer_seconds`).  Each test asks the library
itself (``mixed_step_latency``, its whole decode-only step) for hand-picked
batches; an uncovered GPU keeps the roofline, worked by hand; a derived card
scales by the datasheet ratio; ``kvtier plan`` carries the same setting.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core.sdk.engine", reason="aiconfigurator-core cannot load")

from hwprofiles import load_profile  # noqa: E402
from sim.capacity.evaluate import Question, scenario  # noqa: E402
from sim.config import ScenarioConfig, SparseDecodeParams, SwarmParams, Variant  # noqa: E402
from sim.executor import simulate  # noqa: E402
from sim.hw.measured import _handle  # noqa: E402
from sim.models import get_model  # noqa: E402
from sim.policies import StepDecision  # noqa: E402
from sim.runner import run  # noqa: E402
from sim.scenarios.kvdrive import assemble  # noqa: E402
from sim.scenarios.kvdrive_kind import KVDriveParams  # noqa: E402
from sim.scenarios.sparse_decode import plan_for  # noqa: E402
from sim.scenarios.swarm import LaneResult, _assemble, layout_for, max_io_bytes  # noqa: E402

LLAMA = get_model("Llama-3.1-8B")  # 32 layers
SXM = "aiconfigurator-core 0.12.0 vllm 0.24.0 h100_sxm"
H20_ROOF = (
    "roofline (tensor efficiency 0.75, HBM efficiency 0.9): "
    "NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems"
)


def library_ms(batch: int, keys_before: int) -> float:
    """The library's own decode-only step of ``batch`` sequences, each attending
    ``keys_before`` cached keys and its new token (Llama-3.1-8B, h100_sxm, vllm 0.24.0)."""
    lib = _handle("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", "0.24.0")
    return lib.mixed_step_latency(0, batch, keys_before, 1, 0)


def sparse(hw: str, gpu_time: str, **kw):
    """A sparse_decode plan of Llama-3.1-8B: 4 sequences of 32K, 10% sparsity, KV in DRAM."""
    p = SparseDecodeParams(model="Llama-3.1-8B", context_tokens=32768, batch=4, sparsity=0.1,
                           steps=1, layers=2, tier="dram", gpu_time=gpu_time, **kw)  # fmt: skip
    return plan_for(p, load_profile(hw), 0)


def compute_ops(table):
    return table.to_pandas().query("kind == 'compute' and tag == 'attn'")


def test_a_sparse_decode_layer_is_its_share_of_the_librarys_decode_step() -> None:
    # round(32768 x 0.1) = 3277 entries a sequence: a decode step of 4 at 3277 keys + 1
    plan, shape = sparse("dgx-h100", "measured")
    assert shape.gpu_source == SXM
    want = library_ms(4, 3277) / 1e3 / 32
    ops = compute_ops(plan)
    assert len(ops) == 2 and ops["gpu_s"].tolist() == pytest.approx([want] * 2, rel=1e-12)
    # the executor runs each for exactly that long (nothing else on the GPU)
    rec = compute_ops(simulate(plan, load_profile("dgx-h100")).ops)
    assert (rec["end_s"] - rec["start_s"]).tolist() == pytest.approx([want] * 2, rel=1e-12)


def test_a_sparse_decode_on_an_uncovered_gpu_keeps_the_roofline_by_hand() -> None:
    """H20: 148 TFLOP/s x 0.75, 4000 GB/s x 0.9.  Llama-3.1-8B's layer at batch 4,
    3276.8 entries each: HBM = the layer's weights (the card's 8.03B parameters less
    the input and output embeddings, 2 x 128,256 x 4,096, over 32 layers =
    218,103,964 parameters x 2 bytes) + 4 x 3276.8 x 4096 KV bytes read + 4 x 4096
    written: memory-bound."""
    plan, shape = sparse("h20-8ssd", "auto")
    assert shape.gpu_source == H20_ROOF
    ops = compute_ops(plan)
    assert ops["gpu_s"].tolist() == [0.0, 0.0]
    hbm = 218_103_964 * 2 + 4 * 3276.8 * 4096 + 4 * 4096
    assert ops["hbm_bytes"].iloc[0] == pytest.approx(hbm, rel=1e-12)
    flops = float(ops["flops"].iloc[0])
    assert flops / (148e12 * 0.75) < hbm / (4000e9 * 0.9)
    rec = compute_ops(simulate(plan, load_profile("h20-8ssd")).ops)
    secs = (rec["end_s"] - rec["start_s"]).tolist()
    assert secs == pytest.approx([hbm / (4000e9 * 0.9)] * 2, rel=1e-9)


def test_a_sparse_decode_on_the_h100_pcie_derives_by_the_datasheet_ratio() -> None:
    # memory-bound on both cards at their peaks: the SXM's measured time x 3350 / 2000
    _, pcie = sparse("h100-2dimm-2ssd", "measured")
    _, sxm = sparse("dgx-h100", "measured")
    assert pcie.gpu_s_per_layer == pytest.approx(sxm.gpu_s_per_layer * 3350 / 2000, rel=1e-12)
    assert pcie.gpu_source.startswith(SXM + ", scaled by the roofline ratio")


def _swarm_lanes(profile, p, selected: list[int], cpu_attn: float = 0.0):
    """One hand-made lane per sequence, reading nothing from SSD."""
    empty = [np.zeros((0, 2), dtype=np.int64) for _ in profile.ssd_names]
    lanes = {}
    for b, n in enumerate(selected):
        info = {"cpu_attn_entries": cpu_attn} if cpu_attn else {}
        dec = StepDecision(
            selected=np.arange(n), dram_entries=n, ssd_extents=empty, score_flops=1e9, info=info
        )
        lanes[(b, 0)] = LaneResult([dec], [], 0, 0, np.zeros(len(profile.ssd_names), np.int64))
    bases = {k: np.zeros(len(profile.ssd_names), np.int64) for k in lanes}
    return lanes, bases


def test_a_swarm_layer_is_the_librarys_step_at_the_batchs_selected_entries() -> None:
    # two sequences selecting 1000 and 1010 entries: the library's tables are per batch
    # and length, so the step is at their mean (2010 + 1) // 2 = 1005 keys + 1
    h100 = load_profile("dgx-h100")
    p = SwarmParams(model="Llama-3.1-8B", context_tokens=2000, batch=2, steps=1, layers=1,
                    profile_steps=96, local_window=64, gpu_time="measured")  # fmt: skip
    prefix = p.context_tokens + p.profile_steps
    layout = layout_for(p, h100, len(h100.ssd_names), prefix)
    lanes, bases = _swarm_lanes(h100, p, [1000, 1010])
    ssds = max_io_bytes(h100, tuple(h100.ssd_names))
    ops = compute_ops(_assemble(p, h100, ssds, layout, lanes, bases, prefix))
    assert ops["gpu_s"].tolist() == pytest.approx([library_ms(2, 1005) / 1e3 / 32], rel=1e-12)
    # the roofline setting leaves the column at 0 (the op's own FLOPs and bytes time it)
    roof = dataclasses.replace(p, gpu_time="roofline")
    ops = compute_ops(_assemble(roof, h100, ssds, layout, lanes, bases, prefix))
    assert ops["gpu_s"].tolist() == [0.0]


def test_a_kvdrive_layer_times_only_what_the_gpu_attends() -> None:
    # one sequence selecting 2000 entries, 500 of them attended on the CPU
    # (MagicPIG's cpu_attn_entries): the GPU's decode step is at 1500 keys + 1
    h100 = load_profile("dgx-h100")
    p = KVDriveParams(model="Llama-3.1-8B", context_tokens=4000, batch=1, steps=1, layers=1,
                      gpu_time="measured")  # fmt: skip
    prefix = p.context_tokens + p.profile_steps
    layout = layout_for(p, h100, len(h100.ssd_names), prefix)
    lanes, bases = _swarm_lanes(h100, p, [2000], cpu_attn=500.0)
    ops = compute_ops(assemble(p, h100, {}, layout, lanes, bases, prefix))
    assert ops["gpu_s"].tolist() == pytest.approx([library_ms(1, 1500) / 1e3 / 32], rel=1e-12)
    ops = compute_ops(assemble(dataclasses.replace(p, gpu_time="auto"), load_profile("h20-8ssd"),
                               {}, layout, lanes, bases, prefix))  # fmt: skip
    assert ops["gpu_s"].tolist() == [0.0]


def test_run_json_records_what_timed_each_decode_variant(tmp_path) -> None:
    w = SparseDecodeParams(model="Llama-3.1-8B", context_tokens=4096, batch=1, sparsity=0.1,
                           steps=1, layers=1, tier="dram")  # fmt: skip
    variants = (Variant("roofline"), Variant("measured", {"gpu_time": "measured"}))
    cfg = ScenarioConfig("t", "x", 0, w, variants)
    run(cfg, load_profile("dgx-h100"), tmp_path)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["gpu_time"] == {
        "roofline": "roofline (tensor efficiency 0.75, HBM efficiency 0.9)",
        "measured": SXM,
    }


def test_a_capacity_point_takes_the_questions_gpu_time() -> None:
    """``kvtier plan --gpu-time measured``'s points: the sparse workload's layer is
    the library's step of ``docs`` sessions at ``sparsity x context`` entries
    (2 x round(8192 x 0.1) = 819), and TPOT (one decode step) is the 32 layers'."""
    q = Question(base="dgx-h100", trace="sparse_decode", context_tokens=8192, docs=2,
                 steps=1, gpu_time="measured")  # fmt: skip
    h100 = load_profile("dgx-h100")
    cfg = scenario(q, "sparse-dram", h100)
    result = run(cfg, h100, None)
    v = result.variants[0]
    assert v.records.stats["gpu_time"] == SXM
    want = library_ms(2, 819) / 1e3 / 32
    assert compute_ops(v.plan)["gpu_s"].tolist() == pytest.approx([want] * 32, rel=1e-12)
    step_s = v.summary["step_ms"] / 1e3
    assert step_s >= 32 * want * (1 - 1e-9)


def test_kvtier_plan_records_the_tables_as_each_points_gpu_time(tmp_path) -> None:
    """The CLI end to end on the covered H100 SXM: the point's row names the tables
    that timed it, and its TPOT (one decode step) holds the 32 measured layers."""
    import pandas as pd

    from kvtier.cli.main import main

    out = tmp_path / "plan"
    argv = ["plan", "--base", "dgx-h100", "--trace", "sparse_decode", "--context-tokens", "8192",
            "--docs", "2", "--steps", "1", "--designs", "sparse-dram", "--ssd-models", "PM9A3",
            "--ssd-counts", "1", "--dram-modules", "1", "--no-prune", "--ttft-p99", "0",
            "--gpu-time", "measured", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    row = pd.read_parquet(out / "plan.parquet").iloc[0]
    assert row["status"] == "ok" and row["gpu_time"] == SXM
    assert row["tpot_p99_s"] >= library_ms(2, 819) / 1e3 * (1 - 1e-9)  # the whole step


def test_a_plans_gpu_time_is_part_of_its_points_key() -> None:
    """A point stored under one GPU time is not resumed under another."""
    from sim.capacity.evaluate import Point, point_key
    from sim.capacity.variants import Hardware

    point = Point("sparse-dram", Hardware("Samsung PM9A3 3.84 TB U.2", 1, 1, 64.0))
    keys = {point_key(Question(gpu_time=g), point) for g in ("roofline", "measured", "auto")}
    assert len(keys) == 3


def test_seed_003s_model_is_timed_by_the_llama_config_of_its_shape() -> None:
    """Llama-3-8B-1048K maps to the library's Llama-3.1-8B config: equal in every
    shape the estimator reads (RoPE theta aside), so equal measured steps."""
    from sim.hw.measured import MODELS, GpuTime, resolve

    fields = ("layers", "hidden_size", "q_heads", "kv_heads", "head_dim", "intermediate_size",
              "vocab_size", "experts", "dtype_bytes")  # fmt: skip
    gradient = get_model("Llama-3-8B-1048K")
    assert [getattr(gradient, f) for f in fields] == [getattr(LLAMA, f) for f in fields]
    assert MODELS["Llama-3-8B-1048K"] == MODELS["Llama-3.1-8B"]
    step, source = resolve(load_profile("dgx-h100"), gradient, GpuTime("measured"))
    assert step is not None and source == SXM
    assert step.ms([], [16384] * 4) == pytest.approx(library_ms(4, 16384), rel=1e-12)
