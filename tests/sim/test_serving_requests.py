"""Loading request tables: engine-block hashes in one array as dense ids, checked rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sim.serving.requests import (
    KeySpace,
    RequestError,
    check_one_space,
    engine_hashes,
    load_requests,
    mix,
    mix_array,
    request_table,
    session_hashes,
)

ROWS = [
    # traced rows: 5 trace blocks; prompts cut them at different points
    {"request_id": 0, "arrival_s": 0.0, "session_id": 3, "turn": 0, "input_tokens": 2600,
     "output_tokens": 4, "block_hashes": [11, -22, 2**62 + 7, 44, 55]},
    {"request_id": 1, "arrival_s": 0.5, "session_id": 3, "turn": 1, "input_tokens": 700,
     "output_tokens": 1, "block_hashes": [11, -22]},
    # untraced: a known session, then an unknown one (hashes nobody shares)
    {"request_id": 2, "arrival_s": 0.2, "session_id": 9, "turn": 0, "input_tokens": 1000,
     "output_tokens": 2, "block_hashes": []},
    {"request_id": 3, "arrival_s": 0.2, "session_id": -1, "turn": 0, "input_tokens": 300,
     "output_tokens": 2, "block_hashes": None},
]  # fmt: skip


def _per_row(row: dict, trace_block: int, engine_block: int) -> tuple[int, ...]:
    """The per-request reference: Python ints, one row at a time."""
    if row["block_hashes"]:
        return engine_hashes(row["block_hashes"], trace_block, engine_block, row["input_tokens"])
    return session_hashes(row["session_id"], row["request_id"], row["input_tokens"] // engine_block)


@pytest.mark.parametrize("trace_block,engine_block", [(512, 512), (512, 16), (512, 64), (16, 256)])
def test_hashes_equal_the_per_row_computation(trace_block: int, engine_block: int) -> None:
    rows = ROWS
    if trace_block == 16:  # engine block = 16 trace blocks: give rows enough of them
        rows = [{**r, "block_hashes": list(range(100 * i, 100 * i + 40)) if r["block_hashes"]
                 else r["block_hashes"]} for i, r in enumerate(ROWS)]  # fmt: skip
    reqs = load_requests(request_table(rows, trace_block), engine_block)
    assert [r.rid for r in reqs] == [0, 2, 3, 1]  # by arrival, then id
    by_id = {r.rid: r for r in reqs}
    for row in rows:
        got = by_id[row["request_id"]].hashes
        assert tuple(reqs[0].space.hash_list(got)) == _per_row(row, trace_block, engine_block)
        assert all(type(h) is int for h in got)  # Python ints, as dict keys hash them
    assert len({id(r.hashes.obj) for r in reqs}) == 1  # views of one shared int64 array
    assert reqs[0].hashes.readonly
    assert len({id(r.space) for r in reqs}) == 1  # one key space


def test_ids_are_dense_in_first_seen_order_and_shared_by_equal_hashes() -> None:
    """Rows 0 and 1 share their first trace block (one session's turns): at
    512-token engine blocks row 0's five full blocks are ids 0-4 (table
    order: row 0 comes first), row 1's one full block (700 tokens) is id 0
    again; row 2's one session block (1,000 tokens) is new, id 5; row 3
    (300 tokens) has no full block."""
    reqs = {r.rid: r for r in load_requests(request_table(ROWS, 512), 512)}
    assert [tuple(reqs[i].hashes) for i in range(4)] == [(0, 1, 2, 3, 4), (0,), (5,), ()]
    want = [11, -22, 2**62 + 7, 44, 55, *session_hashes(9, 2, 1)]
    assert reqs[0].space.hashes.tolist() == want


def test_one_space_across_calls_keeps_every_id() -> None:
    """A warm-up table and the trace loaded into one space: a hash seen in
    the first keeps its id in the second, new ones go on from the first's
    count; a fresh space numbers the same table from 0.  At 16-token engine
    blocks row 1 (700 tokens, trace blocks 11, -22) has 43 blocks, the first
    32 under 11 and 11 under -22: ids 0-42; row 0's first 43 blocks are the
    same (same trace hashes), its next ones new from 43 (2,600 tokens: 162
    full blocks, cut at the 160 its five trace blocks cover)."""
    space = KeySpace()
    warm = load_requests(request_table(ROWS[1:2], 512), 16, space=space)
    assert [tuple(r.hashes) for r in warm] == [tuple(range(43))] and len(space) == 43
    trace = {r.rid: r for r in load_requests(request_table(ROWS, 512), 16, space=space)}
    assert tuple(trace[0].hashes) == tuple(range(160))
    assert tuple(trace[1].hashes) == tuple(range(43))
    assert tuple(trace[2].hashes) == tuple(range(160, 160 + 62))  # 1,000 tokens: 62 blocks
    alone = {r.rid: r for r in load_requests(request_table(ROWS[2:], 512), 16)}
    assert tuple(alone[2].hashes) == tuple(range(62))


@pytest.mark.parametrize("seed", range(5))
def test_interned_ids_are_a_bijection_of_the_hashes(seed: int) -> None:
    """Random batches with many repeats into one space: equal hashes, equal
    ids; distinct hashes, distinct ids; the ids are 0..K-1 and ``hashes``
    maps each back; each batch's new ids come in first-seen order."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(-(2**63), 2**63 - 1, size=300, dtype=np.int64)
    space, seen = KeySpace(), {}
    for _ in range(6):
        batch = pool[rng.integers(0, len(pool), size=int(rng.integers(0, 200)))]
        ids = space.intern(batch).tolist()
        for h, i in zip(batch.tolist(), ids, strict=True):
            seen.setdefault(h, len(seen))  # the id first-seen order gives
            assert i == seen[h]
    assert space.hashes.tolist() == list(seen) and len(space) == len(set(seen.values()))


