"""Multi-turn conversation generator: sessions that re-send their growing history.

A session is a conversation; every turn sends the whole history so far (an
optional system prompt shared by all sessions, then every earlier user prompt
and answer) plus a new user prompt, and asks for an answer.  So turn ``k+1``
begins with every token of turn ``k`` (and of its answer), and its
``block_hashes`` begin with all of turn ``k``'s: the prefix reuse a
multi-turn prefix cache feeds on.

How a session is drawn (all lengths settable, see :class:`ConversationParams`):

1. a target total ``T`` (tokens of the final history: every prompt and
   answer, not counting the system prompt) from ``session_tokens``;
2. turns, each a prompt from ``prompt_tokens`` and an answer from
   ``response_tokens``, until the history reaches ``T``; the last turn is cut
   so the session ends at exactly ``T`` (a prompt keeps >= 1 token, an answer
   >= 1).  By default the cut falls on the answer: the last turn's prompt is
   drawn whole and its answer takes what is left.  With ``whole_answers`` it
   falls on the prompt: every answer keeps its drawn length (cut only in a
   session shorter than the answer and a 1-token prompt) and the last prompt
   takes what is left, so that the output lengths follow ``response_tokens``
   even when prompts are as long as sessions (a Mooncake-shaped trace, where
   most sessions are one turn).  The number of turns is therefore not drawn
   but follows from ``T`` and the turn sizes.
3. the session starts at a Poisson arrival (``rate`` sessions/s), or at given
   times (``session_starts``, e.g. an Azure trace's arrivals); turn ``k+1``
   arrives ``think_time_s`` after turn ``k`` *arrived* (the generator does not
   know the response time; the ``session_id``/``turn`` columns let a serving
   model hold a turn back until the previous one finished).

Two options shape document-centred sessions (L-Eval's long-document tasks,
:mod:`traces.leval`): ``opening_tokens`` puts a document, drawn per session,
at the head of the first prompt (the later turns re-send it as history), and
``turns`` draws each session's number of turns instead of a token total, so
no turn is cut (``session_tokens`` is then not drawn).  Neither draws from the
random stream when unset, so traces without them are as before, bit for bit.

Defaults, shaped like the ShareGPT statistics SwiftCache reports (seed 002,
Fig. 3 and §5): 90% of user prompts under 132 tokens; 10% of sessions over
13K tokens and 1% over 56K; sessions from 12 to 602K tokens.  The paper gives
no more: the prompt median (32 tokens) is our assumption, the answers follow
the Azure 2023 conversation trace's ``GeneratedTokens`` (P50 129, P90 424),
and the think time (exponential, mean 30 s) is an assumption.

Block ids are Mooncake-style integers: block ``b`` (``block_tokens`` tokens)
of a session's token stream gets one id, the same in every turn that covers
it, fresh for every session; blocks wholly inside the shared system prompt
get ids ``0..`` shared by all sessions.  Since every block's content is fixed
by the session and its position, equal ids mean equal prefixes (chained).
Same ``seed`` and params, same trace, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from traces.errors import TraceError
from traces.requests import RequestTrace, build_table

_Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.99: 2.3263478740408408}


class Dist(Protocol):
    """A length or time distribution: ``n`` draws as floats."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...


@dataclass(frozen=True)
class LogNormal:
    """Log-normal with the given median and log-space ``sigma``, clipped to [lo, hi]."""

    median: float
    sigma: float
    lo: float = 0.0
    hi: float = math.inf

    @classmethod
    def from_quantiles(
        cls, p1: float, x1: float, p2: float, x2: float, lo: float = 0.0, hi: float = math.inf
    ) -> LogNormal:
        """The log-normal with ``P(X <= x1) = p1`` and ``P(X <= x2) = p2``
        (``p`` in 0.5, 0.9, 0.99)."""
        z1, z2 = _Z[p1], _Z[p2]
        sigma = (math.log(x2) - math.log(x1)) / (z2 - z1)
        return cls(median=math.exp(math.log(x1) - z1 * sigma), sigma=sigma, lo=lo, hi=hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(math.log(self.median), self.sigma, n)
        return np.clip(x, self.lo, self.hi)

    def __str__(self) -> str:
        return (
            f"lognormal(median={self.median:.4g},sigma={self.sigma:.3g},{self.lo:g}..{self.hi:g})"
        )


@dataclass(frozen=True)
class Exponential:
    mean: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean, n)

    def __str__(self) -> str:
        return f"exponential(mean={self.mean:g})"


