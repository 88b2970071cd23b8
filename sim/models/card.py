"""Model cards: the shape of each LLM, and the catalog that lists them.

A :class:`ModelCard` is pure data read from ``catalog.yaml`` (one entry per
model, every number with its source).  Everything else derives from it: the
KV bytes per token that the tiers must hold and move, and the per-layer
parameter counts that the cost model in :mod:`sim.models.cost` turns into
FLOPs and HBM bytes.

Per-layer parameters are derived from the published totals, not from the
shapes, so they stay right when a family adds biases, norms or sinks:

* ``embedding_params`` = ``vocab_size * hidden_size``, once if the input
  embedding and the output head are tied, twice otherwise;
* ``layer_params`` = (``params_total`` - ``embedding_params``) / ``layers``;
* for an MoE model one expert is a gated (SwiGLU) MLP,
  ``expert_params`` = 3 * ``hidden_size`` * ``intermediate_size`` (so for MoE
  cards ``intermediate_size`` is the *per-expert* width, ``moe_intermediate_size``
  in Qwen3-MoE configs), ``layer_dense_params`` = ``layer_params`` -
  ``experts * expert_params`` is what every token uses (attention, router,
  norms), and ``layer_active_params`` adds the ``experts_active`` experts.

``params_active_b`` is kept as the vendor reports it and is not used by the
cost model: vendors disagree on whether it counts the input embedding (Qwen
does, OpenAI's GPT-OSS card does not), which the shape-based derivation above
sidesteps.  ``shape_layer_params`` is an independent estimate from the shapes
alone, used by the tests to check the catalog is self-consistent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwprofiles.loader import build_dataclass, read_yaml

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.yaml"

_POSITIVE = {"positive": True}


class ModelError(ValueError):
    """A model card or the catalog is malformed; the message is one line."""


@dataclass(frozen=True)
class ModelCard:
    """The shape of one LLM, as its official ``config.json`` states it.

    Attributes:
        name: catalog name, unique case-insensitively (``Qwen3-8B``).
        family: architecture family (``llama``, ``qwen3``, ``gpt-oss``, ...).
        layers: transformer blocks (``num_hidden_layers``).
        hidden_size: residual-stream width.
        q_heads: query heads (``num_attention_heads``).
        kv_heads: key/value heads (``num_key_value_heads``); equals
            ``q_heads`` for MHA.
        head_dim: width of one head.
        intermediate_size: MLP width; for MoE cards the width of one expert.
        vocab_size: rows of the embedding table.
        params_total_b: all parameters, in billions.
        params_active_b: parameters used per token as the vendor reports
            them, in billions (== ``params_total_b`` for dense models).
        experts: routed experts per MoE layer (0 for dense).
        experts_active: experts each token is routed to (0 for dense).
        tied_embeddings: input embedding and output head share one matrix.
        dtype_bytes: bytes per weight and per KV element (2: bf16/fp16).
        max_context: longest context the released config supports, tokens.
        yarn_context: longest context with YaRN rope scaling where the vendor's
            model card documents it (Qwen3: 131,072), tokens; 0 = none.  YaRN
            changes positions only, not the KV size.
        source: where the numbers come from (config.json URL, seed table).
    """

    name: str
    family: str
    layers: int = field(metadata=_POSITIVE)
    hidden_size: int = field(metadata=_POSITIVE)
    q_heads: int = field(metadata=_POSITIVE)
    kv_heads: int = field(metadata=_POSITIVE)
    head_dim: int = field(metadata=_POSITIVE)
    intermediate_size: int = field(metadata=_POSITIVE)
    vocab_size: int = field(metadata=_POSITIVE)
    params_total_b: float = field(metadata=_POSITIVE)
    params_active_b: float = field(metadata=_POSITIVE)
    max_context: int = field(metadata=_POSITIVE)
    source: str
    experts: int = 0
    experts_active: int = 0
    tied_embeddings: bool = False
    yarn_context: int = 0
    dtype_bytes: int = field(default=2, metadata=_POSITIVE)

    # ---- KV cache -------------------------------------------------------
    @functools.cached_property  # read at every serving iteration: worked out once
    def kv_bytes_per_token_layer(self) -> int:
        """Bytes of K and V for one token in one layer."""
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token across all layers."""
        return self.layers * self.kv_bytes_per_token_layer

    @property
    def gqa_group(self) -> int:
        """Query heads sharing one KV head (1 for MHA)."""
        return self.q_heads // self.kv_heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # ---- weights --------------------------------------------------------
    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights at ``dtype_bytes`` per parameter."""
        return self.params_total_b * 1e9 * self.dtype_bytes

    @property
    def active_weight_bytes(self) -> float:
        """Bytes of the vendor-reported active parameters."""
        return self.params_active_b * 1e9 * self.dtype_bytes

    @functools.cached_property  # read at every serving iteration: worked out once
    def embedding_params(self) -> int:
        """Input embedding plus output head (counted once when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @functools.cached_property  # read at every serving iteration: worked out once
    def layer_params(self) -> float:
        """All parameters of one transformer layer (every expert included)."""
        return (self.params_total_b * 1e9 - self.embedding_params) / self.layers

    @functools.cached_property  # read at every serving iteration: worked out once
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up, down); 0 for dense."""
        return 3 * self.hidden_size * self.intermediate_size if self.is_moe else 0

    @functools.cached_property  # read at every serving iteration: worked out once
    def layer_dense_params(self) -> float:
        """Parameters of one layer that every token uses (no routed experts)."""
        return self.layer_params - self.experts * self.expert_params

    @functools.cached_property  # read at every serving iteration: worked out once
    def layer_active_params(self) -> float:
        """Parameters of one layer that one token uses."""
        return self.layer_dense_params + self.experts_active * self.expert_params

    @property
    def shape_layer_params(self) -> int:
        """One layer's parameters from the shapes alone (no norms or biases).

        Attention: q and o are ``hidden x q_heads*head_dim``, k and v are
        ``hidden x kv_heads*head_dim``; MLP: gated, 3 matrices of
        ``hidden x intermediate`` per expert, plus a router for MoE.
        """
        attn = 2 * self.hidden_size * self.head_dim * (self.q_heads + self.kv_heads)
        mlp_copies = self.experts if self.is_moe else 1
        router = self.hidden_size * self.experts
        return attn + mlp_copies * 3 * self.hidden_size * self.intermediate_size + router


def _validate(card: ModelCard, where: Any, key: str) -> None:
    """Cross-field checks the generic loader cannot express."""
    if card.q_heads % card.kv_heads:
        raise where.error(
            f"{key}.kv_heads",
            f"q_heads ({card.q_heads}) is not divisible by kv_heads ({card.kv_heads})",
        )
    for name in ("experts", "experts_active"):
        if getattr(card, name) < 0:
            raise where.error(f"{key}.{name}", f"must be >= 0, got {getattr(card, name)}")
    if card.is_moe != (card.experts_active > 0) or card.experts_active > card.experts:
        raise where.error(
            f"{key}.experts_active",
            f"must be 0 for dense and in 1..experts for MoE, got {card.experts_active} "
            f"with experts={card.experts}",
        )
    if card.params_active_b > card.params_total_b:
        raise where.error(
            f"{key}.params_active_b",
            f"{card.params_active_b} exceeds params_total_b {card.params_total_b}",
        )
    if not card.is_moe and card.params_active_b != card.params_total_b:
        raise where.error(f"{key}.params_active_b", "must equal params_total_b for a dense model")
    if card.layer_dense_params <= 0:
        raise where.error(
            f"{key}.params_total_b",
            f"too small for the embeddings and {card.experts} experts of "
            f"{card.expert_params} parameters per layer",
        )


def _read_catalog(path: Path) -> dict[str, ModelCard]:
    data, where = read_yaml(path, error=ModelError)
    if not isinstance(data, dict) or set(data) != {"models"}:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise where.error("", f"must be a mapping with the single key 'models', got {got}")
    entries = data["models"]
    if not isinstance(entries, list) or not entries:
        raise where.error("models", "must be a non-empty list of model cards")
    cards: dict[str, ModelCard] = {}
    seen: dict[str, str] = {}
    for i, entry in enumerate(entries):
        key = f"models[{i}]"
        card = build_dataclass(ModelCard, entry, where, key)
        folded = card.name.casefold()
        if folded in seen:
            raise where.error(f"{key}.name", f"duplicate model name '{card.name}' ({seen[folded]})")
        _validate(card, where, key)
        seen[folded] = key
        cards[card.name] = card
    return cards


@functools.lru_cache(maxsize=8)
def _cached_catalog(path: Path, mtime_ns: int) -> dict[str, ModelCard]:
    return _read_catalog(path)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_catalog(path: str | Path | None = None) -> dict[str, ModelCard]:
    """Load the catalog at ``path`` (default: the packaged ``catalog.yaml``).

    Returns the cards by name in file order.  Any mistake raises
    :class:`ModelError` naming the file, the line and the key.
    """
    resolved = CATALOG_PATH if path is None else Path(path).resolve()
    if not resolved.exists():
        raise ModelError(f"{_shown(resolved)}: no such file")
    return dict(_cached_catalog(resolved, resolved.stat().st_mtime_ns))


def get_model(name: str, path: str | Path | None = None) -> ModelCard:
    """The card called ``name`` (case-insensitive) from the catalog at ``path``."""
    cards = load_catalog(path)
    if name in cards:
        return cards[name]
    folded = {n.casefold(): card for n, card in cards.items()}
    if name.casefold() in folded:
        return folded[name.casefold()]
    shown = _shown(CATALOG_PATH if path is None else Path(path).resolve())
    raise ModelError(f"{shown}: models: unknown model '{name}' (known: {', '.join(cards)})")


__all__ = ["CATALOG_PATH", "ModelCard", "ModelError", "get_model", "load_catalog"]
