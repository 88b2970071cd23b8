"""Hit-rate ceilings (sim/serving/oracle.py): hand-worked traces and invariants.

Blocks are 16 tokens; a prompt of ``16 n + 1`` tokens may hit all its ``n``
blocks (kvtier never hits the last token's block).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.serving.oracle import accesses, belady, ceilings, infinite, lru

B = 16


def acc(reqs, warm=0, tokens=None):
    tokens = tokens or [B * len(r) + 1 for r in reqs]
    return accesses(reqs, tokens, B, warm)


# A = [1 2 3], B = [1 2 4], C = [1 2 3]
ABC = [[1, 2, 3], [1, 2, 4], [1, 2, 3]]


def test_infinite_counts_blocks_an_earlier_request_held() -> None:
    a = acc(ABC)
    assert infinite(a) == 0 + 2 + 3
    assert a.distinct == 4


def test_lru_by_hand() -> None:
    # cap 3: after A the order (oldest first) is 3 2 1 (tail touched first); B hits
    # 1 2, inserts 4: 3 4 2 1, evicts 3; C hits 1 2, misses 3
    assert lru(acc(ABC), 3) == 2 + 2
    # cap 2: A leaves 2 1; B hits 1 2; 4 goes at once; C hits 1 2
    assert lru(acc(ABC), 2) == 2 + 2
    assert lru(acc(ABC), 0) == 0


def test_belady_by_hand() -> None:
    # cap 3: B's block 4 is never asked again, so it goes (bypass) and C hits 1 2 3
    assert belady(acc(ABC), 3) == 2 + 3
    # cap 2: A's block 3 is asked last (access 8), so it goes; C hits 1 2 only
    assert belady(acc(ABC), 2) == 2 + 2
    assert belady(acc(ABC), 0) == 0


def test_a_cycle_larger_than_the_cache_defeats_lru_not_belady() -> None:
    cyc = [[1], [2], [3], [1], [2], [3]]
    a = acc(cyc)
    assert lru(a, 2) == 0  # each block is evicted just before its next use
    # Belady keeps 1 and 2 (3 goes at once: next used at access 5, after 1's at 3 and 2's at 4)
    assert belady(a, 2) == 2
    assert infinite(a) == 3
    c = ceilings(a, 2)
    assert (c.infinite, c.belady, c.lru) == (3 * B / (6 * (B + 1)), 2 * B / (6 * (B + 1)), 0.0)


def test_the_last_tokens_block_never_hits() -> None:
    a = acc([[1, 2], [1, 2]], tokens=[2 * B, 2 * B])  # 32 tokens: at most 1 block hits
    assert (infinite(a), belady(a, 4), lru(a, 4)) == (1, 1, 1)


def test_a_warm_up_fills_the_cache_and_is_not_counted() -> None:
    a = acc([[1, 2, 3], [1, 2, 3]], warm=1)
    assert a.prompt_tokens == 3 * B + 1
    c = ceilings(a, 3)
    assert (c.infinite, c.belady, c.lru) == (3 * B / (3 * B + 1),) * 3


def test_next_use_is_the_reverse_scan() -> None:
    a = acc(ABC)  # ids: 1->0, 2->1, 3->2, 4->3
    assert a.next_use().tolist() == [3, 4, 8, 6, 7, 9 + 5, 9 + 6, 9 + 7, 9 + 8]


def test_bad_capacity() -> None:
    with pytest.raises(ValueError, match="capacity"):
        lru(acc(ABC), -1)


# chained traces: request = a document's first n blocks (equal hash = equal prefix)
trace = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 8)), min_size=1, max_size=40)


def chained(rows):
    return acc([[d * 100 + j for j in range(n)] for d, n in rows],
               tokens=[B * n + 1 for _, n in rows])  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(trace)
def test_infinite_over_belady_over_lru_at_every_capacity(rows) -> None:
    a = chained(rows)
    inf = infinite(a)
    last_b = last_l = 0
    for cap in range(a.distinct + 2):
        b, lr = belady(a, cap), lru(a, cap)
        assert inf >= b >= lr
        assert b >= last_b and lr >= last_l  # monotone in capacity
        last_b, last_l = b, lr
    assert belady(a, a.distinct) == lru(a, a.distinct) == inf
    assert belady(a, 0) == lru(a, 0) == 0


@settings(max_examples=100, deadline=None)
@given(trace)
def test_infinite_is_the_trace_reuse(rows) -> None:
    # independently: a request hits min(its blocks, the longest earlier request of its document)
    longest: dict[int, int] = {}
    want = 0
    for d, n in rows:
        want += min(n, longest.get(d, 0))
        longest[d] = max(longest.get(d, 0), n)
    assert infinite(chained(rows)) == want


def test_a_pooling_run_reports_its_ceilings_beside_its_hits() -> None:
    """Long Doc QA: 8 documents warmed up, then each queried once.  Every
    query's document was seen (the warm-up), and 8 x 16 chunks fit the
    tiers, so every ceiling is the whole prompt but its last token's chunk,
    which is what the designs hit (tests/sim/test_serving_scenario.py)."""
    import dataclasses

    from hwprofiles import load_profile
    from sim.config import load_scenario
    from sim.runner import run

    cfg = load_scenario("unified-pooling")
    matrix = {"model": ["Llama-3.1-8B"], "context_tokens": [4096]}
    variants = tuple(v for v in cfg.variants if dict(v.overrides)["design"] in ("lmcache", "pool"))
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, matrix=matrix),
                              variants=variants)  # fmt: skip
    df = run(cfg, load_profile("h100-2dimm-2ssd"), None).summary().set_index("design")
    # 256-token chunks of Llama-3.1-8B: 256 x 128 KiB = 32 MiB; GPU prefix cache off.
    # LMCache: 18.63 GiB of host memory -> 596 chunks, 186.26 GiB of SSD -> 5,960;
    # the pool: one tier of both, 204.89 GiB -> 6,556
    assert df.at["LMCache", "cache_blocks"] == 596 + 5960
    assert df.at["Unified KV pooling", "cache_blocks"] == 6556
    whole = (4096 - 1) // 256 * 256 / 4096
    for design, r in df.iterrows():
        hit = sum(r[f"hit_rate_{t}"] for t in ("gpu", "cpu", "ssd", "pool"))
        ceilings = r[["hit_ceiling_infinite", "hit_ceiling_belady", "hit_ceiling_lru"]]
        assert list(ceilings) == pytest.approx([whole] * 3), design
        assert hit == pytest.approx(whole)


def test_a_conversation_run_stays_under_its_ceilings() -> None:
    """Multi-turn chat on a small GPU cache, alone and over CPU + SSD tiers:
    without preemption a request looks up once, and no design beats Belady
    at its capacity.  (With preemption a request re-admitted after
    preemption looks up again and finds its own blocks: kvtier logs that
    last lookup, which no ceiling of first lookups bounds.)"""
    import dataclasses

    from hwprofiles import load_profile
    from sim.config import load_scenario
    from sim.runner import run

    cfg = load_scenario("paged-ssd")
    variants = tuple(v for v in cfg.variants if v.name.startswith("multi-turn"))
    w = dataclasses.replace(cfg.workload, preempt=False)
    cfg = dataclasses.replace(cfg, workload=w, variants=variants)
    df = run(cfg, load_profile("dgx-spark"), None).summary()
    for _, r in df.iterrows():
        hit = sum(r[f"hit_rate_{t}"] for t in ("gpu", "cpu", "ssd", "pool"))
        assert r["hit_ceiling_infinite"] >= r["hit_ceiling_belady"] >= r["hit_ceiling_lru"]
        assert 0 < hit <= r["hit_ceiling_belady"] + 1e-12


def _best_offline(rows, cap: int) -> int:
    """The most prefix hits any offline choice of cache contents gets: after each
    request, keep any set of at most ``cap`` blocks out of what was held and what
    the request brought (every eviction and bypass), best hits per set kept."""
    from itertools import combinations

    best = {frozenset(): 0}
    for d, n in rows:
        blocks = [d * 100 + j for j in range(n)]
        nxt: dict[frozenset, int] = {}
        for held, hits in best.items():
            k = 0
            while k < n and blocks[k] in held:
                k += 1
            pool = sorted(held | set(blocks))
            for size in range(min(cap, len(pool)) + 1):
                for keep in combinations(pool, size):
                    s = frozenset(keep)
                    nxt[s] = max(nxt.get(s, -1), hits + k)
        best = nxt
    return max(best.values())


small = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(small, st.integers(0, 4))
def test_no_offline_choice_beats_belady(rows, cap) -> None:
    # prompts of 16 n + 1 tokens: every block may hit, so hits are the whole prefix
    assert belady(chained(rows), cap) == _best_offline(rows, cap)


@settings(max_examples=100, deadline=None)
@given(trace, st.integers(0, 20))
def test_lru_holds_prefixes_so_counting_blocks_gives_the_same(rows, cap) -> None:
    # a list, most recent last; a request's blocks touched tail first; every held
    # block among a request's counted blocks hits, prefix or not
    order: list[int] = []
    per_block = 0
    for d, n in rows:
        blocks = [d * 100 + j for j in range(n)]
        per_block += sum(b in order for b in blocks)
        for b in reversed(blocks):
            if b in order:
                order.remove(b)
            order.append(b)
        del order[: max(len(order) - cap, 0)]
    assert lru(chained(rows), cap) == per_block
