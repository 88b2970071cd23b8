"""Bad-input cases: request traces, transfer plans, and outputs checked before the work."""

from __future__ import annotations

from tests.badinput.builders import AZ_T, AZURE, GEN, VIDUR, Files, empty_plan, gz_broken, plan

DATA: list[tuple[str, str, Files, str]] = [
    # --- request traces
    (
        "trace-binary-csv",
        "trace stats t.csv",
        {"t.csv": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"},
        "t.csv",
    ),
    (
        "trace-utf16-csv",
        "trace stats t.csv --format vidur",
        {"t.csv": (VIDUR + "1,2,3\n").encode("utf-16")},
        "t.csv",
    ),
    (
        "trace-latin1-csv",
        "trace stats t.csv --format vidur",
        {"t.csv": (VIDUR + "1,2,3\n").encode() + b"\xe9,1,1\n"},
        "t.csv",
    ),
    ("trace-broken-gz", "trace stats t.csv.gz --format vidur", {"t.csv.gz": gz_broken}, "t.csv.gz"),
    (
        "trace-not-gz",
        "trace stats t.csv.gz --format vidur",
        {"t.csv.gz": VIDUR + "1,2,3\n"},
        "t.csv.gz",
    ),
    ("trace-vidur-nan", "trace stats t.csv", {"t.csv": VIDUR + "nan,2,3\n"}, "arrived_at"),
    ("trace-vidur-inf", "trace stats t.csv", {"t.csv": VIDUR + "inf,2,3\n"}, "arrived_at"),
    (
        "trace-vidur-neg-len",
        "trace stats t.csv",
        {"t.csv": VIDUR + "1,-2,3\n"},
        "num_prefill_tokens",
    ),
    (
        "trace-vidur-frac-len",
        "trace stats t.csv",
        {"t.csv": VIDUR + "1,2.5,3\n"},
        "num_prefill_tokens",
    ),
    ("trace-azure-nan", "trace stats t.csv", {"t.csv": AZURE + f"{AZ_T},nan,3\n"}, "ContextTokens"),
    ("trace-azure-time", "trace stats t.csv", {"t.csv": AZURE + "yesterday,2,3\n"}, "TIMESTAMP"),
    (
        "trace-missing-col",
        "trace stats t.csv --format vidur",
        {"t.csv": "arrived_at,x\n1,2\n"},
        "num_prefill_tokens",
    ),
    ("trace-empty", "trace stats t.csv --format vidur", {"t.csv": ""}, "t.csv"),
    ("trace-mooncake-json", "trace stats t.jsonl", {"t.jsonl": "{bad\n"}, "t.jsonl"),
    (
        "trace-mooncake-nan",
        "trace stats t.jsonl",
        {"t.jsonl": '{"timestamp": NaN, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'},
        "timestamp",
    ),
    (
        "trace-mooncake-neg",
        "trace stats t.jsonl",
        {"t.jsonl": '{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}\n'},
        "input_length",
    ),
    ("trace-missing-file", "trace stats none.csv", {}, "none.csv"),
    (
        "trace-parquet-junk",
        "trace stats t.parquet",
        {"t.parquet": b"not parquet at all"},
        "t.parquet",
    ),
    (
        "trace-arrivals-from",
        f"{GEN} --arrivals-from a.csv",
        {"a.csv": VIDUR + "nan,1,1\n"},
        "a.csv",
    ),
    # --- a request no candidate's GPU KV cache holds (it would be rejected, unseen in the
    # P99s): refused before simulating; one H20 holds 585,216 tokens of Llama-3.1-8B's KV
    (
        "plan-request-over-kv",
        "plan --base h20-8ssd,rtx4090-ws --trace t.csv --gpus 1",
        {"t.csv": VIDUR + "0,1000,1\n1,900000,1\n2,1000,1\n"},
        "request 1 holds 900,001 tokens of KV (prompt + output), more than any candidate's "
        "GPU KV cache (the largest: 585,216 tokens, NVIDIA H20 on h20-8ssd",
    ),
    # --- transfer plans
    (
        "plan-release-inf",
        "sim --plan p.parquet",
        {"p.parquet": plan(release_s=float("inf"))},
        "release_s",
    ),
    (
        "plan-release-nan",
        "sim --plan p.parquet",
        {"p.parquet": plan(release_s=float("nan"))},
        "release_s",
    ),
    ("plan-release-neg", "sim --plan p.parquet", {"p.parquet": plan(release_s=-1.0)}, "release_s"),
    ("plan-flops-nan", "sim --plan p.parquet", {"p.parquet": plan(flops=float("nan"))}, "flops"),
    ("plan-bytes-zero", "sim --plan p.parquet", {"p.parquet": plan(bytes=0)}, "bytes"),
    ("plan-node", "sim --plan p.parquet", {"p.parquet": plan(src="ssd9")}, "ssd9"),
    ("plan-junk", "sim --plan p.parquet", {"p.parquet": b"PAR1 junk"}, "p.parquet"),
    ("plan-missing", "sim --plan none.parquet", {}, "none.parquet"),
    # --- outputs, checked before the work
    ("out-file-sim", "sim --steps 1 --out f", {"f": "x"}, "--out"),
    ("out-devnull-sim", "sim --steps 1 --out /dev/null/x", {}, "/dev/null"),
    ("out-under-file-sim", "sim --steps 1 --out f/sub", {"f": "x"}, "--out"),
    ("out-file-sweep", "sweep --factor ssds=1 --out f", {"f": "x"}, "--out"),
    ("out-devnull-sweep", "sweep --factor ssds=1 --out /dev/null/x", {}, "/dev/null"),
    (
        "out-dir-convert",
        "trace convert t.csv --out d",
        {"t.csv": VIDUR + "1,2,3\n", "d/x": ""},
        "--out",
    ),
    (
        "out-devnull-gen",
        "trace gen-conversations --sessions 2 --out /dev/null/x.parquet",
        {},
        "/dev/null",
    ),
    (
        "out-under-file-gen",
        "trace gen-conversations --sessions 2 --out f/x.parquet",
        {"f": "x"},
        "--out",
    ),
    ("out-file-plan", "sim --plan p.parquet --out f", {"p.parquet": plan(), "f": "x"}, "--out"),
    # --- a plan with no rows: refused before fio or the replayer starts
    ("plan-empty-sim", "sim --plan e.parquet", {"e.parquet": empty_plan}, "e.parquet: the plan"),
    (
        "plan-empty-replay",
        "real replay --plan e.parquet --targets-dir t --out o",
        {"e.parquet": empty_plan, "t/ssd0/x": ""},
        "e.parquet: the plan has 0 rows",
    ),
    (
        "plan-empty-iolog",
        "real iolog --plan e.parquet --target ssd0=t --out o",
        {"e.parquet": empty_plan, "t": "x"},
        "e.parquet: the plan has 0 rows",
    ),
]
