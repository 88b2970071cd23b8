"""Seed 002's Fig. 1 mechanism through the serving engine: the share of TTFT
spent reloading a history, over the shared PCIe host link vs over NVLink.

For each history length ``H`` one request re-sends ``H`` tokens of history
plus ``prompt_tokens`` new ones.  The history's KV is already offloaded:
either to host memory (a ``cpu`` tier, reloaded over PCIe) or to blocks
borrowed on a worker GPU (the master's ``peer`` tier, reloaded over NVLink).
Loads happen in the forward pass (no layer-wise overlap), so the TTFT is the
reload plus the prefill of what was not cached, and the reload share is the
request's blocked I/O time over its TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.requests import KeySpace, load_requests, request_table

GIB = 2**30


def _request(tokens: int, block_tokens: int):
    warm = {"request_id": 1, "arrival_s": 0.0, "session_id": 0, "turn": 0,
            "input_tokens": tokens, "output_tokens": 1}  # fmt: skip
    query = {**warm, "request_id": 0, "turn": 1, "input_tokens": tokens}
    space = KeySpace()  # the query and its history: one key space
    return [load_requests(request_table([r], block_tokens), block_tokens, space=space)
            for r in (query, warm)]  # fmt: skip


def reload_point(
    profile: HardwareProfile, model: str, history: int, prompt: int, over: str, block_tokens: int
) -> dict:
    """One request of ``history + prompt`` tokens whose history sits in host
    memory (``over='pcie'``) or on gpu1 (``'nvlink'``), served on gpu0."""
    card = get_model(model)
    query, warm = _request(history, block_tokens)
    query[0].input_tokens = history + prompt  # the new prompt follows the cached history
    kv = history * card.kv_bytes_per_token
    blocks = -(-(history + prompt + 1) // block_tokens) + 1
    cfg = EngineConfig(gpu_blocks=blocks, block_tokens=block_tokens, gpu="gpu0")
    if over == "pcie":
        design = get_design("gpu-only", {"cpu_gib": 2 * kv / GIB})
        insts = [Instance("master", card, design, cfg, query, warm)]
    else:
        design = get_design("gpu-only")
        wcfg = EngineConfig(gpu_blocks=1, block_tokens=block_tokens, gpu="gpu1")
        insts = [
            Instance("master", card, design, cfg, query, warm, role="master"),
            Instance("worker", card, design, wcfg, [], [], role="worker", lend_bytes=2 * kv),
        ]
    req = run_instances(profile, insts)["master"].requests.to_pylist()[0]
    ttft, load = req["ttft_s"], req["blocked_io_s"]
    return {"history_tokens": history, "path": over, "ttft_s": ttft, "reload_s": load,
            "reload_share": load / ttft}  # fmt: skip


def reload_shares(
    profile: HardwareProfile,
    model: str = "LWM-Text-1M",
    histories: Sequence[int] = (5_000, 10_000, 20_000, 50_000),
    prompt: int = 256,  # Fig. 1: "computing 256 new tokens"
    block_tokens: int = 16,
) -> pa.Table:
    """Fig. 1's table: reload time and share of TTFT per history, PCIe vs NVLink."""
    rows = [
        reload_point(profile, model, h, prompt, over, block_tokens)
        for h in histories
        for over in ("pcie", "nvlink")
    ]
    return pa.Table.from_pylist(rows)


# ---- the scenario's report tables (printed by `kvtier sim`, written by analysis/) ----------
GPU_SIZES_GB = (96, 80, 32, 24)  # §5.3: H20, A100, V100, L4
FIG9_MASTERS = ("LWM-Text-1M", "Qwen3-14B", "Qwen3-32B")
# Fig. 9's workers give the master their whole KV memory: Eq. 2 sizes the LSC by
# C_worker, "the KV cache size of the i-th worker model", and §3.2 says the LSC's
# capacity "is determined by the total KV cache size of all worker models" (§5.3
# runs no worker load beside it).  A serving run's share (lend_share +
# stream_share) is that run's own choice and does not size Fig. 9.
FIG9_WORKER_SHARE = 1.0


def fig9_workers(gpu_gb: float):
    """§5.3's workers: Qwen3-14B and Qwen3-8B, two Qwen3-8B on 24 GB (14B does not fit)."""
    names = ("Qwen3-8B", "Qwen3-8B") if gpu_gb <= 24 else ("Qwen3-14B", "Qwen3-8B")
    return [get_model(n) for n in names]


