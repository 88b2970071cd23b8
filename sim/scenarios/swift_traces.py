"""Seed 002's master workloads: long ShareGPT-shaped conversations (trace ``sharegpt_long``)
and an L-Eval-shaped one synthesised from the seed's statistics (``leval_long``, below).

§5.1 of the seed: multi-turn conversations from ShareGPT, "the initial rounds
[...] sent to the server as a warm-up process", then the requests "ranging
from approximately 20K to 40K tokens" for the Qwen3 masters.  ShareGPT's
shape (§2, Fig. 3a): "90% of user prompts are shorter than 132 tokens", so a
new turn computes little and the history dominates.

Generated here, per session (sessions start as a Poisson process of
``session_rate``):

* a warm-up history of ``H ~ U(context_tokens, max_context - 4096)`` tokens,
  served before the run: its KV sits in the design's first offload tier
  (:meth:`sim.serving.policy.manager.BlockManager.preload`), as the warm-up leaves it;
* then geometric(mean ``turns``) measured turns, each re-sending the history
  plus a log-normal prompt (median ``prompt_tokens``, sigma 1: a median of 37
  puts the 90th percentile at 132) and asking for a log-normal reply (median
  ``reply_tokens``, sigma 0.7), ``think_s`` apart on average; a session ends
  before its history would pass ``max_context``.

The seed is silent on request rates (Fig. 7 gives none), on reply lengths
as numbers (Fig. 3a is a plot) and on how many turns follow the warm-up;
those are the scenario's parameters.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from sim.config import ConfigError, ServingParams
from sim.models import get_model
from sim.serving.requests import request_table
from traces.leval import leval_trace

HEADROOM = 4096  # tokens left under max_context for the measured turns
GIB = 2**30


def sharegpt_long_tables(p: ServingParams, seed: int) -> tuple[pa.Table, pa.Table]:
    """(measured requests, warm-up requests) of the workload above."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED2]))
    rows: list[dict] = []
    warm: list[dict] = []
    start = 0.0
    hi = max(p.max_context - HEADROOM, p.context_tokens)
    for session in range(p.sessions):
        start += rng.exponential(1.0 / p.session_rate)
        history = int(rng.integers(p.context_tokens, hi + 1))
        warm.append({"request_id": -1, "arrival_s": 0.0, "session_id": session, "turn": 0,
                     "input_tokens": history, "output_tokens": 1})  # fmt: skip
        t = start
        for turn in range(1, 1 + int(rng.geometric(1.0 / max(p.turns, 1.0)))):
            prompt = max(1, int(rng.lognormal(np.log(p.prompt_tokens), 1.0)))
            reply = max(1, min(2048, int(rng.lognormal(np.log(p.reply_tokens), 0.7))))
            if history + prompt + reply > p.max_context:
                break
            rows.append({"request_id": len(rows), "arrival_s": t, "session_id": session,
                         "turn": turn, "input_tokens": history + prompt,
                         "output_tokens": reply})  # fmt: skip
            history += prompt + reply
            t += rng.exponential(p.think_s) if p.think_s > 0 else 0.0
    for i, w in enumerate(warm):
        w["request_id"] = len(rows) + i
    return request_table(rows, p.block_tokens), request_table(warm, p.block_tokens)


# ---- seed 002's L-Eval workload, synthesised (trace ``leval_long``) ------------------------
POOL = 60  # documents drawn per session wanted: ~28% of QA documents pass 20K-36K (traces/leval.py)


def leval_long_tables(p: ServingParams, seed: int) -> tuple[pa.Table, pa.Table]:
    """(measured requests, warm-up requests) of an L-Eval-shaped workload.

    SYNTHESISED from seed 002's statistics (:mod:`traces.leval`), not the dataset,
    which is not available offline.  The documents come from
    :func:`traces.leval.leval_trace` (``leval_qa_share`` of them QA); as in §5.1, "we
    select requests ranging from approximately 20K to 40K tokens": a document is kept
    when its first turn (document + first question) has at least ``context_tokens``
    and its second turn fits ``max_context`` with its answer.  Its first turn is the
    warm-up ("we first send the initial rounds [...] as a warm-up process", §5.1):
    its history (the first turn and its answer) sits in the design's first offload
    tier before the run, as in ``sharegpt_long``.  The measured requests are the
    document's later questions whose context (input + output) fits ``max_context``.
    The first kept documents, at most ``sessions``, start at the pool's first Poisson
    arrivals (``session_rate``), their later turns ``think_s`` apart on average, as
    drawn.  The warm-up is there to "eliminate the substantial recomputation overhead
    caused by the first requests" (§5.1), so the documents' whole conversations (the
    last measured turn's input and answer) must fit the design's host memory
    (``design_params.cpu_gib`` over the model's KV bytes per token): the run stops
    taking documents before the one that would overflow it (with 20-40K-token
    documents and Qwen3-32B's 0.25 MB a token, 96 GB holds 10-12)."""
    pool = leval_trace(POOL * p.sessions, p.session_rate, think_s=p.think_s,
                       qa_share=p.leval_qa_share, seed=seed)  # fmt: skip
    arr, sess, turn = pool.arrival_s, pool.column("session_id"), pool.column("turn")
    inp, out = pool.input_tokens, pool.output_tokens
    by = {}  # session -> its rows in turn order
    for i in np.lexsort((turn, sess)):
        by.setdefault(int(sess[i]), []).append(int(i))
    starts = np.sort(arr[turn == 0])
    host = float(p.design_params.get("cpu_gib", 0.0)) * GIB
    room = host / get_model(p.model).kv_bytes_per_token if host else math.inf  # tokens
    rows: list[dict] = []
    warm: list[dict] = []
    for s in sorted(by, key=lambda s: (arr[by[s][0]], s)):  # documents in arrival order
        r = by[s]
        if len(warm) == p.sessions:
            break
        first, nxt = r[0], r[1] if len(r) > 1 else None
        if inp[first] < p.context_tokens or nxt is None or inp[nxt] + out[nxt] > p.max_context:
            continue
        fits = [i for i in r[1:] if inp[i] + out[i] <= p.max_context]  # a prefix of r[1:]
        room -= inp[fits[-1]] + out[fits[-1]]
        if room < 0:
            break
        k = len(warm)
        warm.append({"request_id": -1, "arrival_s": 0.0, "session_id": k, "turn": 0,
                     "input_tokens": int(inp[first] + out[first]), "output_tokens": 1})  # fmt: skip
        for i in r[1:]:
            if inp[i] + out[i] > p.max_context:
                break
            rows.append({"request_id": -1, "arrival_s": float(starts[k] + arr[i] - arr[nxt]),
                         "session_id": k, "turn": int(turn[i]), "input_tokens": int(inp[i]),
                         "output_tokens": int(out[i])})  # fmt: skip
    if not warm:
        raise ConfigError(
            f"trace leval_long: none of {POOL * p.sessions} drawn documents has turns of "
            f"{p.context_tokens}..{p.max_context} tokens whose KV fits the host memory; "
            "widen context_tokens..max_context, raise leval_qa_share or design_params.cpu_gib"
        )
    rows.sort(key=lambda r: (r["arrival_s"], r["session_id"], r["turn"]))
    for i, r in enumerate(rows):
        r["request_id"] = i
    for i, w in enumerate(warm):
        w["request_id"] = len(rows) + i
    return request_table(rows, p.block_tokens), request_table(warm, p.block_tokens)
