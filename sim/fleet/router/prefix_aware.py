"""Prefix- and KV-aware routing, as Dynamo's KV router scores workers.

Source: ai-dynamo/dynamo, ``lib/llm/src/kv_router/scheduler.rs``
(``DefaultWorkerSelector::select_worker``) with the per-worker bookkeeping
of ``lib/llm/src/kv_router/sequence.rs`` (``ActiveSequences``).  For a
request of ``isl`` prompt tokens whose full blocks hash to ``seq``, on each
worker ``w``::

    overlap_w        = blocks of seq, from the first, in w's cache (KvIndexer)
    prefill_tokens_w = (isl - overlap_w * block_size) + active_tokens_w
    decode_blocks_w  = |blocks of seq not among w's active blocks| + active_blocks_w
    logit_w          = overlap_score_weight * prefill_tokens_w / block_size
                       + decode_blocks_w

and the lowest logit wins (``router_temperature`` 0, the default: the
lowest, ties uniformly at random; a temperature above 0 samples a softmax
and is not modelled).  ``active_tokens_w`` sums the new (uncached) prompt
tokens of the requests routed to ``w`` whose prefill has not completed
(``add_request`` adds ``isl - overlap * block_size``,
``mark_prefill_completed`` removes it); ``active_blocks_w`` counts the
distinct prompt blocks of the requests routed to ``w`` and not yet freed
(``touch_block`` / ``free``).  ``overlap_score_weight`` is
``--kv-overlap-score-weight``, 1.0 by default (docs/router: "Defaults to 1").

The cache ``overlap_w`` is matched against is the instance's GPU prefix
cache as it stands (Dynamo's indexer is fed the engine's KV stored/removed
events; here they arrive without delay).  The output blocks a later
``sequence.rs`` adds with ``add_output_block`` are not counted: the active
blocks are the prompt's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.fleet.router.base import InstanceState, argmin_tie_random
from sim.registry import ROUTERS, ParamError
from sim.serving.requests import Request

_BITS = 12  # ids of a page of a worker's block counts: 4,096 (16 KiB of int32)
_PAGE = 1 << _BITS

Pieces = list[tuple[int, int, int]]  # (page, first, end): ids page << _BITS + [first, end)


@dataclass(frozen=True)
class Params:
    """``overlap_weight``: Dynamo's ``overlap_score_weight`` (prefill blocks vs
    decode blocks); 0 ignores the caches (pure load balance)."""

    overlap_weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.overlap_weight >= 0:
            raise ParamError("overlap_weight", f"must be >= 0, got {self.overlap_weight}")


def pieces(keys: np.ndarray) -> Pieces:
    """``keys`` (ids, in prompt order) as runs of consecutive ids, each within
    one page: a prompt's blocks are few such runs (the ids are numbered in the
    order the trace first shows them, :class:`sim.serving.requests.KeySpace`,
    so a prompt is its conversation's earlier blocks and its new ones: the
    whole conversation trace's 9.1 M prompt blocks are 17 K runs)."""
    n = len(keys)
    if not n:
        return []
    keys = np.asarray(keys, dtype=np.int64)
    # a run ends where the next id is not the next one, or opens a page
    nxt = keys[1:]
    cut = np.flatnonzero((nxt - keys[:-1] != 1) | ((nxt & (_PAGE - 1)) == 0)) + 1
    starts = np.concatenate(([0], cut))
    size = np.concatenate((cut, [n])) - starts
    first = keys[starts]
    lo = first & (_PAGE - 1)
    return list(zip((first >> _BITS).tolist(), lo.tolist(), (lo + size).tolist(), strict=True))


