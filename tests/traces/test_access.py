"""Access-trace format: round trips, validation and the arithmetic of the accessors."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import (
    AccessMeta,
    AccessTrace,
    AccessTraceError,
    generate,
    read_access_trace,
    trace_stats,
    write_access_trace,
)
from traces.access import forced_ids, selection_budget

# N = 10 tokens, 3 steps, 2 layers, 2 head groups; sink 1, window 2.
META = AccessMeta(
    model="toy",
    context_tokens=10,
    layers=2,
    kv_heads=2,
    steps=3,
    sparsity=0.5,
    local_window=2,
    sink_tokens=1,
    source="test:hand-made",
    seed=7,
    params=(("note", "hand"), ("k", 3)),
)


def make_trace(meta: AccessMeta = META, extra: int = 2, seed: int = 0) -> AccessTrace:
    """Sinks + window + ``extra`` random other visible ids per row, rows in (s, l, h) order."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(meta.steps):
        visible = meta.context_tokens + step + 1
        forced = forced_ids(visible, meta.sink_tokens, meta.local_window)
        rest = np.setdiff1d(np.arange(visible), forced)
        for _ in range(meta.layers * meta.kv_heads):
            pick = rng.choice(rest, size=min(extra, len(rest)), replace=False)
            rows.append(np.union1d(forced, pick))
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)])
    indices = np.concatenate(rows) if rows else np.empty(0, np.int32)
    scores = rng.standard_normal(len(indices)).astype(np.float16)
    return AccessTrace(meta, offsets, indices, scores)


def one_line_error(path_or_label: str, excinfo: pytest.ExceptionInfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert path_or_label in msg
    return msg


# -- round trips ---------------------------------------------------------------------------


def test_round_trip_hand_made(tmp_path):
    trace = make_trace()
    trace.validate()
    path = tmp_path / "t.parquet"
    write_access_trace(trace, path)
    back = read_access_trace(path)
    assert back == trace
    assert back.meta == META
    assert back.scores.dtype == np.float16
    assert back.offsets.dtype == np.int64 and back.indices.dtype == np.int32
    table = pq.read_table(path)
    assert table.schema.field("step").type == pa.int32()
    assert table.schema.field("layer").type == pa.int16()
    assert table.schema.field("head").type == pa.int16()
    assert table.schema.field("indices").type == pa.list_(pa.int32())


def test_round_trip_generated_with_and_without_scores(tmp_path):
    gen = generate("default", 512, 6, layers=2, kv_heads=2, local_window=16, seed=3)
    for with_scores in (False, True):
        trace = gen.trace(with_scores=with_scores)
        path = tmp_path / f"g{with_scores}.parquet"
        write_access_trace(trace, path)
        back = read_access_trace(path)
        assert back == trace
        assert (back.scores is None) == (not with_scores)
        assert back.meta.source == "generator:default"
        assert dict(back.meta.params)["structure"] == 0.9


def test_reader_accepts_float32_scores_and_any_row_order(tmp_path):
    trace = make_trace()
    path = tmp_path / "t.parquet"
    write_access_trace(trace, path)
    table = pq.read_table(path)
    f32 = pa.ListArray.from_arrays(
        pa.array(trace.offsets.astype(np.int32)), pa.array(trace.scores.astype(np.float32))
    )
    table = table.set_column(table.schema.get_field_index("scores"), "scores", f32)
    shuffled = table.take(pa.array(np.random.default_rng(1).permutation(table.num_rows)))
    pq.write_table(shuffled, path)
    assert read_access_trace(path) == trace


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    steps=st.integers(0, 5),
    layers=st.integers(1, 3),
    heads=st.integers(1, 2),
    sink=st.integers(0, 4),
    window=st.integers(0, 6),
    extra=st.integers(0, 5),
    cut=st.integers(0, 5),
)
def test_round_trip_and_split_properties(
    tmp_path_factory, n, steps, layers, heads, sink, window, extra, cut
):
    meta = dataclasses.replace(
        META, context_tokens=n, steps=steps, layers=layers, kv_heads=heads,
        sink_tokens=sink, local_window=window,
    )  # fmt: skip
    trace = make_trace(meta, extra=extra)
    trace.validate()
    path = tmp_path_factory.mktemp("rt") / "t.parquet"
    write_access_trace(trace, path)
    assert read_access_trace(path) == trace
    cut = min(cut, steps)
    first, rest = trace.split(cut)
    first.validate()
    rest.validate()
    assert first.meta.steps + rest.meta.steps == steps
    assert rest.meta.context_tokens == n + cut
    for s in range(steps):
        part, s_local = (first, s) if s < cut else (rest, s - cut)
        for layer in range(layers):
            for head in range(heads):
                assert np.array_equal(
                    part.selection(s_local, layer, head), trace.selection(s, layer, head)
                )


