"""The layer stream cache at run time (seed 002 §3.2-3.3, Fig. 9): two tables
the ``swiftcache`` scenario prints, from runs of the serving engine.

Both put one master on gpu0 of a GPU of ``G`` GB and workers on gpu1.. whose
``stream_bytes`` are what :func:`~sim.serving.swift.maxctx.worker_lent_bytes`
says a worker of Fig. 9 lends.  The master's own full-layer blocks are its
KV room ``0.9 G - weights - act(chunk)`` (:mod:`sim.serving.swift.maxctx`),
its prefill runs in chunks of ``chunk`` tokens, and the compute is the
profile's GPU (an H20) whatever ``G`` is: ``G`` sets memory only.

* :func:`runtime_max_context` serves requests of growing context (half the
  arithmetic's maximum, the maximum, one block more) and reports the longest
  one the master actually served, with and without the LSC, against the
  arithmetic (SwiftCache and vLLM with 8K chunks);
* :func:`long_context_table` serves 20K-40K-token requests one at a time and
  reports TTFT and TPOT with the LSC against the same master without it
  (which refuses what its blocks cannot hold: vLLM's scheduler rejects a
  prompt longer than its KV cache) and the streamed bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.models import ModelCard, get_model
from sim.serving.build import gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.requests import load_requests, request_table
from sim.serving.swift.lsc import layer_block_bytes
from sim.serving.swift.maxctx import (
    GB,
    activation_bytes_per_token,
    swift_max_context,
    usable_bytes,
    vllm_max_context,
    worker_lent_bytes,
)

B = 16


def _master_memory(card: ModelCard, gpu_gb: float, chunk: int) -> tuple[int, int]:
    """The master's KV room as (full-layer blocks, single-layer slots)."""
    own = max(usable_bytes(card, gpu_gb * GB) - activation_bytes_per_token(card) * chunk, 0.0)
    return gpu_blocks(own, card, B), int(own // layer_block_bytes(card, B))


def serve(
    profile: HardwareProfile,
    card: ModelCard,
    gpu_gb: float,
    workers: Sequence[ModelCard],
    lend_share: float,
    lens: Sequence[tuple[int, int]],
    lsc: bool,
    chunk: int = 8192,
) -> tuple[list[dict], dict]:
    """Requests ``(input, output)`` served one after another (one session) by a
    master of ``card`` on a ``gpu_gb`` GPU; (request rows, run stats)."""
    rows = [{"request_id": i, "arrival_s": 0.0, "session_id": 0, "turn": i,
             "input_tokens": n_in, "output_tokens": n_out}
            for i, (n_in, n_out) in enumerate(lens)]  # fmt: skip
    reqs = load_requests(request_table(rows, B), B)
    design = get_design("gpu-only")
    blocks, slots = _master_memory(card, gpu_gb, chunk)
    cfg = EngineConfig(gpu_blocks=blocks, block_tokens=B, gpu="gpu0", max_batched_tokens=chunk,
                       prefix_cache=False, keep_plan=False)  # fmt: skip
    insts = [Instance("master", card, design, cfg, reqs, role="master", lsc=lsc, lsc_slots=slots)]
    for i, w in enumerate(workers, start=1):
        wcfg = EngineConfig(gpu_blocks=1, block_tokens=B, gpu=f"gpu{i}", keep_plan=False)
        lent = worker_lent_bytes(w, gpu_gb * GB, lend_share, chunk)
        insts.append(Instance(f"w{i}", w, design, wcfg, [], role="worker", stream_bytes=lent))
    stats: dict = {}
    rec = run_instances(profile, insts, stats)["master"]
    return rec.requests.to_pylist(), stats.get("master_lsc", {})


def _longest(rows: list[dict]) -> int:
    served = [r["input_tokens"] + r["output_tokens"] for r in rows if not r["rejected"]]
    return max(served, default=0)


def runtime_max_context(
    profile: HardwareProfile,
    masters: Sequence[str],
    gpu_gb: Sequence[float],
    workers_for,
    lend_share: float,
) -> pa.Table:
    """Longest context served at run time per (master, GPU size), with and
    without the LSC, beside the arithmetic (module docstring)."""
    out = []
    for name in masters:
        card = get_model(name)
        for g in gpu_gb:
            ws = workers_for(g)
            want = swift_max_context(card, g * GB, ws, lend_share)
            base = vllm_max_context(card, g * GB, 8192, B)
            row = {"model": name, "gpu_gb": g, "swiftcache_arith": want, "vllm_chunk_8k": base,
                   "served_lsc": 0, "served_no_lsc": 0, "ttft_longest_s": float("nan")}  # fmt: skip
            if want:
                half = max(want // 2 // B * B, B)
                lens = [(half - 1, 1), (want - 1, 1), (want + B - 1, 1)]
                rows, _ = serve(profile, card, g, ws, lend_share, lens, True)
                row["served_lsc"] = _longest(rows)
                row["ttft_longest_s"] = max(
                    (r["ttft_s"] for r in rows if not r["rejected"]), default=float("nan")
                )
                rows, _ = serve(profile, card, g, ws, lend_share, [(base - 1, 1), (base, 1)], False)
                row["served_no_lsc"] = _longest(rows)
            out.append(row)
    return pa.Table.from_pylist(out)


def long_context_table(
    profile: HardwareProfile,
    master: str,
    gpu_gb: Sequence[float],
    workers_for,
    lend_share: float,
    inputs: Sequence[int] = (20_000, 30_000, 40_000),
    output: int = 32,
) -> pa.Table:
    """TTFT and TPOT of long requests with and without the LSC (module docstring)."""
    card, out = get_model(master), []
    for g in gpu_gb:
        ws = workers_for(g)
        for n in inputs:
            row: dict = {"model": master, "gpu_gb": g, "input_tokens": n}
            for lsc in (False, True):
                (r,), st = serve(profile, card, g, ws, lend_share, [(n, output)], lsc)
                key = "lsc" if lsc else "no_lsc"
                row[f"{key}_served"] = not r["rejected"]
                row[f"{key}_ttft_s"] = r["ttft_s"] if not r["rejected"] else float("nan")
                row[f"{key}_tpot_s"] = r["tpot_s"] if not r["rejected"] else float("nan")
                if lsc:
                    row["streamed_gb"] = st.get("loaded_gb", 0.0) + st.get("stored_gb", 0.0)
            out.append(row)
    return pa.Table.from_pylist(out)
