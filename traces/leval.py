"""An L-Eval-shaped request workload, SYNTHESISED from seed 002's statistics.

SwiftCache's headline ("up to 69%" lower P99 TTFT, seed 002 §5.1, Fig. 7) is
measured on L-Eval (An et al., ACL 2024).  The dataset is not available
offline (no copy under ``../shared/traces``, no network), so this module draws
a workload of the shape the seed states and nothing more.  It is not L-Eval:
every document, question and answer here is a random length.

What the seed gives (``../shared/seeds/002_a1851cf07b8ad9c6.txt``):

* Table 1 (§2.3, LWM-1M-Text on an H20, with prefix cache): the two L-Eval
  task classes, *Summarization* (prefix-cache hit rate 6.3%, average input
  7,124 tokens) and *Question Answering* (hit rate 81.8%, average input
  43,958 tokens);
* §5 "Workloads": L-Eval has "more than 500 tasks, covering long-context
  multi-turn conversations, question answering, and summarization tasks";
  "the sequence length in this dataset ranges from 2.6K to 195.0K"; requests
  are "sent to the server according to a Poisson arrival process".

How it is drawn (:func:`traces.conversation.generate_conversations`, one
call per task class): a session is one document; its first prompt is the
document plus a question (``opening_tokens``), every later turn re-sends the
history and asks one more question about the same document.  Sessions start
as a Poisson process (§5).  Per task class:

* **turns per document** ~ geometric with mean about ``1 / (1 - hit rate)``:
  with the document ``D`` much longer than a question and an answer, and a
  cache that keeps each document while its questions come, turn 1 misses and
  every later turn hits its history, so the token hit rate of a session of
  ``k`` turns is ``(k - 1) / k`` and, over sessions whose ``k`` is independent
  of ``D``, ``1 - 1 / E[k]``.  Table 1's 81.8% gives ``E[k] = 5.49`` (QA), its
  6.3% gives ``1.067`` (summarization); counting the earlier answers each turn
  re-sends, the means that give Table 1's rates exactly are 5.46 and 1.064
  (:attr:`Task.mean_turns`).  Table 1 was measured with a cache
  of finite size (LWM on one 96 GB H20), so a hit rate capped by capacity
  would make these lower bounds.  The geometric shape is an assumption (the
  seed gives only the rate); the serving scenario's own ``turns`` law is
  geometric too (:func:`sim.scenarios.serving.conversation_table`).
* **document length** ~ log-normal clipped to §5's range [2,600, 195,000]
  tokens, its median solved so that the mean *request input* (document +
  earlier questions and answers + the new question) is Table 1's average
  input length; the log-space sigma is an assumption (below).
* **questions and answers**: log-normal; their medians and sigmas are
  assumptions (the seed gives no per-turn lengths for L-Eval).

A mix of the two classes (``qa_share`` of the documents are QA) is one
trace: the seed gives no mix (an assumption, below).  L-Eval's own paper
(not among the seeds; its abstract) counts 508 documents and over 2,000
questions, about 4 per document; the default mix gives
0.5 x 5.46 + 0.5 x 1.064 = 3.3, the same size, as a plausibility check only.

With the real dataset, what would change: the per-document question counts
(here geometric, fitted only to the hit rate), the joint law of document
length and question count (here independent), real question and answer
lengths, the task mix, and the document length distribution's shape beyond
its mean and range; the tail of the P99 rests on the longest documents and
the busiest sessions, which only the real files give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traces.conversation import (
    ConversationParams,
    Exponential,
    Geometric,
    LogNormal,
    generate_conversations,
)
from traces.errors import TraceError
from traces.requests import RequestTrace, build_table

# seed 002 §5 "Workloads": "The sequence length in this dataset ranges from 2.6K to 195.0K"
MIN_TOKENS, MAX_TOKENS = 2_600, 195_000


@dataclass(frozen=True)
class Task:
    """One L-Eval task class of seed 002's Table 1 and the assumptions drawn beside it."""

    name: str
    mean_input_tokens: float  # Table 1 "Avg. Input Length"
    hit_rate: float  # Table 1 "Hit Rate (%)" / 100
    doc_sigma: float  # ASSUMPTION: log-space sigma of the document length
    question: LogNormal  # ASSUMPTION: tokens of one question (instruction)
    answer: LogNormal  # ASSUMPTION: tokens of one answer

    @property
    def mean_turns(self) -> float:
        """Questions per document, solved so that the expected hit rate is Table 1's.

        A session of ``k`` turns (question ``q``, answer ``a``, document ``D``)
        computes ``D + k q`` new tokens and sends ``k M_s`` in all, ``M`` being the
        mean request input; with ``E[D] = M - q - (mu - 1)(q + a)``
        (:meth:`history_tokens`) and ``k`` independent of ``D`` the expected hit rate
        is ``h = 1 - (M - (mu - 1) a) / (mu M)``, so
        ``mu = (M + a) / ((1 - h) M + a)``: ``1 / (1 - h)`` less what the re-sent
        answers add (QA 5.46 for 5.49, summarization 1.064 for 1.067)."""
        m, a = self.mean_input_tokens, clipped_mean(self.answer)
        return (m + a) / ((1.0 - self.hit_rate) * m + a)

    def history_tokens(self) -> float:
        """Mean tokens a request carries besides its document: its question plus the
        earlier questions and answers.  A request's turn index averages
        ``E[k(k-1)/2] / E[k] = mean_turns - 1`` for geometric ``k``."""
        q, a = clipped_mean(self.question), clipped_mean(self.answer)
        return q + (self.mean_turns - 1.0) * (q + a)

    def document(self) -> LogNormal:
        """The document-length law: clipped to §5's range, mean = Table 1's less the history."""
        target = self.mean_input_tokens - self.history_tokens()
        return solve_median(target, self.doc_sigma, MIN_TOKENS, MAX_TOKENS)


