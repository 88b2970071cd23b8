"""Request-trace readers: hand-made files with known numbers, and one bad line each."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from traces.errors import TraceError
from traces.request_readers import (
    AZURE_LICENCE,
    TraceWarning,
    detect_format,
    read_azure,
    read_mooncake,
    read_trace,
    read_vidur,
)
from traces.requests import DATA_DIR

DATA = Path(__file__).parent / "data"
SHARED_AZURE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "azure"


def test_mooncake_keeps_full_block_ids_and_counts_reuse():
    t = read_mooncake(DATA / "mooncake_3.jsonl")
    t.validate()
    assert t.block_tokens == 512 and t.source == "mooncake:mooncake_3.jsonl"
    assert t.arrival_s.tolist() == [0.0, 0.5, 1.5]  # ms -> s
    assert t.input_tokens.tolist() == [1200, 2048, 1536]
    assert t.output_tokens.tolist() == [10, 1, 7]  # 0 clipped to 1
    assert t.clipped_outputs == 1
    # 1200 tokens = 2 full blocks + a partial one: the partial block's id 3 is dropped
    assert [t.block_hashes(i).tolist() for i in range(3)] == [[1, 2], [1, 2, 4, 5], [1, 2, 4]]
    s = t.stats()
    # blocks 2 + 4 + 3 = 9; seen before: request 1 has 1, 2; request 2 has 1, 2, 4
    assert (s.blocks, s.reused_blocks) == (9, 5)
    assert s.prefix_reuse == 5 / 9
    assert s.reused_token_fraction == 5 * 512 / (1200 + 2048 + 1536)
    assert s.rate_rps == 2 / 1.5
    assert t.column("session_id").tolist() == [-1] * 3 and t.column("turn").tolist() == [-1] * 3


def test_azure_seconds_after_first_request():
    t = read_azure(DATA / "azure_4.csv")
    np.testing.assert_allclose(t.arrival_s, [0.0, 0.052, 1.052, 2.0], atol=1e-9)
    assert t.input_tokens.tolist() == [4808, 3180, 100, 20]
    assert t.output_tokens.tolist() == [10, 8, 1, 3] and t.clipped_outputs == 1
    assert t.stats().prefix_reuse is None and t.stats().blocks == 0
    assert t.licence == ""  # not a file of the public dataset


def test_vidur_seconds_and_extra_columns_ignored():
    t = read_vidur(DATA / "vidur_3.csv")
    assert t.arrival_s.tolist() == [0.0, 0.25, 1.0]
    assert t.input_tokens.tolist() == [100, 200, 300]
    assert t.output_tokens.tolist() == [10, 20, 1]
    assert t.stats().rate_rps == 2.0


def test_detect_format(tmp_path: Path):
    assert detect_format(DATA / "mooncake_3.jsonl") == "mooncake"
    assert detect_format(DATA / "azure_4.csv") == "azure"
    assert detect_format(DATA / "vidur_3.csv") == "vidur"
    assert detect_format(tmp_path / "x.parquet") == "parquet"
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match=r"odd\.csv:1: cannot tell the trace format"):
        read_trace(odd)
    # an explicit format overrides the guess
    renamed = tmp_path / "trace.txt"
    renamed.write_text((DATA / "mooncake_3.jsonl").read_text())
    assert len(read_trace(renamed, "mooncake")) == 3


def test_gzip(tmp_path: Path):
    import gzip

    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write((DATA / "mooncake_3.jsonl").read_text())
    assert read_trace(path).stats().reused_blocks == 5


MOONCAKE_OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_OK = "2023-11-16 18:17:03.9799600,100,10\n"
VIDUR_HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


@pytest.mark.parametrize(
    "name, text, at, needle",
    [
        ("t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 5\n', 2, "bad JSON"),
        (
            "t.jsonl",
            MOONCAKE_OK + '{"timestamp": 1, "input_length": 5, "output_length": 1}\n',
            2,
            "missing key 'hash_ids'",
        ),
        (
            "t.jsonl",
            MOONCAKE_OK + '{"timestamp": 1, "input_length": -5, "output_length": 1, '
            '"hash_ids": []}\n',
            2,
            "input_length -5 is not an integer > 0",
        ),
        (
            "t.jsonl",
            '\n{"timestamp": 0, "input_length": 5, "output_length": -1, "hash_ids": [1]}\n',
            2,
            "output_length -1",
        ),
        (
            "t.jsonl",
            '{"timestamp": "x", "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
            1,
            "timestamp 'x'",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 5000, "output_length": 1, "hash_ids": [1]}\n',
            1,
            "1 hash_ids for input_length 5000, expected 10",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n',
            1,
            "hash_ids is not a list of integers",
        ),
        ("t.jsonl", "[1, 2]\n", 1, "expected a JSON object"),
        ("a.csv", AZURE_HEAD + AZURE_OK + "2023-11-16 25:17:03.1,100,10\n", 3, "TIMESTAMP"),
        ("a.csv", AZURE_HEAD + "2023-11-16 18:17:03.1,-100,10\n", 2, "ContextTokens '-100'"),
        ("a.csv", AZURE_HEAD + AZURE_OK + "2023-11-16 18:17:04.1,100\n", 3, "an empty field"),
        ("a.csv", AZURE_HEAD + AZURE_OK * 3 + "2023-11-16 18:17:04.1,1,2,3\n", 5, "fields"),
        ("a.csv", AZURE_HEAD + "2023-11-16 18:17:03.1,1.5,10\n", 2, "ContextTokens '1.5'"),
        ("a.csv", AZURE_HEAD + AZURE_OK + "\n" + AZURE_OK, 3, "an empty field"),
        ("a.csv", AZURE_HEAD + "2023-11-16 18:17:03.1,0,10\n", 2, "integer >= 1"),
        ("a.csv", AZURE_HEAD + "2023-11-16 18:17:03.1,10,x\n", 2, "GeneratedTokens 'x'"),
        ("v.csv", VIDUR_HEAD + "0.0,10,1\n-1.0,10,1\n", 3, "arrived_at '-1.0'"),
        ("v.csv", VIDUR_HEAD + "0.0,10,1\nnan,10,1\n", 3, "arrived_at 'nan'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, name, text, at, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as exc:
        read_trace(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{at}: "), msg
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.1,5\n", ":1: missing column"),
        ("a.csv", "", ":1: empty file"),
        ("a.csv", AZURE_HEAD, ": no requests"),
        ("t.jsonl", "\n\n", ": no requests"),
    ],
)
def test_malformed_file(tmp_path: Path, name, text, needle):
    (tmp_path / name).write_text(text)
    with pytest.raises(TraceError, match=needle):
        read_trace(tmp_path / name, "azure" if name.endswith(".csv") else "auto")


def test_trailing_blank_lines_are_fine(tmp_path: Path):
    path = tmp_path / "a.csv"
    path.write_text(AZURE_HEAD + AZURE_OK + AZURE_OK + "\n\n")
    assert len(read_azure(path)) == 2


def test_byte_order_mark_is_not_part_of_the_header(tmp_path: Path):
    path = tmp_path / "bom.csv"
    path.write_text("\ufeff" + AZURE_HEAD + AZURE_OK, encoding="utf-8")
    assert detect_format(path) == "azure" and len(read_trace(path)) == 1


def test_out_of_order_lines_are_sorted_with_a_warning(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
        '{"timestamp": 2000, "input_length": 512, "output_length": 2, "hash_ids": [7]}\n'
        '{"timestamp": 1000, "input_length": 1536, "output_length": 3, "hash_ids": [1, 2, 3]}\n'
    )
    with pytest.warns(TraceWarning, match=r"t\.jsonl:3: .*sorted 1 out-of-order"):
        t = read_trace(path)
    assert t.arrival_s.tolist() == [0.0, 1.0, 2.0]
    assert t.output_tokens.tolist() == [1, 3, 2]  # rows moved with their arrival
    assert [t.block_hashes(i).tolist() for i in range(3)] == [[1, 2], [1, 2, 3], [7]]
    assert t.reordered == 1 and t.column("request_id").tolist() == [0, 1, 2]


def test_excerpts_carry_licence():
    for kind in ("code", "conv"):
        t = read_trace(DATA_DIR / f"AzureLLMInferenceTrace_{kind}_head2000.csv")
        assert len(t) == 2000 and t.arrival_s[0] == 0.0
        assert t.licence == AZURE_LICENCE and "Splitwise" in t.attribution
    assert (DATA_DIR / "LICENSE-CC-BY-4.0").is_file()


@pytest.mark.skipif(not SHARED_AZURE.is_dir(), reason="../shared/traces/azure not present")
def test_full_azure_traces_read_whole_and_match_the_excerpt():
    """The whole public files (their read speed is a benchmark, not a test: ~0.1-0.3 s
    each here, vectorised)."""
    for kind, n in (("code", 8819), ("conv", 19366)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", TraceWarning)  # the public files are sorted
            full = read_trace(SHARED_AZURE / f"AzureLLMInferenceTrace_{kind}.csv")
        assert len(full) == n and full.licence == AZURE_LICENCE
        head = read_trace(DATA_DIR / f"AzureLLMInferenceTrace_{kind}_head2000.csv")
        assert head.table.equals(full.head(2000).table)