@dataclass(frozen=True)
class Mixture:
    """Draws from ``parts[i]`` with probability ``weights[i]`` (weights sum to 1)."""

    weights: tuple[float, ...]
    parts: tuple[Dist, ...]

    def __post_init__(self) -> None:
        w = self.weights
        if len(w) != len(self.parts) or not w or min(w) < 0 or abs(sum(w) - 1.0) > 1e-9:
            raise TraceError(f"mixture: weights {w} must be >= 0, one per part, summing to 1")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        pick = rng.choice(len(self.parts), size=n, p=np.asarray(self.weights))
        out = np.empty(n)
        for i, part in enumerate(self.parts):
            mask = pick == i
            out[mask] = part.sample(rng, int(np.count_nonzero(mask)))
        return out

    def __str__(self) -> str:
        return (
            "mixture("
            + ",".join(f"{w:g}*{p}" for w, p in zip(self.weights, self.parts, strict=True))
            + ")"
        )


@dataclass(frozen=True)
class Geometric:
    """Whole numbers ``1, 2, ...`` with ``P(k) = (1 - q)^(k-1) q``, ``q = 1 / mean``
    (a count of independent tries until the first stop: turns in a session)."""

    mean: float

    def __post_init__(self) -> None:
        if not (self.mean >= 1 and math.isfinite(self.mean)):
            raise TraceError(f"geometric: mean must be >= 1, got {self.mean}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.geometric(1.0 / self.mean, n).astype(np.float64)

    def __str__(self) -> str:
        return f"geometric(mean={self.mean:g})"


@dataclass(frozen=True)
class Fixed:
    value: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))

    def __str__(self) -> str:
        return f"fixed({self.value:g})"


SHAREGPT_SESSION_TOKENS = LogNormal.from_quantiles(0.9, 13_000, 0.99, 56_000, lo=12, hi=602_000)
SHAREGPT_PROMPT_TOKENS = LogNormal.from_quantiles(0.5, 32, 0.9, 132, lo=1, hi=32_768)
AZURE_CONV_RESPONSE_TOKENS = LogNormal.from_quantiles(0.5, 129, 0.9, 424, lo=1, hi=4096)


@dataclass(frozen=True)
class ConversationParams:
    """What :func:`generate_conversations` draws (see the module docstring)."""

    sessions: int = 1000
    rate: float = 1.0  # sessions per second (Poisson), when no session_starts are given
    session_tokens: Dist = field(default=SHAREGPT_SESSION_TOKENS)
    prompt_tokens: Dist = field(default=SHAREGPT_PROMPT_TOKENS)
    response_tokens: Dist = field(default=AZURE_CONV_RESPONSE_TOKENS)
    think_time_s: Dist = field(default=Exponential(30.0))
    system_prompt_tokens: int = 0  # shared by every session, before its first prompt
    block_tokens: int = 512
    whole_answers: bool = False  # the session total cuts the last prompt, not the answer
    # a document each session opens with, inside its first prompt (L-Eval's long inputs,
    # traces/leval.py); None = no document.  Counted apart from session_tokens.
    opening_tokens: Dist | None = None
    # turns per session, drawn (rounded, >= 1); None = as many as session_tokens holds.
    # With it session_tokens is not drawn and no turn is cut.
    turns: Dist | None = None

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise TraceError(f"conversations: sessions must be >= 1, got {self.sessions}")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise TraceError(f"conversations: rate must be > 0 sessions/s, got {self.rate}")
        if self.block_tokens < 1 or self.system_prompt_tokens < 0:
            raise TraceError("conversations: block_tokens must be >= 1, system prompt >= 0")

    def describe(self) -> str:
        return (
            f"rate={self.rate:g}/s session={self.session_tokens} prompt={self.prompt_tokens} "
            f"response={self.response_tokens} think={self.think_time_s} "
            f"system={self.system_prompt_tokens} block={self.block_tokens}"
            + (" whole_answers" if self.whole_answers else "")
            + (f" opening={self.opening_tokens}" if self.opening_tokens is not None else "")
            + (f" turns={self.turns}" if self.turns is not None else "")
        )