# -- reading bad files -----------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "nope.parquet"
    with pytest.raises(AccessTraceError) as e:
        read_access_trace(path)
    assert "no such file" in one_line_error(str(path), e)


def test_corrupted_file(tmp_path):
    path = tmp_path / "bad.parquet"
    write_access_trace(make_trace(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(AccessTraceError) as e:
        read_access_trace(path)
    one_line_error(str(path), e)
    path.write_bytes(b"not parquet at all\nsecond line")
    with pytest.raises(AccessTraceError) as e:
        read_access_trace(path)
    one_line_error(str(path), e)


def rewrite(path, table):
    pq.write_table(table, path)
    with pytest.raises(AccessTraceError) as e:
        read_access_trace(path)
    return one_line_error(str(path), e)


def test_wrong_columns(tmp_path):
    path = tmp_path / "t.parquet"
    write_access_trace(make_trace(), path)
    table = pq.read_table(path)
    assert "'indices'" in rewrite(path, table.drop_columns(["indices"]))
    assert "'step'" in rewrite(path, table.drop_columns(["step"]))
    assert "unknown column" in rewrite(path, table.append_column("x", pa.array([1] * 12)))
    as_float = pa.ListArray.from_arrays(
        pa.array(make_trace().offsets.astype(np.int32)),
        pa.array(make_trace().indices.astype(np.float64)),
    )
    msg = rewrite(
        path, table.set_column(table.schema.get_field_index("indices"), "indices", as_float)
    )
    assert "'indices'" in msg
    assert "metadata" in rewrite(path, table.replace_schema_metadata({}))
    assert "rows" in rewrite(path, table.slice(0, 5))


def test_bad_meta(tmp_path):
    path = tmp_path / "t.parquet"
    write_access_trace(make_trace(), path)
    table = pq.read_table(path)
    doc = json.loads(table.schema.metadata[b"kvtier.access"])
    bad = {**doc, "colour": "red"}
    assert "colour" in rewrite(
        path, table.replace_schema_metadata({b"kvtier.access": json.dumps(bad)})
    )
    bad = {k: v for k, v in doc.items() if k != "layers"}
    assert "layers" in rewrite(
        path, table.replace_schema_metadata({b"kvtier.access": json.dumps(bad)})
    )
    bad = {**doc, "sparsity": 1.5}
    assert "sparsity" in rewrite(
        path, table.replace_schema_metadata({b"kvtier.access": json.dumps(bad)})
    )


def test_reader_validates_contents(tmp_path):
    trace = make_trace()
    trace.indices[trace.offsets[5]] = 12  # row 5 is step 1: ids 0..11 visible, 12 is not
    path = tmp_path / "t.parquet"
    write_access_trace(trace, path)
    with pytest.raises(AccessTraceError) as e:
        read_access_trace(path)
    msg = one_line_error(str(path), e)
    assert "row 5 (step 1, layer 0, head 1)" in msg


# -- validate() ------------------------------------------------------------------------------


def broken(mutate) -> str:
    trace = make_trace()
    mutate(trace)
    with pytest.raises(AccessTraceError) as e:
        trace.validate()
    return one_line_error("test:hand-made", e)


def test_validate_catches_unsorted_row():
    def swap(t):
        a, b = t.offsets[2], t.offsets[2] + 1
        t.indices[[a, b]] = t.indices[[b, a]]

    assert "row 2 (step 0, layer 1, head 0): ids not sorted" in broken(swap)


def test_validate_catches_duplicate_id():
    def dup(t):
        end = t.offsets[4]  # last id of row 3: the newest visible token
        t.indices[end - 1] = t.indices[end - 2]

    assert "row 3 (step 0, layer 1, head 1): duplicate id" in broken(dup)


def test_validate_catches_id_beyond_visible_context():
    def future(t):
        t.indices[t.offsets[1] - 1] = 11  # step 0 sees 0..10 (N = 10, entry 10 is step 0's token)

    msg = broken(future)
    assert "row 0 (step 0, layer 0, head 0): id 11 outside the visible entries 0..10" in msg

    def negative(t):
        t.indices[t.offsets[8]] = -1

    assert "row 8" in broken(negative)


def test_validate_catches_missing_sink_and_window():
    def drop(position):
        def mutate(t):
            r0, r1 = t.offsets[6], t.offsets[7]
            row = t.indices[r0:r1]
            keep = np.delete(row, position)
            t.indices = np.concatenate([t.indices[:r0], keep, t.indices[r1:]])
            t.offsets[7:] -= 1
            t.scores = None

        return mutate

    assert "row 6 (step 1, layer 1, head 0): sink" in broken(drop(0))  # sink id 0
    assert "row 6 (step 1, layer 1, head 0): sink" in broken(drop(-1))  # newest token


def test_validate_catches_wrong_offsets():
    assert "offsets has length" in broken(lambda t: setattr(t, "offsets", t.offsets[:-1]))

    def bad_end(t):
        t.offsets[-1] += 1

    assert "offsets must run from 0" in broken(bad_end)
    assert "scores has length" in broken(lambda t: setattr(t, "scores", t.scores[:-1]))


# -- accessors and stats ---------------------------------------------------------------------


def test_selection_and_activations():
    trace = make_trace()
    sel = trace.selection(2, 1, 0)
    r = (2 * 2 + 1) * 2 + 0
    assert np.array_equal(sel, trace.indices[trace.offsets[r] : trace.offsets[r + 1]])
    with pytest.raises(ValueError):
        sel[0] = 5  # read-only view
    x = trace.activations(1, 0)
    assert x.shape == (3, 13) and x.dtype == bool
    for s in range(3):
        assert np.array_equal(np.flatnonzero(x[s].toarray()), trace.selection(s, 1, 0))
    tail = trace.activations(1, 0, steps=slice(1, None))
    assert (tail != x[1:]).nnz == 0
    with pytest.raises(IndexError):
        trace.selection(3)
    with pytest.raises(IndexError):
        trace.activations(layer=2)


def test_selection_budget_and_forced_ids():
    assert selection_budget(4096, 0, 0.1) == 410  # 409.6 rounds up
    assert selection_budget(100, 5, 0.5) == 52  # 52.5: round half to even
    assert forced_ids(10, 2, 3).tolist() == [0, 1, 7, 8, 9]
    assert forced_ids(3, 2, 3).tolist() == [0, 1, 2]  # overlap counted once
    assert forced_ids(5, 0, 0).tolist() == []


def test_trace_stats_by_hand():
    # N = 4, 3 steps, one layer/head, no forced ids: step selections chosen by hand
    meta = dataclasses.replace(
        META, context_tokens=4, layers=1, kv_heads=1, steps=3, sink_tokens=0, local_window=0
    )
    rows = [[0, 1], [1, 2, 3], [0, 1, 2, 3, 5]]
    offsets = np.cumsum([0] + [len(r) for r in rows])
    trace = AccessTrace(meta, offsets, np.concatenate(rows))
    trace.validate()
    s = trace_stats(trace)
    assert s["selected_mean"] == pytest.approx(10 / 3)
    assert (s["selected_min"], s["selected_max"]) == (2, 5)
    assert s["overlap_jaccard"] == pytest.approx((1 / 4 + 3 / 5) / 2)
    assert s["unique_entries"] == 5 and s["unique_fraction"] == pytest.approx(5 / 7)
    # entries active in some but not all steps: 0, 2, 3, 5 (1 is always on)
    # P(0)=2/3, P(2)=P(3)=2/3, P(5)=1/3; pairs: (0,2) 1/3, (0,3) 1/3, (0,5) 1/3,
    # (2,3) 2/3, (2,5) 1/3, (3,5) 1/3
    assert s["coact_pairs"] == 6
    assert s["coact_mean"] == pytest.approx((5 * 1 / 3 + 2 / 3) / 6)
    assert s["coact_indep"] == pytest.approx((3 * 4 / 9 + 3 * 2 / 9) / 6)
