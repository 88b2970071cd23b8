"""The worker's elastic cache (seed 002 §3.4-3.5): layouts and Algorithm 1.

**What a resize moves.**  A worker's KV memory is one buffer of ``n`` blocks
per layer for ``L`` layers; a resize changes ``n`` for every layer at once.

* *Layer-major* ``(n_layers, n_blocks, block_elems)`` (vLLM, SGLang): layer
  ``l`` occupies blocks ``[l n, l n + n)``.  After a resize to ``n'`` it must
  occupy ``[l n', l n' + n')``, so every layer but the first shifts its
  ``min(n, n')`` surviving blocks: ``(L - 1) min(n, n')`` single-layer blocks
  copied, O(layers x blocks) (Fig. 5).  :func:`resize_copies` returns one
  HBM copy per shifted layer, ordered so that no copy overwrites data a later
  one still has to read: growing, the buffer is first extended to ``L n'``
  and layers move last to first; shrinking, layers move first to last and
  the buffer is cut after.  A copy's source and destination may overlap
  within its layer (memmove semantics).
* *Block-major* ``(n_blocks, n_layers, block_elems)`` (SwiftCache): all
  layers of a block are contiguous, so growing appends blocks at the end and
  shrinking releases the last ones: no copy at all, O(1) (Fig. 6).

**Algorithm 1.**  A worker with ``N_i`` blocks of ``B_i`` tokens lends the
rest of its memory to the master in minimum elastic units (:mod:`.meu`).

* ScaleUp, on each incoming request of ``len`` tokens: ``need =
  ceil(len / B_i)``; if ``need > N_i`` the worker reclaims ``k =
  ceil((need - N_i) / MEU_i)`` units, i.e. ``k MEU_i`` worker blocks, and
  the master gives up ``k MEU_m`` (lines 10-19).  It cannot reclaim more
  units than it has lent (the paper does not say; a request longer than the
  whole worker cannot be served by reclaiming more).
* ScaleDown, every check interval: ``max_need = ceil(max_len / B_i)`` over
  the requests that arrived in the last ``t`` seconds (0 when none); if
  ``max_need < N_i`` the worker lends ``k = floor((N_i - max_need) /
  MEU_i)`` units (lines 21-31).

The caller owns time: it passes the clock value to each call and calls
:meth:`ElasticCache.scale_down` every ``check_interval_s``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from kvtier.contracts.plan import PlanBuilder

LAYOUTS = ("block-major", "layer-major")


@dataclass(frozen=True)
class HbmCopy:
    """One copy within a worker's KV buffer (byte offsets into it)."""

    layer: int
    src_offset: int
    dst_offset: int
    nbytes: int


