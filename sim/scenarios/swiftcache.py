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

from collections.abc import Sequence

import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.engine import EngineConfig
from sim.serving.multi import Instance, run_instances
from sim.serving.requests import load_requests, request_table

GIB = 2**30


def _request(tokens: int, block_tokens: int):
    warm = {"request_id": 1, "arrival_s": 0.0, "session_id": 0, "turn": 0,
            "input_tokens": tokens, "output_tokens": 1}  # fmt: skip
    query = {**warm, "request_id": 0, "turn": 1, "input_tokens": tokens}
    return [load_requests(request_table([r], block_tokens), block_tokens) for r in (query, warm)]


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
    prompt: int = 64,
    block_tokens: int = 16,
) -> pa.Table:
    """Fig. 1's table: reload time and share of TTFT per history, PCIe vs NVLink."""
    rows = [
        reload_point(profile, model, h, prompt, over, block_tokens)
        for h in histories
        for over in ("pcie", "nvlink")
    ]
    return pa.Table.from_pylist(rows)
