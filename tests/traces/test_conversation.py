"""Conversation generator: a hand-computed session, shared prefixes, ShareGPT quantiles."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from traces.conversation import (
    ConversationParams,
    Fixed,
    Geometric,
    LogNormal,
    Mixture,
    generate_conversations,
)
from traces.errors import TraceError

# session 1000 tokens, prompts 100, answers 200, 128-token blocks, 10 s between turns
FIXED = ConversationParams(
    sessions=2,
    session_tokens=Fixed(1000),
    prompt_tokens=Fixed(100),
    response_tokens=Fixed(200),
    think_time_s=Fixed(10.0),
    block_tokens=128,
)


def per_session(trace):
    """{session: [row, ...] in turn order}."""
    sess, turn = trace.column("session_id"), trace.column("turn")
    rows: dict[int, list[int]] = {}
    for i in np.lexsort((turn, sess)):
        rows.setdefault(int(sess[i]), []).append(int(i))
    return rows


def test_fixed_session_by_hand():
    t = generate_conversations(FIXED, session_starts=np.array([0.0, 5.0]))
    t.validate()
    # turns: (100 + 200) x 3, then 100 left: prompt 99 and answer 1 end the session at 1000
    assert t.column("session_id").tolist() == [0, 1] * 4
    assert t.column("turn").tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert t.arrival_s.tolist() == [0, 5, 10, 15, 20, 25, 30, 35]
    assert t.input_tokens.tolist() == [100, 100, 400, 400, 700, 700, 999, 999]
    assert t.output_tokens.tolist() == [200, 200, 200, 200, 200, 200, 1, 1]
    # full 128-token blocks per turn 0, 3, 5, 7; session 0 owns ids 0..6, session 1 ids 7..13
    assert t.block_hashes(6).tolist() == list(range(7))
    assert t.block_hashes(7).tolist() == list(range(7, 14))
    s = t.stats()
    assert (s.blocks, s.reused_blocks) == (2 * 15, 2 * 8)  # per session: 0+3+5+7, 0+3+5
    assert s.prefix_reuse == 8 / 15


def test_system_prompt_blocks_are_shared_by_all_sessions():
    p = ConversationParams(
        sessions=3,
        session_tokens=Fixed(300),
        prompt_tokens=Fixed(100),
        response_tokens=Fixed(200),
        system_prompt_tokens=300,
        block_tokens=128,
    )
    t = generate_conversations(p, seed=1)
    # one turn each: 300 + 100 = 400 tokens = 3 full blocks; the first 2 lie in the system prompt
    assert [t.block_hashes(i).tolist() for i in range(3)] == [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
    assert t.stats().reused_blocks == 4


@pytest.fixture(scope="module")
def sharegpt():
    return generate_conversations(ConversationParams(sessions=3000, rate=2.0), seed=11)


def test_default_quantiles_match_sharegpt(sharegpt):
    t = sharegpt
    rows = per_session(t)
    inp, out = t.input_tokens, t.output_tokens
    totals = np.array([inp[r[-1]] + out[r[-1]] for r in rows.values()])
    prompts = np.concatenate([inp[r] - np.r_[0, (inp[r] + out[r])[:-1]] for r in rows.values()])
    # SwiftCache (seed 002): 90% of prompts < 132 tokens; 10% of sessions > 13K, 1% > 56K
    assert np.percentile(prompts, 90) == pytest.approx(132, rel=0.10)
    assert np.percentile(totals, 90) == pytest.approx(13_000, rel=0.15)
    assert np.percentile(totals, 99) == pytest.approx(56_000, rel=0.30)
    assert totals.min() >= 12 and totals.max() <= 602_000
    assert len(rows) == 3000 and (prompts >= 1).all() and (out >= 1).all()


def test_consecutive_turns_share_exactly_the_previous_full_blocks(sharegpt):
    t = sharegpt
    offsets, values = t.hashes()
    inp = t.input_tokens
    assert (np.diff(offsets) == inp // t.block_tokens).all()  # every full block hashed
    owner: dict[int, int] = {}
    for s, rows in per_session(t).items():
        prev: list[int] = []
        for r in rows:
            h = values[offsets[r] : offsets[r + 1]].tolist()
            assert h[: len(prev)] == prev  # starts with all of the previous turn's blocks
            prev = h
        for h in prev:  # no block of a session appears in another one
            assert owner.setdefault(h, s) == s


def test_poisson_session_starts(sharegpt):
    t = sharegpt
    starts = np.sort(t.arrival_s[t.column("turn") == 0])
    assert starts[0] == 0.0
    assert np.diff(starts).mean() == pytest.approx(1 / 2.0, rel=0.1)


def test_same_seed_same_trace():
    p = ConversationParams(sessions=200)
    a = generate_conversations(p, seed=3)
    assert a.table.equals(generate_conversations(p, seed=3).table)
    assert not a.table.equals(generate_conversations(p, seed=4).table)


def test_trace_driven_arrivals():
    t = generate_conversations(FIXED, session_starts=np.array([3.0, 1.0, 2.0]))
    assert t.stats().sessions == 3  # the given times set the number of sessions
    assert sorted(t.arrival_s[t.column("turn") == 0].tolist()) == [1.0, 2.0, 3.0]
    with pytest.raises(TraceError, match="session_starts"):
        generate_conversations(FIXED, session_starts=np.array([-1.0]))


def test_lognormal_from_quantiles():
    d = LogNormal.from_quantiles(0.9, 13_000, 0.99, 56_000)
    z90, z99 = 1.2815515655446004, 2.3263478740408408
    assert d.median * math.exp(z90 * d.sigma) == pytest.approx(13_000)
    assert d.median * math.exp(z99 * d.sigma) == pytest.approx(56_000)
    x = LogNormal(100, 1.0, lo=50, hi=150).sample(np.random.default_rng(0), 1000)
    assert x.min() == 50 and x.max() == 150


def test_bad_params():
    with pytest.raises(TraceError, match="sessions"):
        ConversationParams(sessions=0)
    with pytest.raises(TraceError, match="rate"):
        ConversationParams(rate=0)


def test_whole_answers_cut_the_last_prompt_not_the_answer():
    """Session 1000, prompts 500, answers 200: turn 0 is 500 + 200, 300 left.
    By default the last prompt is 299 of its 500 and its answer the 1 token
    left; with whole answers the answer keeps its 200 and the prompt takes
    the 100 left.  Either way the session ends at exactly 1000 tokens."""
    base = dict(
        sessions=1,
        session_tokens=Fixed(1000),
        prompt_tokens=Fixed(500),
        response_tokens=Fixed(200),
        think_time_s=Fixed(10.0),
        block_tokens=128,
    )
    cut = generate_conversations(ConversationParams(**base))
    whole = generate_conversations(ConversationParams(**base, whole_answers=True))
    assert cut.input_tokens.tolist() == [500, 999] and cut.output_tokens.tolist() == [200, 1]
    assert whole.input_tokens.tolist() == [500, 800]
    assert whole.output_tokens.tolist() == [200, 200]
    # a session shorter than an answer and a 1-token prompt cuts the answer
    short = ConversationParams(**{**base, "session_tokens": Fixed(150)}, whole_answers=True)
    t = generate_conversations(short)
    assert t.input_tokens.tolist() == [1] and t.output_tokens.tolist() == [149]


def test_whole_answers_end_every_session_at_its_drawn_total():
    """Both cuts spend the same drawn session totals (the first draws of the
    seed): each session's last turn, input plus output, is its total, so
    the two traces agree on it session by session."""
    p = ConversationParams(sessions=300, block_tokens=64)
    ends = []
    for whole in (False, True):
        t = generate_conversations(replace(p, whole_answers=whole), seed=5)
        rows = per_session(t)
        inp, out = t.input_tokens, t.output_tokens
        ends.append({s: int(inp[r[-1]] + out[r[-1]]) for s, r in rows.items()})
    assert ends[0] == ends[1]
    assert len(ends[0]) == 300


def test_mixture_draws_each_part_at_its_weight():
    """A quarter 1s and three quarters 3s: 40,000 draws hold 25% +- 1% ones (the
    binomial's standard deviation is 0.22%) and nothing else."""
    m = Mixture((0.25, 0.75), (Fixed(1), Fixed(3)))
    x = m.sample(np.random.default_rng(0), 40_000)
    assert set(np.unique(x).tolist()) == {1.0, 3.0}
    assert abs(np.mean(x == 1) - 0.25) < 0.01
    with pytest.raises(TraceError, match="weights"):
        Mixture((0.5, 0.6), (Fixed(1), Fixed(3)))
    with pytest.raises(TraceError, match="weights"):
        Mixture((1.0,), (Fixed(1), Fixed(3)))


def test_opening_document_and_counted_turns_by_hand():
    """A 1,000-token document opens each session; 4 turns of 10-token prompts and
    5-token answers: inputs 1,000 + 10 = 1,010, then + 5 + 10 each turn: 1,025,
    1,040, 1,055; with 128-token blocks the last turn has 8 full blocks, the
    first 7, and every turn's blocks begin with the previous turn's."""
    p = replace(FIXED, session_tokens=Fixed(1.0e9), prompt_tokens=Fixed(10),
                response_tokens=Fixed(5), opening_tokens=Fixed(1000), turns=Fixed(4))  # fmt: skip
    t = generate_conversations(p, seed=0)
    for s in (0, 1):
        rows = t.column("session_id") == s
        assert t.input_tokens[rows].tolist() == [1010, 1025, 1040, 1055]
        assert t.output_tokens[rows].tolist() == [5, 5, 5, 5]
        hashes = [t.block_hashes(i) for i in np.flatnonzero(rows)]
        assert [len(h) for h in hashes] == [7, 8, 8, 8]
        pairs = zip(hashes[:-1], hashes[1:], strict=True)
        assert all(np.array_equal(a, b[: len(a)]) for a, b in pairs)


def test_geometric_turns_mean_and_bad_mean():
    # mean 4: 20,000 draws, sd sqrt(0.75) / 0.25 = 3.46, so the mean's sd is 0.0245
    x = Geometric(4.0).sample(np.random.default_rng(0), 20_000)
    assert x.min() == 1 and abs(x.mean() - 4.0) < 4 * 0.0245
    with pytest.raises(TraceError, match="geometric"):
        Geometric(0.5)