def resize_copies(
    layout: str, layers: int, n_old: int, n_new: int, layer_block_bytes: int
) -> list[HbmCopy]:
    """The copies that resize a buffer of ``layers`` x ``n_old`` blocks to
    ``n_new`` blocks per layer (see the module docstring)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if min(layers, layer_block_bytes) < 1 or min(n_old, n_new) < 0:
        raise ValueError(f"bad resize {layers} layers, {n_old} -> {n_new} blocks")
    if layout == "block-major" or n_old == n_new:
        return []
    keep = min(n_old, n_new) * layer_block_bytes
    order = range(1, layers) if n_new < n_old else range(layers - 1, 0, -1)
    return [
        HbmCopy(ly, ly * n_old * layer_block_bytes, ly * n_new * layer_block_bytes, keep)
        for ly in order
        if keep
    ]


def copied_bytes(copies: list[HbmCopy]) -> int:
    """Bytes the copies move (HBM traffic is twice this: each byte is read and written)."""
    return sum(c.nbytes for c in copies)


def add_resize_ops(
    b: PlanBuilder, gpu: str, copies: list[HbmCopy], depends_on: tuple[int, ...] = ()
) -> list[int]:
    """Append ``copies`` to plan ``b`` as kernels on ``gpu``, one after another.

    A copy within one GPU's memory crosses no link: it is HBM traffic, each
    byte read once and written once, so each becomes a compute op with no
    FLOPs and ``hbm_bytes = 2 x nbytes`` (tag ``kv_resize``).  On the
    simulated GPU it shares the compute engine with the worker's own kernels
    by max-min, which is how a layer-major resize slows the worker.  Chained
    in the order given (:func:`resize_copies` orders them safely).
    """
    ids: list[int] = []
    prev = tuple(depends_on)
    for c in copies:
        op = b.compute(gpu, 0.0, 2.0 * c.nbytes, layer=c.layer, depends_on=prev, tag="kv_resize")
        ids.append(op)
        prev = (op,)
    return ids


def scale_up(
    n_blocks: int, block_tokens: int, meu_w: int, meu_m: int, request_len: int
) -> tuple[int, int]:
    """Algorithm 1, ScaleUp: (worker blocks to reclaim, master blocks to give up)."""
    need = -(-request_len // block_tokens)
    if need <= n_blocks:
        return 0, 0
    k = -(-(need - n_blocks) // meu_w)
    return k * meu_w, k * meu_m


def scale_down(
    n_blocks: int, block_tokens: int, meu_w: int, meu_m: int, max_len: int
) -> tuple[int, int]:
    """Algorithm 1, ScaleDown: (worker blocks to lend, master blocks gained)."""
    max_need = -(-max_len // block_tokens)
    if max_need >= n_blocks:
        return 0, 0
    k = (n_blocks - max_need) // meu_w
    return k * meu_w, k * meu_m


@dataclass(frozen=True)
class ElasticParams:
    """One worker's elastic cache.

    Attributes:
        total_blocks: the worker's KV memory, in its own blocks.
        block_tokens: tokens per worker block (``B_i``).
        meu_worker: worker blocks per elastic unit (Eq. 9).
        meu_master: master blocks per elastic unit (Eq. 9).
        window_s: ScaleDown looks at requests of the last ``window_s``
            seconds ("e.g., 1 minute", §3.5).
        check_interval_s: how often the caller runs ScaleDown (the paper
            says "periodically"; assumption, an engine parameter).
    """

    total_blocks: int
    block_tokens: int
    meu_worker: int
    meu_master: int
    window_s: float = 60.0
    check_interval_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("total_blocks", "block_tokens", "meu_worker", "meu_master"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.window_s > 0 and self.check_interval_s > 0):
            raise ValueError("window_s and check_interval_s must be > 0")


@dataclass(frozen=True)
class Resize:
    """A decided resize: signed block deltas (worker grows = reclaim, > 0)."""

    at_s: float
    worker_blocks: int
    master_blocks: int


class ElasticCache:
    """Algorithm 1 over one worker's memory: ``lent_units`` MEUs lent to the master.

    The worker starts with all its blocks (nothing lent); it always holds
    ``own_blocks = total_blocks - lent_units x meu_worker``.
    """

    def __init__(self, p: ElasticParams):
        self.p = p
        self.lent_units = 0
        self._recent: deque[tuple[float, int]] = deque()  # (arrival s, tokens), oldest first
        self._now = -math.inf

    @property
    def own_blocks(self) -> int:
        return self.p.total_blocks - self.lent_units * self.p.meu_worker

    @property
    def lent_master_blocks(self) -> int:
        return self.lent_units * self.p.meu_master

    def _clock(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"time went backwards: {now} < {self._now}")
        self._now = now
        while self._recent and self._recent[0][0] < now - self.p.window_s:
            self._recent.popleft()

    def on_request(
        self, now: float, request_len: int, n_blocks: int | None = None
    ) -> Resize | None:
        """A request of ``request_len`` tokens arrives: ScaleUp if it does not fit
        in ``n_blocks`` (Algorithm 1's ``N_i``; None = ``own_blocks``, the
        worker's whole cache; the caller may pass the blocks not yet committed
        to its requests instead, the ``n_i: free`` reading of
        :mod:`sim.serving.execute.lending`)."""
        self._clock(now)
        self._recent.append((now, request_len))
        p = self.p
        n = self.own_blocks if n_blocks is None else n_blocks
        dw, _ = scale_up(n, p.block_tokens, p.meu_worker, p.meu_master, request_len)
        k = min(dw // p.meu_worker, self.lent_units)
        if k == 0:
            return None
        self.lent_units -= k
        return Resize(now, k * p.meu_worker, -k * p.meu_master)

    def scale_down(self, now: float, n_blocks: int | None = None) -> Resize | None:
        """The periodic check: lend what the last ``window_s`` seconds did not need
        out of ``n_blocks`` (``N_i``, as in :meth:`on_request`)."""
        self._clock(now)
        p = self.p
        max_len = max((n for _, n in self._recent), default=0)
        n = self.own_blocks if n_blocks is None else n_blocks
        dw, _ = scale_down(n, p.block_tokens, p.meu_worker, p.meu_master, max_len)
        k = dw // p.meu_worker
        if k == 0:
            return None
        self.lent_units += k
        return Resize(now, -k * p.meu_worker, k * p.meu_master)
