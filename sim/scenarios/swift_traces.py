"""Seed 002's master workload: long ShareGPT-shaped conversations (trace ``sharegpt_long``).

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

import numpy as np
import pyarrow as pa

from sim.config import ServingParams
from sim.serving.requests import request_table

HEADROOM = 4096  # tokens left under max_context for the measured turns


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