TASKS = {
    # Table 1, row "Question Answering | L-Eval | 81.8 | 0.92s | 7.95s | 43958 | High"
    "qa": Task(
        name="qa",
        mean_input_tokens=43_958.0,
        hit_rate=0.818,
        # ASSUMPTION (plausible 0.5-1.2): 0.8 puts 0.1% of documents under 2.6K and ~1%
        # over 195K, the range's ends (§5)
        doc_sigma=0.8,
        # ASSUMPTION: one question, median 30 tokens (plausible 15-100), sigma 0.7
        question=LogNormal(median=30.0, sigma=0.7, lo=1.0, hi=2_048.0),
        # ASSUMPTION: a short answer, median 40 tokens (plausible 10-200), sigma 0.8
        answer=LogNormal(median=40.0, sigma=0.8, lo=1.0, hi=2_048.0),
    ),
    # Table 1, row "Summarization | L-Eval | 6.3 | 0.77s | 0.86s | 7124 | Low"
    "summarization": Task(
        name="summarization",
        mean_input_tokens=7_124.0,
        hit_rate=0.063,
        # ASSUMPTION (plausible 0.3-0.8): 0.5 leaves ~4% of documents at the 2.6K floor
        doc_sigma=0.5,
        # ASSUMPTION: an instruction, median 30 tokens (plausible 15-100), sigma 0.7
        question=LogNormal(median=30.0, sigma=0.7, lo=1.0, hi=2_048.0),
        # ASSUMPTION: a summary, median 300 tokens (plausible 100-600), sigma 0.5
        answer=LogNormal(median=300.0, sigma=0.5, lo=1.0, hi=2_048.0),
    ),
}
# ASSUMPTION (plausible 0.3-0.7): half of the documents are QA; the seed gives no mix
QA_SHARE = 0.5


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_mean(d: LogNormal) -> float:
    """``E[min(max(X, lo), hi)]`` of :class:`LogNormal` ``d`` (what its ``sample`` draws)."""
    m, s = math.log(d.median), d.sigma
    a = (math.log(d.lo) - m) / s if d.lo > 0 else -math.inf
    b = (math.log(d.hi) - m) / s if math.isfinite(d.hi) else math.inf
    body = math.exp(m + s * s / 2) * (_phi(b - s) - _phi(a - s))
    low = d.lo * _phi(a) if d.lo > 0 else 0.0
    high = d.hi * (1.0 - _phi(b)) if math.isfinite(d.hi) else 0.0
    return low + body + high


def solve_median(mean: float, sigma: float, lo: float, hi: float) -> LogNormal:
    """The log-normal of log-space ``sigma`` clipped to ``[lo, hi]`` whose clipped
    mean is ``mean`` (bisection on the log-median: the clipped mean rises with it)."""
    if not lo < mean < hi:
        raise TraceError(f"leval: a mean of {mean:g} tokens is outside [{lo:g}, {hi:g}]")
    x0, x1 = math.log(lo) - 8 * sigma, math.log(hi) + 8 * sigma
    for _ in range(200):
        mid = 0.5 * (x0 + x1)
        if clipped_mean(LogNormal(math.exp(mid), sigma, lo, hi)) < mean:
            x0 = mid
        else:
            x1 = mid
    return LogNormal(math.exp(0.5 * (x0 + x1)), sigma, lo, hi)


