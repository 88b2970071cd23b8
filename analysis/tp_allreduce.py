"""Tensor parallelism's all-reduce: kvtier's NCCL ring model against aiconfigurator-core's
measured vLLM tables, and the serving step it gives (docs/compute-time.md).

    PYTHONPATH=$PWD python -m analysis.tp_allreduce [steps|band]

``steps``: one 8,192-token document and one decode, gpu-only, ``dgx-h100``, measured
compute, Llama-3.1-8B and -70B at tp 1/2/4/8: TTFT and TPOT as this checkout simulates
them, beside the library's own whole tp-N step (``predict_prefill_latency(1, 8192)``,
``mixed_step_latency(0, 1, 8192, 1, 0)``).  It uses only APIs that predate the
measured all-reduce, so running it from an older checkout prints that one's numbers.

``band``: one all-reduce of ``tokens x hidden`` bf16 at tp 2/4/8 on every covered system
with NVLink (h100_sxm, h200_sxm, a100_sxm, b200_sxm; vLLM at kvtier's default version):
the ring model (:func:`sim.serving.execute.tp.allreduce_bytes` at the system's
``intra_node_bw`` x 0.85, the default ``efficiency.nvlink``, plus
:func:`~sim.serving.execute.tp.allreduce_latency_s`) over the library's measured one
(``MeasuredStep.allreduce_ms``); rows whose library answer is not ``silicon`` are marked.
"""

from __future__ import annotations

import sys

from aiconfigurator_core.sdk import perf_database

from hwprofiles import load_profile
from sim.config import ScenarioConfig, ServingParams, Variant
from sim.hw.measured import MODELS, MeasuredStep, _handle, _quiet, default_version
from sim.models import get_model
from sim.runner import run
from sim.serving.execute.tp import allreduce_bytes, allreduce_latency_s

NVLINK_EFFICIENCY = 0.85  # hwprofiles.schema.EfficiencySpec.nvlink (an assumption there)
SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm")
TOKENS = (1, 8, 64, 256, 1024, 4096, 8192, 16384)


def steps() -> None:
    print("| model | tp | TTFT | library prefill | TTFT / library | TPOT | library decode "
          "| TPOT / library |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name in ("Llama-3.1-8B", "Llama-3.1-70B"):
        for tp in (1, 2, 4, 8):
            if name == "Llama-3.1-70B" and tp == 1:
                continue  # 141 GB of weights: not on one 80 GB H100
            w = ServingParams(
                model=name, design="gpu-only", trace="long_doc", context_tokens=8192, docs=1,
                output_tokens=2, block_tokens=256, gpu_prefix_cache=False, tp=tp,
                gpu_time="measured",
            )  # fmt: skip
            cfg = ScenarioConfig("t", "t", 0, w, (Variant("gpu-only"),))
            s = run(cfg, load_profile("dgx-h100"), None).variants[0].summary
            h = _handle(MODELS[name], "h100_sxm", "vllm", "0.24.0", tp)
            pre, dec = h.predict_prefill_latency(1, 8192, 0), h.mixed_step_latency(0, 1, 8192, 1, 0)
            ttft, tpot = s["ttft_p99_s"] * 1e3, s["tpot_p99_s"] * 1e3
            print(f"| {name} | {tp} | {ttft:.1f} | {pre:.1f} | {ttft / pre:.3f} | {tpot:.2f} "
                  f"| {dec:.2f} | {tpot / dec:.3f} |")  # fmt: skip


def band() -> None:
    print("| system | tp | hidden | tokens | MiB | ring ms | measured ms | ring / measured |")
    print("|---|---|---|---|---|---|---|---|")
    lo_hi: dict[tuple[str, str], list[float]] = {}
    for system in SYSTEMS:
        with _quiet():
            node = perf_database.load_system_spec(system)["node"]
        rate = float(node["intra_node_bw"]) * NVLINK_EFFICIENCY
        version = default_version(system, "vllm")
        for tp in (2, 4, 8):
            for name in ("Llama-3.1-8B", "Llama-3.1-70B"):
                card = get_model(name)
                h = _handle(MODELS[name], system, "vllm", version, tp)
                step = MeasuredStep(h, "", tp=tp, card=card)
                for t in TOKENS:
                    ring = allreduce_bytes(card, t, tp) / 2 / rate + allreduce_latency_s(tp)
                    kw = {"is_context": True, "batch_size": 1, "s": 1, "x": t}
                    src = h.evaluate_ops_json(step._allreduce, **kw)[0][3]
                    ms = step.allreduce_ms(t)
                    mib = t * card.hidden_size * card.dtype_bytes / 2**20
                    ratio = ring * 1e3 / ms
                    mark = "" if src == "silicon" else f" ({src})"
                    print(f"| {system} | {tp} | {card.hidden_size} | {t} | {mib:g} "
                          f"| {ring * 1e3:.4f} | {ms:.4f}{mark} | {ratio:.2f} |")  # fmt: skip
                    if src != "silicon":
                        continue
                    for what, on in (("1 token", t == 1), (">= 8 MiB", mib >= 8)):
                        if on:
                            lo_hi.setdefault((system, what), []).append(ratio)
                            lo_hi.setdefault(("all", what), []).append(ratio)
    for (system, what), rs in sorted(lo_hi.items()):
        print(f"ring / measured, {system}, {what}: {min(rs):.2f}-{max(rs):.2f} ({len(rs)} points)")


if __name__ == "__main__":
    what = sys.argv[1:] or ["steps", "band"]
    for w in what:
        {"steps": steps, "band": band}[w]()