class ActiveSequences:
    """One worker's requests as the router tracks them (Dynamo's ``ActiveSequences``):
    per block key, how many of its active requests hold it, and ``blocks``, how
    many keys have a count above 0 (its active block count).

    The counts are int32 arrays over pages of the run's dense ids (a page is
    made when the worker's first request holding one of its ids arrives, and
    let go when its last such block is freed), so a request's blocks, a few
    runs of consecutive ids (:func:`pieces`), are added, freed and counted by
    a few slice operations rather than one dict update per block; ``owners``
    (shared by the router's workers) maps a page to the workers that have it,
    so a prompt's held blocks are counted only on workers that could hold them
    (:meth:`PrefixAware.held`)."""

    def __init__(self, index: int, owners: dict[int, set[int]]) -> None:
        self.index, self.owners = index, owners
        self.seqs: dict[int, tuple[Pieces, int]] = {}  # rid -> (its blocks, prefill tokens)
        self.pages: dict[int, np.ndarray] = {}  # page -> counts of its ids
        self.live: dict[int, int] = {}  # page -> its ids with a count above 0
        self.blocks = 0  # ids with a count above 0 (Dynamo's active blocks)
        self.active_tokens = 0

    def add(self, rid: int, blocks: Pieces, prefill_tokens: int) -> None:
        self.seqs[rid] = (blocks, prefill_tokens)
        self.active_tokens += prefill_tokens
        pages, live = self.pages, self.live
        for page, lo, hi in blocks:
            a = pages.get(page)
            if a is None:
                a = pages[page] = np.zeros(_PAGE, dtype=np.int32)
                live[page] = 0
                self.owners.setdefault(page, set()).add(self.index)
            run = a[lo:hi]
            new = hi - lo - np.count_nonzero(run)  # ids new to this worker
            run += 1
            self.blocks += new
            live[page] += new

    def prefilled(self, rid: int) -> None:
        blocks, tokens = self.seqs[rid]
        self.active_tokens -= tokens
        self.seqs[rid] = (blocks, 0)

    def free(self, rid: int) -> None:
        self.prefilled(rid)
        blocks, _ = self.seqs.pop(rid)
        pages, live = self.pages, self.live
        for page, lo, hi in blocks:
            run = pages[page][lo:hi]
            run -= 1
            gone = hi - lo - np.count_nonzero(run)  # ids this request alone held here
            self.blocks -= gone
            left = live[page] - gone
            if left:
                live[page] = left
            else:  # the page's last block left this worker
                del pages[page], live[page]
                owners = self.owners[page]
                owners.discard(self.index)
                if not owners:
                    del self.owners[page]

    def count(self, key: int) -> int:
        """Active requests of this worker holding block ``key``."""
        a = self.pages.get(key >> _BITS)
        return 0 if a is None else int(a[key & (_PAGE - 1)])


def prompt_blocks(req: Request, block_tokens: int) -> np.ndarray:
    """The keys of ``req``'s full prompt blocks (not a reply's), in order."""
    return np.asarray(req.hashes[: req.input_tokens // block_tokens], dtype=np.int64)


class PrefixAware:
    """Dynamo's KV router: the lowest ``logit_w`` (module docstring)."""

    def __init__(self, params: Params, n: int, block_tokens: int, rng: np.random.Generator):
        self.w, self.B, self.rng = params.overlap_weight, block_tokens, rng
        self.owners: dict[int, set[int]] = {}  # page -> workers with counts on it
        self.workers = [ActiveSequences(i, self.owners) for i in range(n)]

    def held(self, blocks: Pieces) -> list[int]:
        """Per worker, the positions of a prompt's ``blocks`` whose key is among
        its active blocks (their number less these are its new blocks): each run
        counted on the workers that have its page."""
        held = [0] * len(self.workers)
        owners, workers = self.owners, self.workers
        for page, lo, hi in blocks:
            for i in owners.get(page, ()):
                held[i] += np.count_nonzero(workers[i].pages[page][lo:hi])
        return held

    def logits(self, req: Request, states: Sequence[InstanceState]) -> list[tuple[float, int]]:
        """(logit, overlap blocks) of each instance for ``req``."""
        keys = prompt_blocks(req, self.B)
        return self._logits(req, keys, pieces(keys), states)

    def _logits(
        self, req: Request, keys: np.ndarray, blocks: Pieces, states: Sequence[InstanceState]
    ) -> list[tuple[float, int]]:
        isl, B, n = req.input_tokens, self.B, len(keys)
        out = []
        for st, w, held in zip(states, self.workers, self.held(blocks), strict=True):
            overlap = st.cached.prefix_blocks(keys)
            prefill = max(isl - overlap * B, 0) + w.active_tokens
            decode = n - held + w.blocks
            out.append((self.w * prefill / B + decode, overlap))
        return out

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        keys = prompt_blocks(req, self.B)
        blocks = pieces(keys)
        scored = self._logits(req, keys, blocks, states)
        i = argmin_tie_random([lg for lg, _ in scored], self.rng)
        isl, B = req.input_tokens, self.B
        self.workers[i].add(req.rid, blocks, max(isl - scored[i][1] * B, 0))
        return i

    def prefilled(self, i: int, rid: int) -> None:
        self.workers[i].prefilled(rid)

    def finished(self, i: int, rid: int) -> None:
        self.workers[i].free(rid)


ROUTERS.register("prefix", Params, PrefixAware)
