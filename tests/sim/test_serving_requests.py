"""Loading request tables: engine-block hashes in one array, checked rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sim.serving.requests import (
    RequestError,
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
        assert tuple(got) == _per_row(row, trace_block, engine_block)
        assert all(type(h) is int for h in got)  # Python ints, as dict keys hash them
    assert len({id(r.hashes.obj) for r in reqs}) == 1  # views of one shared int64 array
    assert reqs[0].hashes.readonly


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
