"""The L-Eval-shaped workload (traces/leval.py) against the seed table it cites.

Seed 002's Table 1 gives, per L-Eval task class, the average input length and
the prefix-cache hit rate; §5 gives the 2.6K-195.0K length range.  Each check
computes the statistic from the generated requests only (inputs, outputs,
sessions, turns), never from the generator's parameters.

Tolerance: requests of one document are correlated (they share its length),
so the sample is ``n`` independent sessions, not the requests.  A per-request
mean is a ratio of two session sums, ``sum(S_s) / sum(k_s)``; its standard
error by the delta method is ``sd(S_s - m k_s) / (sqrt(n) mean(k_s))``.  The
checks allow 4 standard errors (a normal statistic falls outside with
probability 6e-5) and require that standard error to be under 2.5% of the
target, so that 4 of them stay under 10%: a mean or hit rate 10% off fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from traces.errors import TraceError
from traces.leval import MAX_TOKENS, MIN_TOKENS, TASKS, leval_task_trace, leval_trace

SESSIONS = 4_000  # documents per task class: QA's per-request mean then has a SE of ~1.9%
TABLE1 = {  # seed 002 Table 1: (average input tokens, hit rate)
    "qa": (43_958.0, 0.818),
    "summarization": (7_124.0, 0.063),
}


def _ratio_and_se(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """sum(num) / sum(den) over sessions and its delta-method standard error."""
    r = num.sum() / den.sum()
    resid = num - r * den
    return float(r), float(resid.std(ddof=1) / (np.sqrt(len(num)) * den.mean()))


def _by_session(trace):
    sess, turn = trace.column("session_id"), trace.column("turn")
    order = np.lexsort((turn, sess))
    return sess[order], turn[order], trace.input_tokens[order], trace.output_tokens[order]


@pytest.fixture(scope="module", params=sorted(TASKS))
def task_trace(request):
    return request.param, leval_task_trace(request.param, SESSIONS, 1.0, think_s=15.0, seed=7)


def test_mean_input_length_is_table_1s(task_trace):
    task, trace = task_trace
    sess, _, inp, _ = _by_session(trace)
    n = int(sess.max()) + 1
    per_sess_tokens = np.bincount(sess, weights=inp, minlength=n)
    per_sess_requests = np.bincount(sess, minlength=n).astype(float)
    mean, se = _ratio_and_se(per_sess_tokens, per_sess_requests)
    target = TABLE1[task][0]
    assert se < 0.025 * target
    assert abs(mean - target) < 4 * se, (task, mean, target, se)


def test_prefix_hit_rate_is_table_1s(task_trace):
    """A turn's cacheable tokens are the history it re-sends: the previous turn's
    input and answer (turn 0, the document, misses)."""
    task, trace = task_trace
    sess, turn, inp, out = _by_session(trace)
    cached = np.zeros(len(inp))
    later = np.flatnonzero(turn > 0)
    assert np.all(sess[later] == sess[later - 1]) and np.all(turn[later] == turn[later - 1] + 1)
    cached[later] = inp[later - 1] + out[later - 1]
    assert np.all(cached < inp)  # every turn adds a question
    n = int(sess.max()) + 1
    hit, se = _ratio_and_se(np.bincount(sess, weights=cached, minlength=n),
                            np.bincount(sess, weights=inp, minlength=n))  # fmt: skip
    target = TABLE1[task][1]
    assert se < 0.025 * max(target, 1 - target)
    assert abs(hit - target) < 4 * se, (task, hit, target, se)


def test_documents_lie_in_section_5s_range(task_trace):
    """§5: "the sequence length in this dataset ranges from 2.6K to 195.0K"; the first
    turn is the document plus one question of at most 2,048 tokens."""
    _, trace = task_trace
    first = trace.input_tokens[trace.column("turn") == 0]
    assert len(first) == SESSIONS
    assert first.min() > MIN_TOKENS and first.max() <= MAX_TOKENS + 2_048


def test_mix_keeps_sessions_and_blocks_apart():
    n = 2_000
    t = leval_trace(n, 0.5, think_s=10.0, qa_share=0.3, seed=3)
    t.validate()
    sess, turn = t.column("session_id"), t.column("turn")
    assert set(np.unique(sess)) == set(range(n)) and (turn == 0).sum() == n
    assert np.all(np.diff(t.arrival_s) >= 0)
    # block ids never shared between two documents
    off, val = t.hashes()
    owner = np.repeat(sess, np.diff(off))
    order = np.argsort(val, kind="stable")
    same_id = np.diff(val[order]) == 0
    assert np.all(np.diff(owner[order])[same_id] == 0)
    # ~600 QA documents (5.46 questions each on average) and ~1,400 summarization ones
    # (1.064): 4,766 requests.  The sd: the mix is binomial, sqrt(2,000 x 0.3 x 0.7) = 20.5
    # documents x 4.40 more questions per QA document = 90; QA's geometric turns add
    # sqrt(600 x 5.46 x 4.46) = 121 (a geometric's variance is mu (mu - 1)); together
    # 151, so 4 sd is 604 requests, 12.7%
    assert len(t) == pytest.approx(600 * 5.46 + 1_400 * 1.064, rel=0.13)
    # one Poisson process of documents: a single start at 0, then rising
    first = np.sort(t.arrival_s[turn == 0])
    assert first[0] == 0.0 and np.all(np.diff(first) > 0)


def test_bad_qa_share_is_refused():
    with pytest.raises(TraceError, match="qa_share"):
        leval_trace(10, 1.0, think_s=1.0, qa_share=1.5)
