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

from sim.fleet.router.base import InstanceState, argmin_tie_random, cached_prefix
from sim.registry import ROUTERS, ParamError
from sim.serving.requests import Request


@dataclass(frozen=True)
class Params:
    """``overlap_weight``: Dynamo's ``overlap_score_weight`` (prefill blocks vs
    decode blocks); 0 ignores the caches (pure load balance)."""

    overlap_weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.overlap_weight >= 0:
            raise ParamError("overlap_weight", f"must be >= 0, got {self.overlap_weight}")


class ActiveSequences:
    """One worker's requests as the router tracks them (Dynamo's ``ActiveSequences``).
    ``holders`` (shared by all workers of a router): block key -> the workers whose
    active blocks include it, kept as ``refs`` rise from and fall to 0, so one walk
    of a prompt's blocks counts what every worker already holds (:meth:`PrefixAware.held`).

    The keys are the run's dense ids (:class:`sim.serving.requests.KeySpace`),
    kept in dicts rather than id-indexed arrays: only the blocks of requests
    in flight are held (``len(refs)`` is a worker's active block count, a
    dict's length for free), the walks add and drop one block at a time in
    Python, where a dict and a list cost alike, and an array per worker
    would take 8 bytes for every key of the run."""

    def __init__(self, index: int, holders: dict[int, set[int]]) -> None:
        self.index, self.holders = index, holders
        self.seqs: dict[int, tuple[Sequence[int], int]] = {}  # rid -> (blocks, prefill tokens)
        self.refs: dict[int, int] = {}  # block hash -> active requests holding it
        self.active_tokens = 0

    def add(self, rid: int, seq: Sequence[int], prefill_tokens: int) -> None:
        self.seqs[rid] = (seq, prefill_tokens)
        self.active_tokens += prefill_tokens
        refs, holders, me = self.refs, self.holders, self.index
        get, held = refs.get, holders.get
        for h in seq:
            n = get(h)
            if n is None:  # a block new to this worker: it joins the block's holders
                refs[h] = 1
                others = held(h)
                if others is None:
                    holders[h] = {me}
                else:
                    others.add(me)
            else:
                refs[h] = n + 1

    def prefilled(self, rid: int) -> None:
        seq, tokens = self.seqs[rid]
        self.active_tokens -= tokens
        self.seqs[rid] = (seq, 0)

    def free(self, rid: int) -> None:
        self.prefilled(rid)
        seq, _ = self.seqs.pop(rid)
        refs, holders, me = self.refs, self.holders, self.index
        for h in seq:
            left = refs[h] - 1
            if left:
                refs[h] = left
            else:  # the block leaves this worker: and its holders, with the last
                del refs[h]
                held = holders[h]
                if len(held) == 1:  # this worker alone
                    del holders[h]
                else:
                    held.discard(me)


def prompt_blocks(req: Request, block_tokens: int) -> list[int]:
    """The hashes of ``req``'s full prompt blocks (not a reply's) as Python ints:
    the trace's int64 view read out once a request, so the walks over them
    (the active blocks' counts, the holders, the cached prefix) hash plain ints
    rather than a numpy scalar made per block per walk (equal values, equal hashes:
    the same counts)."""
    seq = req.hashes[: req.input_tokens // block_tokens]
    return seq.tolist() if isinstance(seq, np.ndarray) else list(seq)


class PrefixAware:
    """Dynamo's KV router: the lowest ``logit_w`` (module docstring)."""

    def __init__(self, params: Params, n: int, block_tokens: int, rng: np.random.Generator):
        self.w, self.B, self.rng = params.overlap_weight, block_tokens, rng
        self.holders: dict[int, set[int]] = {}  # block hash -> workers with it active
        self.workers = [ActiveSequences(i, self.holders) for i in range(n)]

    def held(self, seq: Sequence[int]) -> list[int]:
        """Per worker, the positions of ``seq`` whose block is among its active blocks
        (``len(seq)`` less these are its new blocks): one walk of ``seq``, each block
        visiting only the workers holding it, not every worker (the blocks nobody
        holds, most of a new prompt, are passed over in C: ``filter`` of the lookups)."""
        held = [0] * len(self.workers)
        for workers in filter(None, map(self.holders.get, seq)):
            for i in workers:
                held[i] += 1
        return held

    def logits(self, req: Request, states: Sequence[InstanceState]) -> list[tuple[float, int]]:
        """(logit, overlap blocks) of each instance for ``req``."""
        return self._logits(req, prompt_blocks(req, self.B), states)

    def _logits(
        self, req: Request, seq: list[int], states: Sequence[InstanceState]
    ) -> list[tuple[float, int]]:
        isl, B = req.input_tokens, self.B
        out = []
        for st, w, held in zip(states, self.workers, self.held(seq), strict=True):
            overlap = cached_prefix(st.cached, seq)
            prefill = max(isl - overlap * B, 0) + w.active_tokens
            decode = len(seq) - held + len(w.refs)
            out.append((self.w * prefill / B + decode, overlap))
        return out

    def choose(self, req: Request, states: Sequence[InstanceState]) -> int:
        seq = prompt_blocks(req, self.B)
        scored = self._logits(req, seq, states)
        i = argmin_tie_random([lg for lg, _ in scored], self.rng)
        isl, B = req.input_tokens, self.B
        self.workers[i].add(req.rid, seq, max(isl - scored[i][1] * B, 0))
        return i

    def prefilled(self, i: int, rid: int) -> None:
        self.workers[i].prefilled(rid)

    def finished(self, i: int, rid: int) -> None:
        self.workers[i].free(rid)


ROUTERS.register("prefix", Params, PrefixAware)
