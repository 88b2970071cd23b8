"""Minimum elastic unit (MEU) of a master/worker pair, seed 002 §3.4, Eq. 6-9.

The master and a worker differ in layers, KV heads, head width and block
size, so one block of one is not a whole number of blocks of the other.
Lending in single blocks would leave fragments of memory that neither model
can use.  The shared unit is the least common multiple of the two block
sizes: Eq. 6-7 count the elements of one all-layer block,

    BE = L x B x H_kv x D_kv   (x 2 for K and V here, as stored),

Eq. 8 takes ``LCM = lcm(BE_m, BE_i)`` and Eq. 9 gives the MEU of each side,
``MEU_m = LCM / BE_m`` master blocks and ``MEU_i = LCM / BE_i`` worker
blocks: whenever worker ``i`` gives up ``k x MEU_i`` blocks the master gains
``k x MEU_m``, and the two spans are the same bytes.

The factor 2 (and the element width, equal for fp16 models) multiplies both
block sizes, so it changes ``LCM`` but neither MEU.  Where the two element
widths differ the alignment must hold in bytes, so the LCM is taken over
``BE x dtype_bytes``; with equal widths that is the paper's Eq. 8 times the
width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.models import ModelCard


def block_elems(card: ModelCard, block_tokens: int) -> int:
    """Eq. 6/7: elements of one block in all layers, K and V
    (``2 x layers x block_tokens x kv_heads x head_dim``)."""
    return 2 * card.layers * block_tokens * card.kv_heads * card.head_dim


def block_bytes(card: ModelCard, block_tokens: int) -> int:
    """Bytes of one all-layer block: :func:`block_elems` x ``dtype_bytes``."""
    return block_elems(card, block_tokens) * card.dtype_bytes


@dataclass(frozen=True)
class ElasticUnit:
    """Eq. 8-9 for one master/worker pair.

    Attributes:
        master_block_bytes: one all-layer master block.
        worker_block_bytes: one all-layer worker block.
        lcm_bytes: Eq. 8, in bytes (the elements' LCM x element width).
        meu_master: Eq. 9, master blocks per unit.
        meu_worker: Eq. 9, worker blocks per unit.
    """

    master_block_bytes: int
    worker_block_bytes: int
    lcm_bytes: int
    meu_master: int
    meu_worker: int


def elastic_unit(master_block: int, worker_block: int) -> ElasticUnit:
    """Eq. 8-9 from the two block sizes (bytes, or elements of equal width)."""
    if master_block < 1 or worker_block < 1:
        raise ValueError(f"block sizes must be >= 1, got {master_block}, {worker_block}")
    lcm = math.lcm(master_block, worker_block)
    return ElasticUnit(master_block, worker_block, lcm, lcm // master_block, lcm // worker_block)


def model_elastic_unit(
    master: ModelCard, worker: ModelCard, master_block_tokens: int, worker_block_tokens: int
) -> ElasticUnit:
    """The MEU of ``master`` lending memory of ``worker`` (Eq. 6-9, in bytes)."""
    return elastic_unit(
        block_bytes(master, master_block_tokens), block_bytes(worker, worker_block_tokens)
    )