def generate_conversations(
    params: ConversationParams | None = None,
    *,
    seed: int = 0,
    session_starts: np.ndarray | None = None,
) -> RequestTrace:
    """A multi-turn request trace; ``session_starts`` (seconds, one per session)
    replaces the Poisson arrivals and then sets the number of sessions."""
    p = params or ConversationParams()
    rng = np.random.default_rng(seed)
    if session_starts is None:
        starts = np.cumsum(rng.exponential(1.0 / p.rate, p.sessions))
        starts -= starts[0]
    else:
        starts = np.sort(np.asarray(session_starts, np.float64))
        if len(starts) == 0 or not np.all(np.isfinite(starts)) or starts[0] < 0:
            raise TraceError("conversations: session_starts must be finite seconds >= 0")
    n = len(starts)
    if p.turns is None:
        target = np.maximum(np.rint(p.session_tokens.sample(rng, n)), 2).astype(np.int64)
        sess, turn, prompt, answer = _turns(p, rng, target)
    else:
        count = np.maximum(np.rint(p.turns.sample(rng, n)), 1).astype(np.int64)
        sess, turn, prompt, answer = _counted_turns(p, rng, count)
    think = np.where(turn > 0, p.think_time_s.sample(rng, len(sess)), 0.0)
    if p.opening_tokens is not None:  # the document joins each session's first prompt
        doc = np.maximum(np.rint(p.opening_tokens.sample(rng, n)), 1).astype(np.int64)
        prompt = prompt + np.where(turn == 0, doc[sess], 0)
    arrival = starts[sess] + _segment_cumsum(sess, think)
    history = p.system_prompt_tokens + _segment_cumsum(sess, prompt + answer) - answer
    order = np.lexsort((turn, sess, arrival))
    sess, turn, arrival, inp, out = (
        sess[order],
        turn[order],
        arrival[order],
        history[order],
        answer[order],
    )
    offsets, values = _block_ids(
        sess, inp, p.block_tokens, p.system_prompt_tokens // p.block_tokens
    )
    source = f"generator:conversation seed={seed} sessions={n} "
    source += p.describe() + (" arrivals=given" if session_starts is not None else "")
    return RequestTrace(
        table=build_table(
            arrival, inp, out, session_id=sess, turn=turn, hash_offsets=offsets, hash_values=values
        ),
        block_tokens=p.block_tokens,
        source=source,
    )


def _turns(
    p: ConversationParams, rng: np.random.Generator, target: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(session, turn, prompt, answer) per request, sorted by session then turn."""
    remaining = target.copy()
    active = np.arange(len(target))
    cols: list[tuple[np.ndarray, ...]] = []
    k = 0
    while active.size:
        rem = remaining[active]
        u = np.maximum(np.rint(p.prompt_tokens.sample(rng, active.size)), 1).astype(np.int64)
        r = np.maximum(np.rint(p.response_tokens.sample(rng, active.size)), 1).astype(np.int64)
        if p.whole_answers:  # the answer first, the prompt takes what the session has left
            r = np.minimum(r, rem - 1)
            u = np.minimum(u, rem - r)
            left = rem - u - r
            u = np.where(left < 2, u + left, u)  # too little left for another turn: the prompt
        else:
            u = np.minimum(u, rem - 1)
            r = np.minimum(r, rem - u)
            left = rem - u - r
            r = np.where(left < 2, r + left, r)  # too little left for another turn: the answer
        left = np.where(left < 2, 0, left)
        remaining[active] = left
        cols.append((active, np.full(active.size, k, np.int32), u, r))
        active = active[left > 0]
        k += 1
    sess, turn, u, r = (np.concatenate(c) for c in zip(*cols, strict=True))
    order = np.lexsort((turn, sess))
    return sess[order], turn[order], u[order], r[order]


def _counted_turns(
    p: ConversationParams, rng: np.random.Generator, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(session, turn, prompt, answer) per request for ``count[s]`` whole turns of
    session ``s``, sorted by session then turn (drawn in the order :func:`_turns` uses)."""
    active = np.arange(len(count))
    cols: list[tuple[np.ndarray, ...]] = []
    k = 0
    while active.size:
        u = np.maximum(np.rint(p.prompt_tokens.sample(rng, active.size)), 1).astype(np.int64)
        r = np.maximum(np.rint(p.response_tokens.sample(rng, active.size)), 1).astype(np.int64)
        cols.append((active, np.full(active.size, k, np.int32), u, r))
        k += 1
        active = active[count[active] > k]
    sess, turn, u, r = (np.concatenate(c) for c in zip(*cols, strict=True))
    order = np.lexsort((turn, sess))
    return sess[order], turn[order], u[order], r[order]


def _segment_cumsum(seg: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``x`` restarting at every new value of ``seg``
    (rows grouped by ``seg``)."""
    c = np.cumsum(x)
    starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
    before = np.repeat(c[starts] - x[starts], np.diff(np.r_[starts, len(seg)]))
    return c - before


def _block_ids(
    sess: np.ndarray, inp: np.ndarray, block_tokens: int, shared: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR block ids: ids ``0..shared-1`` for the shared system-prompt blocks,
    then a fresh run of ids per session covering its longest request."""
    nb = inp // block_tokens
    n_sessions = int(sess.max()) + 1
    longest = np.zeros(n_sessions, np.int64)
    np.maximum.at(longest, sess, nb)
    own = np.maximum(longest - shared, 0)
    base = shared + np.r_[0, np.cumsum(own)[:-1]]  # first own id of each session
    offsets = np.r_[0, np.cumsum(nb)].astype(np.int64)
    b = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], nb)
    own_id = np.repeat(base[sess] - shared, nb) + b
    return offsets, np.where(b < shared, b, own_id)