def test_mix_array_is_mix_elementwise() -> None:
    a = np.array([0, 1, -1, 2**63 - 1, -(2**63), 123456789], dtype=np.int64)
    b = np.array([0, 5, 7, 1, 31, 2**40], dtype=np.int64)
    assert mix_array(a, b).tolist() == [mix(int(x), int(y)) for x, y in zip(a, b, strict=True)]


def test_the_first_bad_row_is_named() -> None:
    rows = [dict(r, block_hashes=[]) for r in ROWS]
    rows[2]["output_tokens"] = 0
    rows[3]["input_tokens"] = 0
    with pytest.raises(RequestError, match="request row 2: output_tokens must be >= 1"):
        load_requests(request_table(rows, 512), 16)
    traced = request_table(ROWS, 512).replace_schema_metadata({})
    with pytest.raises(RequestError, match="no block_tokens metadata"):
        load_requests(traced, 16)
    with pytest.raises(RequestError, match="do not nest"):
        load_requests(request_table(ROWS, 512), 48)
    missing = request_table(ROWS, 512).drop_columns(["turn"])
    with pytest.raises(RequestError, match="lacks column"):
        load_requests(missing, 16)
    null_arrival = request_table(ROWS, 512)
    null_arrival = null_arrival.set_column(
        1, "arrival_s", pa.array([0.0, None, 0.2, 0.2], pa.float64())
    )
    with pytest.raises(RequestError, match="request row 1: arrival_s is missing"):
        load_requests(null_arrival, 16)


def test_hashes_computed_in_small_batches_are_the_same(monkeypatch) -> None:
    from sim.serving import requests as requests_module

    table = request_table(ROWS, 512)
    whole = [tuple(r.hashes) for r in load_requests(table, 16)]
    monkeypatch.setattr(requests_module, "HASH_CHUNK", 3)  # a batch per row or less
    assert [tuple(r.hashes) for r in load_requests(table, 16)] == whole


def test_requests_of_two_key_spaces_are_refused() -> None:
    """Two tables loaded without a shared space both number from 0: their
    ids collide, so one engine refuses them together; one space is fine."""
    a = load_requests(request_table(ROWS[:1], 512), 512)
    b = load_requests(request_table(ROWS[2:3], 512), 512)
    assert tuple(a[0].hashes[:1]) == tuple(b[0].hashes) == (0,)  # same id, different hashes
    check_one_space([*a, *a])
    with pytest.raises(ValueError, match="several key spaces"):
        check_one_space([*a, *b])
