"""The master's cache: layer stream cache (LSC) and regular cache (RC), §3.2.

Only the layer being executed reads its KV (§2.5, Insight-3), so the master
keeps a *layer stream cache*: a buffer of single-layer blocks holding one
layer of the blocks whose full-layer copies live on the workers.  Before a
layer's attention its KV is loaded into the LSC over NVLink, and the new
entries are stored back after QKV (§3.3).  What the LSC does not need of the
master's KV memory becomes a *regular cache* of full-layer blocks that never
leave the master.

Sizing (seed 002 §3.2, Eq. 1-5), with ``B`` tokens per block, ``H_kv`` KV
heads of ``D_kv`` elements, ``d`` bytes per element and ``L`` master layers:

* Eq. 1: one single-layer master block is ``M_block = 2 B H_kv D_kv d``
  bytes (K and V);
* Eq. 2: worker ``i`` with ``C_i`` bytes of KV memory lent holds
  ``K_i = floor(C_i / (M_block L))`` full-layer master blocks (all ``L``
  layers of each block live there);
* Eq. 3: the master's own ``C_master`` bytes hold ``K_master =
  floor(C_master / M_block)`` single-layer blocks;
* Eq. 4: the LSC needs one single-layer slot per block kept on a worker, so
  ``N_LSC = min(sum_i K_i, K_master)`` (the workers' blocks, up to what the
  master can stage);
* Eq. 5: the remaining ``K_master - N_LSC`` single-layer slots hold whole
  blocks of ``L`` layers: ``N_RC = floor((K_master - N_LSC) / L)``, which is
  0 when the workers' blocks fill the master's memory.

The longest context is ``(N_LSC + N_RC) B`` tokens, against ``floor(K_master
/ L) B`` for a conventional cache keeping every layer of every block local.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.models import ModelCard


def layer_block_bytes(card: ModelCard, block_tokens: int) -> int:
    """Eq. 1: bytes of one block of ``block_tokens`` tokens in one layer (K and V)."""
    return block_tokens * card.kv_bytes_per_token_layer


@dataclass(frozen=True)
class StreamSizing:
    """The master's cache split (§3.2), in blocks.

    Attributes:
        layers: master decoder layers ``L``.
        block_tokens: tokens per block ``B``.
        k_workers: Eq. 2, full-layer master blocks each worker holds.
        k_master: Eq. 3, single-layer blocks the master's KV memory holds.
        n_lsc: Eq. 4, blocks streamed through the LSC (one single-layer slot
            each on the master, all layers on a worker).
        n_rc: Eq. 5, full-layer blocks the regular cache keeps locally.
    """

    layers: int
    block_tokens: int
    k_workers: tuple[int, ...]
    k_master: int
    n_lsc: int
    n_rc: int

    @property
    def max_blocks(self) -> int:
        """Blocks of context the master can hold: ``N_LSC + N_RC``."""
        return self.n_lsc + self.n_rc

    @property
    def max_tokens(self) -> int:
        """Longest context, tokens: ``(N_LSC + N_RC) B``."""
        return self.max_blocks * self.block_tokens

    @property
    def baseline_blocks(self) -> int:
        """Blocks a conventional cache (every layer local) holds: ``floor(K_master / L)``."""
        return self.k_master // self.layers

    @property
    def baseline_tokens(self) -> int:
        return self.baseline_blocks * self.block_tokens

    @property
    def local_slots_used(self) -> int:
        """Single-layer slots of the master in use: ``N_LSC + N_RC L`` (<= ``K_master``)."""
        return self.n_lsc + self.n_rc * self.layers


def size_from_blocks(
    k_master: int, k_workers: Sequence[int], layers: int, block_tokens: int = 1
) -> StreamSizing:
    """Eq. 4-5 from block counts already taken through Eq. 2-3."""
    if layers < 1 or block_tokens < 1:
        raise ValueError(f"layers and block_tokens must be >= 1, got {layers}, {block_tokens}")
    if k_master < 0 or any(k < 0 for k in k_workers):
        raise ValueError(f"block counts must be >= 0, got {k_master}, {list(k_workers)}")
    n_lsc = min(sum(k_workers), k_master)
    n_rc = (k_master - n_lsc) // layers
    return StreamSizing(layers, block_tokens, tuple(k_workers), k_master, n_lsc, n_rc)


def size_stream_cache(
    card: ModelCard, master_kv_bytes: float, worker_kv_bytes: Sequence[float], block_tokens: int
) -> StreamSizing:
    """Eq. 1-5 for master ``card`` with ``master_kv_bytes`` of local KV memory
    and workers lending ``worker_kv_bytes`` each."""
    m_block = layer_block_bytes(card, block_tokens)
    k_workers = [int(c // (m_block * card.layers)) for c in worker_kv_bytes]
    k_master = int(master_kv_bytes // m_block)
    return size_from_blocks(k_master, k_workers, card.layers, block_tokens)


def max_context_tokens(
    card: ModelCard, master_kv_bytes: float, worker_kv_bytes: Sequence[float], block_tokens: int
) -> int:
    """Longest context the master can hold with LSC + RC (§3.2, last paragraph)."""
    return size_stream_cache(card, master_kv_bytes, worker_kv_bytes, block_tokens).max_tokens
