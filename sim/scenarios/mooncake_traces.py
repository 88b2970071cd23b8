"""Mooncake-shaped request traces built in (``mooncake_conversation``,
``mooncake_tool_agent``, ``mooncake_synthetic``): fitted shapes, not the real files.

Mooncake's trace release (kvcache-ai/Mooncake ``FAST25-release``) has three
workloads; the real JSONL files are not shipped with kvtier (nor on every
machine that runs it).  A user who has one passes its path as the workload's
``trace`` (``kvtier sim --set workload.trace=conversation_trace.jsonl``); these
built-in names draw a trace of the same shape instead, from
:mod:`sim.serving.bench`'s Mooncake fit (imported, not copied):

* ``mooncake_conversation``: :func:`sim.serving.bench.mooncake_table` as it is,
  fitted to the conversation trace's published totals (12,031 requests over
  3,537 s, mean input ~12K tokens, p99 ~85K, ~37% of prompt tokens reusable)
  and to 270 of its requests' output lengths (mean 343).
* ``mooncake_tool_agent`` and ``mooncake_synthetic``: only their means are
  published (the release's per-workload means: tool-and-agent 8,596 input /
  182 output tokens, synthetic 15,325 / 149).  Their shape is the
  conversation fit's with every token length scaled: the session totals and
  the user turns by the mean input over the conversation's (12,035), the
  answers' body median re-solved (:func:`sim.serving.bench._body_median`) so
  the output mixture's mean is theirs.  Their request counts, rates and
  reuse are not published in anything kvtier cites: the conversation's
  session rate (2.4 sessions/s, ~3.4 requests/s) and 60 s think time are an
  assumption (plausible within 0.5-2x), and the reuse is whatever the scaled
  shape gives (measured by ``kvtier trace stats``, not fitted).

A workload's ``requests`` keeps the first N by arrival; 0 means the
conversation trace's 12,031 (the published count), for all three.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from sim.registry import REQUEST_TRACES
from sim.serving import bench
from traces.conversation import (
    ConversationParams,
    Exponential,
    LogNormal,
    Mixture,
    generate_conversations,
)

# the published per-workload means (Mooncake FAST25-release; sim/serving/bench.py docstring)
MEANS = {  # name -> (mean input tokens, mean output tokens)
    "mooncake_conversation": (12_035.0, 343.0),
    "mooncake_tool_agent": (8_596.0, 182.0),
    "mooncake_synthetic": (15_325.0, 149.0),
}
CONVERSATION_REQUESTS = 12_031  # the conversation trace's requests (FAST'25)


def _scaled(d: LogNormal, k: float) -> LogNormal:
    """``d`` with every length times ``k`` (its clip limits too)."""
    return LogNormal(median=d.median * k, sigma=d.sigma, lo=d.lo, hi=d.hi * k)


def output_tokens(mean: float) -> Mixture:
    """The conversation fit's output mixture with its body median set so its mean is ``mean``."""
    share, short = bench.MOONCAKE_SHORT_SHARE, bench.MOONCAKE_SHORT_TOKENS
    sigma = bench._BODY_SIGMA
    body = LogNormal(median=bench._body_median(mean, share, short, sigma), sigma=sigma, lo=1)
    return Mixture((share, 1 - share), (short, body))


def mooncake_trace_table(name: str, n: int, seed: int = 0) -> pa.Table:
    """The first ``n`` requests (0: 12,031) of the built-in trace ``name``."""
    n = n or CONVERSATION_REQUESTS
    if name == "mooncake_conversation":
        return bench.mooncake_table(n, seed)
    mean_in, mean_out = MEANS[name]
    k = mean_in / MEANS["mooncake_conversation"][0]
    params = ConversationParams(
        sessions=max(1, n),
        rate=bench.MOONCAKE_SESSION_RATE,
        session_tokens=_scaled(bench.MOONCAKE_SESSION_TOKENS, k),
        prompt_tokens=_scaled(bench.MOONCAKE_PROMPT_TOKENS, k),
        think_time_s=Exponential(bench.MOONCAKE_THINK_S),
        block_tokens=bench.TRACE_BLOCK,
        response_tokens=output_tokens(mean_out),
        whole_answers=True,
    )
    table = generate_conversations(params, seed=seed).table
    block = {"block_tokens": str(bench.TRACE_BLOCK)}
    return table.slice(0, n).replace_schema_metadata(block)


@dataclass(frozen=True)
class Params:
    """A drawn trace takes no parameters beyond the workload's ``requests`` and seed."""


for _name in MEANS:
    REQUEST_TRACES.register(_name, Params, functools.partial(mooncake_trace_table, _name))
