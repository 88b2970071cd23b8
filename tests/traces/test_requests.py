"""The internal request table: schema, validation, slicing, scaling, stats, Parquet, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvtier.cli.main import main
from traces.errors import TraceError
from traces.requests import META_KEY, SCHEMA, RequestTrace, build_table, read_parquet

DATA = Path(__file__).parent / "data"


def small(block_tokens: int = 4) -> RequestTrace:
    """Four requests, 4-token blocks; hashes chosen so reuse is easy to count."""
    table = build_table(
        np.array([0.0, 1.0, 2.0, 4.0]),
        np.array([8, 12, 5, 17]),
        np.array([1, 2, 3, 4]),
        session_id=np.array([0, 0, -1, 1]),
        turn=np.array([0, 1, -1, 0]),
        hash_offsets=np.array([0, 2, 5, 6, 10]),
        hash_values=np.array([10, 11, 10, 11, 12, 99, 10, 11, 12, 13]),
    )
    return RequestTrace(table, block_tokens=block_tokens, source="test:small")


def test_schema_and_accessors():
    t = small()
    t.validate()
    assert t.table.schema == SCHEMA and len(t) == 4
    offsets, values = t.hashes()
    assert offsets.tolist() == [0, 2, 5, 6, 10]
    assert t.block_hashes(1).tolist() == [10, 11, 12]
    assert t.to_pandas().columns.tolist() == SCHEMA.names


def test_stats_by_hand():
    s = small().stats()
    assert s.requests == 4 and s.duration_s == 4.0 and s.rate_rps == 3 / 4
    # blocks 2 + 3 + 1 + 4 = 10; reused: request 1 has 10, 11; request 3 has 10, 11, 12
    assert (s.blocks, s.reused_blocks, s.prefix_reuse) == (10, 5, 0.5)
    assert s.reused_token_fraction == 5 * 4 / (8 + 12 + 5 + 17)
    assert s.sessions == 2 and s.turns_mean == 1.5 and s.turns_max == 2
    assert s.input_tokens["mean"] == 10.5 and s.input_tokens["max"] == 17
    assert s.output_tokens["p50"] == 2.5  # numpy's linear interpolation of 1, 2, 3, 4


def test_percentiles_by_hand():
    n = 101
    t = RequestTrace(
        build_table(np.arange(n, dtype=float), np.arange(1, n + 1), np.ones(n)), 16, "t"
    )
    s = t.stats()
    assert (s.input_tokens["p50"], s.input_tokens["p90"], s.input_tokens["p99"]) == (51, 91, 100)
    assert s.prefix_reuse is None and s.rate_rps == 1.0


def test_repeat_within_one_request_is_not_reuse():
    t = RequestTrace(
        build_table(
            np.zeros(2),
            np.array([8, 8]),
            np.ones(2),
            hash_offsets=np.array([0, 2, 4]),
            hash_values=np.array([5, 5, 5, 6]),
        ),
        4,
        "t",
    )
    assert t.stats().reused_blocks == 1  # only request 1's 5: request 0 saw it first


@pytest.mark.parametrize(
    "column, values, needle",
    [
        ("request_id", [0, 1, 3, 2], "request 2: request_id"),
        ("arrival_s", [0.0, 2.0, 1.0, 4.0], "request 2: arrival_s earlier"),
        ("arrival_s", [0.0, 1.0, math.nan, 4.0], "request 2: arrival_s is not a finite"),
        ("arrival_s", [-1.0, 1.0, 2.0, 4.0], "request 0: arrival_s"),
        ("input_tokens", [8, 12, 0, 17], "request 2: input_tokens <= 0"),
        ("input_tokens", [8, 11, 5, 17], "request 1: more block_hashes than full blocks"),
        ("output_tokens", [1, 2, 0, 4], "request 2: output_tokens < 1"),
        ("session_id", [0, -2, -1, 1], "request 1: session_id"),
    ],
)
def test_validate_names_the_request(column, values, needle):
    t = small()
    i = t.table.schema.get_field_index(column)
    bad = t.table.set_column(i, column, pa.array(values, SCHEMA.field(column).type))
    with pytest.raises(TraceError, match=needle):
        RequestTrace(bad, 4, "test:small").validate()


def test_window_shifts_and_renumbers():
    w = small().window(1.0, 4.0)
    assert w.arrival_s.tolist() == [0.0, 1.0]  # requests at 1 and 2; 4 is outside [1, 4)
    assert w.column("request_id").tolist() == [0, 1]
    assert w.input_tokens.tolist() == [12, 5]
    assert w.block_hashes(0).tolist() == [10, 11, 12]
    assert w.column("turn").tolist() == [1, -1]  # a cut session keeps its turn numbers
    w.validate()
    with pytest.raises(TraceError, match="t0 < t1"):
        small().window(2, 2)


def test_scale_rate_and_with_rate():
    t = small()
    fast = t.scale_rate(2.0)
    assert fast.arrival_s.tolist() == [0.0, 0.5, 1.0, 2.0]
    assert fast.stats().rate_rps == 2 * t.stats().rate_rps
    assert fast.input_tokens.tolist() == t.input_tokens.tolist()
    assert t.with_rate(3.0).stats().rate_rps == pytest.approx(3.0)
    assert t.head(2).input_tokens.tolist() == [8, 12]
    with pytest.raises(TraceError, match="positive"):
        t.scale_rate(0)


def test_coarser_blocks_keep_every_kth_id():
    t = small().with_block_tokens(8)  # 2 blocks of 4 tokens -> 1 block of 8
    assert t.block_tokens == 8
    assert [t.block_hashes(i).tolist() for i in range(4)] == [[11], [11], [], [11, 13]]
    t.validate()
    assert t.stats().reused_blocks == 2
    with pytest.raises(TraceError, match="not a multiple"):
        small().with_block_tokens(6)


def test_parquet_round_trip_keeps_metadata(tmp_path: Path):
    t = RequestTrace(
        small().table, 4, "test:small", "CC-BY-4.0", "someone", clipped_outputs=2, reordered=1
    )
    path = tmp_path / "r.parquet"
    t.write_parquet(path)
    doc = json.loads(pq.read_schema(path).metadata[META_KEY])
    assert doc["block_tokens"] == 4 and doc["licence"] == "CC-BY-4.0"
    back = read_parquet(path)
    assert back.table.equals(t.table) and back.meta() == t.meta()


def test_parquet_rejects_other_tables(tmp_path: Path):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1]}), plain)
    with pytest.raises(TraceError, match="not a request trace"):
        read_parquet(plain)
    bad = tmp_path / "bad.parquet"
    doc = {"format_version": 1, **small().meta(), "block_tokens": 0}
    pq.write_table(small().table.replace_schema_metadata({META_KEY: json.dumps(doc)}), bad)
    with pytest.raises(TraceError, match="block_tokens must be a positive"):
        read_parquet(bad)
    with pytest.raises(TraceError, match="no such file"):
        read_parquet(tmp_path / "missing.parquet")


# --- CLI ------------------------------------------------------------------------


def test_cli_stats_prints_reuse(capsys):
    assert main(["trace", "stats", str(DATA / "mooncake_3.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "0.5556" in out  # 5 of 9 blocks
    assert "1.333 req/s" in out


def test_cli_convert_window_and_scale(tmp_path: Path, capsys):
    out = tmp_path / "sub" / "w.parquet"
    argv = ["trace", "convert", str(DATA / "azure_4.csv"), "--out", str(out)]
    assert main([*argv, "--window", "1", "3", "--scale-rate", "2"]) == 0
    t = read_parquet(out)
    np.testing.assert_allclose(t.arrival_s, [0.026, 0.5])  # (1.052 - 1) / 2, (2 - 1) / 2
    assert t.source == "azure:azure_4.csv" and f"wrote {out}" in capsys.readouterr().out


def test_cli_gen_conversations_is_seeded(tmp_path: Path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for path in (a, b):
        argv = ["trace", "gen-conversations", "--sessions", "20", "--rate", "2"]
        assert main([*argv, "--seed", "5", "--out", str(path)]) == 0
    assert read_parquet(a).table.equals(read_parquet(b).table)
    assert read_parquet(a).stats().sessions == 20


def test_cli_gen_conversations_from_trace_arrivals(tmp_path: Path):
    out = tmp_path / "c.parquet"
    argv = ["trace", "gen-conversations", "--sessions", "3", "--out", str(out)]
    assert main([*argv, "--arrivals-from", str(DATA / "vidur_3.csv")]) == 0
    t = read_parquet(out)
    first_turns = t.arrival_s[t.column("turn") == 0]
    assert first_turns.tolist() == [0.0, 0.25, 1.0]


def test_cli_errors_are_one_line(tmp_path: Path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    assert main(["trace", "stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"kvtier: error: {bad}:1: missing key 'input_length'\n"
    argv = ["trace", "gen-conversations", "--sessions", "9", "--out", str(tmp_path / "x")]
    assert main([*argv, "--arrivals-from", str(DATA / "vidur_3.csv")]) == 2
    assert "fewer than --sessions 9" in capsys.readouterr().err


def test_cli_warns_on_sorting(tmp_path: Path, capsys):
    path = tmp_path / "v.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1.0,5,1\n0.5,5,1\n")
    assert main(["trace", "stats", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"kvtier: warning: {path}:3: ") and err.count("\n") == 1
