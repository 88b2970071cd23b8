"""The longest context a master can serve per GPU memory size (seed 002 §5.3, Fig. 9).

The engine keeps a request's whole KV on its GPU, so the longest context is
set by memory arithmetic, not by a run.  On a GPU of ``G`` bytes:

* usable memory ``U = util x G - weights`` (vLLM's ``gpu_memory_utilization``);
* a prefill of ``c`` tokens needs ``act(c) = c x d x (3 I + 4 h)`` bytes of
  activations at its peak: one layer's MLP holds the fused gate/up output
  (``2 I`` per token) and its SiLU-and-multiply product (``I``), beside four
  residual-stream tensors (hidden states, residual, normed input, attention
  output: ``4 h``); FlashAttention keeps no score matrix, and vLLM computes
  logits for the last token only.  The seed does not give this formula: it
  reports that chunked prefill "reduces peak GPU memory usage by processing
  prompts in chunks, thereby lowering activation memory overhead" (§5), and
  this is the smallest model of that statement;
* vLLM without chunked prefill processes the whole prompt at once:
  ``n kv + act(n) <= U``, so ``n = U / (kv + d (3 I + 4 h))``;
* vLLM with chunks of ``c`` tokens: ``n kv <= U - act(min(c, n))``;
* SwiftCache (LSC + RC, §3.2): the master's KV memory is ``U - act(c)`` (it
  runs with vLLM's default 8K chunks: "LSC is orthogonal to chunked
  prefill", §5.3), split by :func:`~sim.serving.swift.lsc.size_stream_cache`
  beside the bytes the workers lend; a worker on the same GPU size lends
  ``lend_share`` of its own KV memory ``U_w - act_w(c)``.

Contexts are whole blocks of ``block_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.models import ModelCard
from sim.serving.swift.lsc import size_stream_cache

GB = 1e9  # GPU sizes are the vendors' (H20 96 GB, A100 80 GB, V100 32 GB, L4 24 GB)


def activation_bytes_per_token(card: ModelCard) -> int:
    """Peak prefill activation per token in flight: ``d (3 I + 4 h)`` (module docstring)."""
    return card.dtype_bytes * (3 * card.intermediate_size + 4 * card.hidden_size)


def usable_bytes(card: ModelCard, gpu_bytes: float, util: float = 0.9) -> float:
    """``util x G - weights``: what KV and activations share (may be negative)."""
    return util * gpu_bytes - card.weight_bytes


def _blocks(nbytes: float, per_token: float, block_tokens: int) -> int:
    return max(int(nbytes // (per_token * block_tokens)), 0) * block_tokens


def vllm_max_context(
    card: ModelCard, gpu_bytes: float, chunk: int = 0, block_tokens: int = 16, util: float = 0.9
) -> int:
    """Longest context of vLLM, tokens; ``chunk`` 0 = no chunked prefill."""
    u = usable_bytes(card, gpu_bytes, util)
    a = activation_bytes_per_token(card)
    if chunk == 0:
        return _blocks(u, card.kv_bytes_per_token + a, block_tokens)
    n = _blocks(u - a * chunk, card.kv_bytes_per_token, block_tokens)
    if n < chunk:  # the whole prompt fits in one chunk: no chunking happens
        return vllm_max_context(card, gpu_bytes, 0, block_tokens, util)
    return n


def worker_lent_bytes(
    card: ModelCard, gpu_bytes: float, lend_share: float, chunk: int = 8192, util: float = 0.9
) -> float:
    """Bytes a worker of ``card`` on a GPU of ``gpu_bytes`` lends: ``lend_share``
    of its KV memory ``U - act(chunk)`` (0 when the model does not fit)."""
    kv = usable_bytes(card, gpu_bytes, util) - activation_bytes_per_token(card) * chunk
    return max(kv, 0.0) * lend_share


def swift_max_context(
    card: ModelCard,
    gpu_bytes: float,
    workers: Sequence[ModelCard],
    lend_share: float,
    chunk: int = 8192,
    block_tokens: int = 16,
    util: float = 0.9,
) -> int:
    """Longest context of a SwiftCache master beside ``workers`` (each on its
    own GPU of the same size), tokens."""
    own = usable_bytes(card, gpu_bytes, util) - activation_bytes_per_token(card) * chunk
    if own <= 0:
        return 0
    lent = [worker_lent_bytes(w, gpu_bytes, lend_share, chunk, util) for w in workers]
    return size_stream_cache(card, own, lent, block_tokens).max_tokens


def max_context_rows(
    masters: Sequence[ModelCard],
    gpu_gb: Sequence[float],
    workers_for: dict[float, Sequence[ModelCard]],
    lend_share: float,
    block_tokens: int = 16,
) -> list[dict]:
    """Fig. 9's table: one row per (master, GPU size) with every system's
    longest context in tokens (0 = the master does not fit) and SwiftCache's
    gain over vLLM with 8K chunks."""
    rows = []
    for card in masters:
        for g in gpu_gb:
            gb = g * GB
            row = {"model": card.name, "gpu_gb": g,
                   "vllm": vllm_max_context(card, gb, 0, block_tokens),
                   "vllm_chunk_32k": vllm_max_context(card, gb, 32768, block_tokens),
                   "vllm_chunk_8k": vllm_max_context(card, gb, 8192, block_tokens),
                   "swiftcache": swift_max_context(card, gb, workers_for[g], lend_share,
                                                   8192, block_tokens)}  # fmt: skip
            base = row["vllm_chunk_8k"]
            row["gain_vs_8k"] = row["swiftcache"] / base if base else float("nan")
            rows.append(row)
    return rows
