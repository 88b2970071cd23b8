"""The serving engine's configuration (:class:`EngineConfig`), apart so that the
engine's parts can name it without importing the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.hw.measured import GpuTime


@dataclass(frozen=True)
class EngineConfig:
    gpu_blocks: int  # GPU KV cache, in blocks of block_tokens
    block_tokens: int = 16
    max_batch: int = 128  # running (and parked) requests at most
    max_batched_tokens: int = 0  # tokens per iteration; 0 = unlimited (no chunked prefill)
    prefix_cache: bool = True  # keep finished requests' blocks on the GPU for reuse
    max_inflight: int = 0  # client: outstanding requests at most; 0 = open loop
    preempt: bool = False  # vLLM v1: blocks as tokens need them, preempt the newest on shortage
    gpu: str = "gpu0"
    # a finished request's reply KV: "off" dropped; "gpu" hashed in the GPU prefix cache
    # (vLLM v1; LMCache saves no decode KV by default); "store" also offloaded (SGLang
    # HiCache inserts input + output); needs the replies' hashes (load_requests)
    cache_replies: str = "off"
    keep_plan: bool = True  # write the issued plan down (extents, dependencies) for replay
    # the iterations' GPU time: the roofline, or measured kernel tables (sim.hw.measured)
    gpu_time: GpuTime = field(default_factory=GpuTime)