def max_context_table(lend_share: float = FIG9_WORKER_SHARE, block_tokens: int = 16) -> pa.Table:
    """Fig. 9: the longest context per master and GPU size (0 = does not fit)."""
    from sim.serving.swift.maxctx import max_context_rows

    masters = [get_model(m) for m in FIG9_MASTERS]
    workers = {g: fig9_workers(g) for g in GPU_SIZES_GB}
    return pa.Table.from_pylist(
        max_context_rows(masters, GPU_SIZES_GB, workers, lend_share, block_tokens)
    )


def worker_interference(
    summary: pa.Table, gpus: dict[str, str] | None = None, hbm_gbps: float = 0.0
) -> pa.Table:
    """Each worker's mean TTFT and TPOT in the variants where workers lend
    (``lent_gb > 0``) against the mean over the variants where none does,
    and the relative increase (seed 002 §5.2, Fig. 8).

    With ``gpus`` (worker name -> its GPU), each row also carries the bytes
    the master's NVLink copies read from and wrote to that worker's HBM
    (``peer_hbm_gb``, the summary's ``peer_hbm_gb_<gpu>``: :class:`PeerHbm`'s
    charges) and, with the GPU's achievable ``hbm_gbps``, the share of the
    worker's HBM time they took over the master's span (``hbm_share``): the
    slowdown an always-busy, HBM-bound worker would see from them; and the GPU-seconds
    the copies' NCCL kernels held the worker's SMs (``peer_sm_s``, the summary's
    ``peer_sm_s_<gpu>``: ``copy_sm_share`` x each copy's time) over that span
    (``sm_share``: what an always-busy worker would lose to them)."""
    rows = summary.to_pylist()
    workers = sorted({k[: -len("_ttft_mean_s")] for k in summary.schema.names
                      if k.endswith("_ttft_mean_s") and k != "ttft_mean_s"})  # fmt: skip
    idle = [r for r in rows if not r["lent_gb"]]
    out = []
    for r in (r for r in rows if r["lent_gb"]):
        for w in workers:
            row = {"design": r["design"], "worker": w}
            for m in ("ttft", "tpot"):
                base = sum(x[f"{w}_{m}_mean_s"] for x in idle) / len(idle) if idle else math.nan
                row[f"{m}_alone_s"], row[f"{m}_lending_s"] = base, r[f"{w}_{m}_mean_s"]
                row[f"{m}_increase"] = r[f"{w}_{m}_mean_s"] / base - 1 if base else math.nan
            if gpus is not None:
                gb = _num(r, f"peer_hbm_gb_{gpus[w]}")
                span = _num(r, "duration_s")
                row["peer_hbm_gb"] = gb
                row["hbm_share"] = gb / (span * hbm_gbps) if span and hbm_gbps else math.nan
                row["peer_sm_s"] = held = _num(r, f"peer_sm_s_{gpus[w]}")
                row["sm_share"] = held / span if span else math.nan
            out.append(row)
    return pa.Table.from_pylist(out)


def _num(r: dict, key: str) -> float:
    """A summary column that only some variants have (None or NaN elsewhere) -> 0."""
    v = r.get(key)
    return 0.0 if v is None or v != v else float(v)


def prefill_breakdown(summary: pa.Table) -> pa.Table:
    """Mean TTFT per design split into queueing, blocked KV load and the rest
    (execution: compute, and loads the compute waited on layer by layer), plus
    the bytes stored (stores run behind the compute, off the TTFT path) and the
    master's cache: regular-cache and LSC blocks (Eq. 4-5; without an LSC the
    regular cache is its whole KV memory) and the bytes the LSC streamed."""
    out = []
    for r in summary.to_pylist():
        q, load = r["queue_mean_s"], r["blocked_io_mean_s"]
        lsc = _num(r, "master_lsc_n_lsc")
        rc = _num(r, "master_lsc_n_rc") if lsc else _num(r, "gpu_kv_blocks")
        streamed = _num(r, "master_lsc_loaded_gb") + _num(r, "master_lsc_stored_gb")
        out.append({"design": r["design"], "ttft_mean_s": r["ttft_mean_s"], "queue_s": q,
                    "load_s": load, "execution_s": r["ttft_mean_s"] - q - load,
                    "store_gb": r["store_gb"], "rc_blocks": int(rc), "lsc_blocks": int(lsc),
                    "streamed_gb": streamed})  # fmt: skip
    return pa.Table.from_pylist(out)