def task_params(
    task: str, sessions: int, rate: float, think_s: float, block_tokens: int
) -> ConversationParams:
    """The conversation generator's parameters for one task class of :data:`TASKS`."""
    if task not in TASKS:
        raise TraceError(f"leval: unknown task {task!r}; known: {sorted(TASKS)}")
    t = TASKS[task]
    return ConversationParams(
        sessions=sessions,
        rate=rate,
        prompt_tokens=t.question,
        response_tokens=t.answer,
        think_time_s=Exponential(think_s),
        block_tokens=block_tokens,
        opening_tokens=t.document(),
        turns=Geometric(t.mean_turns),
    )


def leval_task_trace(
    task: str,
    sessions: int,
    rate: float,
    *,
    think_s: float,
    seed: int = 0,
    block_tokens: int = 16,
    starts: np.ndarray | None = None,
) -> RequestTrace:
    """``sessions`` documents of one task class, starting at ``rate`` per second
    (Poisson), or at ``starts`` (seconds, one per document) when given."""
    params = task_params(task, sessions, rate, think_s, block_tokens)
    trace = generate_conversations(params, seed=seed, session_starts=starts)
    source = f"synthetic:leval-{task} (seed 002 Table 1, not the dataset) " + trace.source
    return RequestTrace(trace.table, trace.block_tokens, source)


def leval_trace(
    sessions: int,
    rate: float,
    *,
    think_s: float,
    qa_share: float = QA_SHARE,
    seed: int = 0,
    block_tokens: int = 16,
) -> RequestTrace:
    """``sessions`` documents starting as one Poisson process of ``rate`` per second
    (§5), each QA with probability ``qa_share`` and summarization otherwise (a marked
    Poisson process: each class is a Poisson stream of its share of the rate); QA
    sessions are numbered first, block ids kept apart."""
    if not 0.0 <= qa_share <= 1.0:
        raise TraceError(f"leval: qa_share must be in [0, 1], got {qa_share}")
    if sessions < 1 or not (rate > 0 and math.isfinite(rate)):
        raise TraceError(f"leval: need sessions >= 1 and rate > 0, got {sessions}, {rate}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1E7A1]))
    starts = np.cumsum(rng.exponential(1.0 / rate, sessions))
    starts -= starts[0]
    qa = rng.random(sessions) < qa_share
    parts = []
    for i, (task, mine) in enumerate((("qa", qa), ("summarization", ~qa))):
        if mine.any():
            parts.append(leval_task_trace(task, int(mine.sum()), rate, think_s=think_s,
                                          seed=seed * 2 + i, block_tokens=block_tokens,
                                          starts=starts[mine]))  # fmt: skip
    return _merge(parts, block_tokens, f"synthetic:leval qa_share={qa_share:g} seed={seed}")


def _merge(parts: list[RequestTrace], block_tokens: int, source: str) -> RequestTrace:
    """One trace of ``parts`` in arrival order, session ids and block ids made disjoint."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("arr", "in", "out", "sess", "turn")}
    lens, values = [], []
    sess_base = hash_base = 0
    for t in parts:
        off, val = t.hashes()
        cols["arr"].append(t.arrival_s)
        cols["in"].append(t.input_tokens)
        cols["out"].append(t.output_tokens)
        cols["sess"].append(t.column("session_id") + sess_base)
        cols["turn"].append(t.column("turn"))
        lens.append(np.diff(off))
        values.append(val + hash_base)
        sess_base = int(cols["sess"][-1].max()) + 1
        hash_base = int(values[-1].max()) + 1 if len(val) else hash_base
    arr, inp, out, sess, turn = (np.concatenate(cols[k]) for k in cols)
    n_hash, hashes = np.concatenate(lens), np.concatenate(values)
    starts = np.r_[0, np.cumsum(n_hash)[:-1]]
    order = np.lexsort((turn, sess, arr))
    picked = [hashes[starts[i] : starts[i] + n_hash[i]] for i in order]
    offsets = np.r_[0, np.cumsum(n_hash[order])].astype(np.int64)
    table = build_table(arr[order], inp[order], out[order], session_id=sess[order],
                        turn=turn[order], hash_offsets=offsets,
                        hash_values=np.concatenate(picked) if picked else hashes)  # fmt: skip
    return RequestTrace(table, block_tokens, source)
