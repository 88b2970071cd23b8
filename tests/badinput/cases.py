"""The bad-input corpus: one row per case, ``(id, argv, files, needle)``.

``argv`` is the ``kvtier`` command line (split on spaces), run in a fresh
directory holding ``files`` (name -> text, bytes, or a callable writing the
file at the path it is given).  Each case must end in exit status 2 with one
line on stderr naming ``needle`` (the key, flag or file at fault).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from hwprofiles import PROFILE_DIR
from kvtier.plan import PlanBuilder, write_plan

Files = dict[str, "str | bytes | Callable[[Path], None]"]
PROFILE = (PROFILE_DIR / "h100-2dimm-2ssd.yaml").read_text()


def profile(old: str, new: str) -> str:
    """The shipped two-SSD profile with one substitution (which must apply)."""
    assert old in PROFILE, old
    return PROFILE.replace(old, new, 1).replace("name: h100-2dimm-2ssd", "name: mine", 1)


SPARSE = """name: s
description: x
seed: 0
workload:
  model: Llama-3.1-8B
  context_tokens: {context}
  batch: {batch}
  sparsity: {sparsity}
  steps: {steps}
"""


def sparse(context="4096", batch="1", sparsity="0.1", steps="1") -> str:
    return SPARSE.format(context=context, batch=batch, sparsity=sparsity, steps=steps)


def serving(extra: str) -> str:
    return f"name: v\ndescription: x\nseed: 0\nworkload:\n  kind: serving\n{extra}"


def bomb() -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, k in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{k}: &{k} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


def plan(**row) -> Callable[[Path], None]:
    """A one-read plan with ``row``'s columns overridden (written as Parquet)."""

    def write(path: Path) -> None:
        b = PlanBuilder()
        b.read("ssd0", "dram0", 4096, 1, io_path="io_uring")
        t = b.table()
        for name, value in row.items():
            i = t.schema.get_field_index(name)
            t = t.set_column(i, name, pa.array([value], type=t.schema.field(i).type))
        write_plan(t, path)

    return write


def gz_broken(path: Path) -> None:
    path.write_bytes(
        gzip.compress(b"arrived_at,num_prefill_tokens,num_decode_tokens\n1,2,3\n")[:20]
    )


VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_T = "2023-11-16 18:17:03.9799600"
GEN = "trace gen-conversations --sessions 2 --out g.parquet"
CONV = "trace convert t.csv --out o.parquet"
VALIDATE = "real validate --hw h20-8ssd --no-fio"

CASES: list[tuple[str, str, Files, str]] = [
    # --- flag values: negative, zero, non-finite, fractional, not a number, unknown choice
    *[
        (f"sim-steps-{v}", f"sim --steps {v}", {}, "--steps")
        for v in ("0", "-1", "1.5", "nan", "inf", "x")
    ],
    *[(f"sim-seed-{v}", f"sim --seed {v}", {}, "--seed") for v in ("-1", "1.5", "x", "inf")],
    *[
        (f"sweep-jobs-{v}", f"sweep --factor ssds=1 --jobs {v}", {}, "--jobs")
        for v in ("0", "-2", "1.5")
    ],
    *[
        (f"sweep-steps-{v}", f"sweep --factor ssds=1 --steps {v}", {}, "--steps")
        for v in ("0", "nan")
    ],
    *[
        (f"gen-sessions-{v}", f"{GEN} --sessions {v}", {}, "--sessions")
        for v in ("0", "-1", "1.5", "nan")
    ],
    *[(f"gen-rate-{v}", f"{GEN} --rate {v}", {}, "--rate") for v in ("0", "-1", "inf", "nan")],
    *[(f"gen-think-{v}", f"{GEN} --think-s {v}", {}, "--think-s") for v in ("-1", "nan", "inf")],
    ("gen-seed-neg", f"{GEN} --seed -1", {}, "--seed"),
    *[
        (f"gen-block-{v}", f"{GEN} --block-tokens {v}", {}, "--block-tokens")
        for v in ("0", "-5", "2.5")
    ],
    ("gen-system-neg", f"{GEN} --system-prompt-tokens -1", {}, "--system-prompt-tokens"),
    *[
        (f"conv-scale-{v}", f"{CONV} --scale-rate {v}", {}, "--scale-rate")
        for v in ("0", "-1", "nan")
    ],
    ("conv-window-nan", f"{CONV} --window nan 5", {}, "--window"),
    ("conv-window-neg", f"{CONV} --window -1 5", {}, "--window"),
    ("conv-window-reversed", f"{CONV} --window 5 1", {"t.csv": VIDUR + "1,2,3\n"}, "--window"),
    ("stats-block-0", "trace stats t.csv --block-tokens 0", {}, "--block-tokens"),
    ("stats-format", "trace stats t.csv --format bogus", {}, "--format"),
    ("profiles-action", "profiles bogus", {}, "action"),
    ("models-action", "models bogus", {}, "action"),
    ("command", "bogus", {}, "bogus"),
    ("sim-unknown-flag", "sim --bogus", {}, "--bogus"),
    ("sweep-no-factor", "sweep", {}, "--factor"),
    ("conv-no-out", "trace convert t.csv", {}, "--out"),
    # --- real validate (parsed before any I/O)
    *[
        (f"validate-{flag[2:]}-{v}", f"{VALIDATE} {flag} {v}", {}, flag)
        for flag, values in (
            ("--steps", ("0", "1.5")),
            ("--n", ("0", "-1")),
            ("--step-s", ("-1", "0", "nan")),
            ("--scale", ("0", "nan", "2")),
            ("--seed", ("-1",)),
            ("--regimes", ("bogus", ",")),
        )
        for v in values
    ],
    ("replay-seed-neg", "real replay --plan p --targets-dir t --out o --seed -1", {}, "--seed"),
    ("replay-qd-zero", "real replay --plan p --targets-dir t --out o --qd 0", {}, "--qd"),
    ("replay-engine", "real replay --plan p --targets-dir t --out o --engine x", {}, "--engine"),
    ("validate-engine", f"{VALIDATE} --engine bogus", {}, "--engine"),
    # --- sweep factors, typed per factor
    ("factor-ssds-neg", "sweep --factor ssds --values -1", {}, "ssds"),
    ("factor-batch-frac", "sweep --factor batch --values 1.5", {}, "batch"),
    ("factor-batch-zero", "sweep --factor batch=0", {}, "batch"),
    ("factor-context-zero", "sweep --factor context_tokens --values 0", {}, "context_tokens"),
    ("factor-sparsity-big", "sweep --factor sparsity=2", {}, "sparsity"),
    ("factor-gds-word", "sweep --scenario tiers --factor gds=maybe", {}, "gds"),
    ("factor-unknown", "sweep --factor bogus=1,2", {}, "bogus"),
    ("factor-twice", "sweep --factor ssds=1 --factor ssds=2", {}, "ssds"),
    ("factor-values-two", "sweep --factor ssds --factor batch --values 1", {}, "--values"),
    ("factor-no-values", "sweep --factor ssds", {}, "ssds"),
    ("factor-hw-unknown", "sweep --factor hw=nope", {}, "nope"),
    ("factor-steps-nan", "sweep --factor steps=.nan", {}, "steps"),
    # --- profile YAML (read by `profiles show FILE`, `sim --hw FILE`, `sweep --hw FILE`)
    ("yaml-latin1", "profiles show p.yaml", {"p.yaml": PROFILE.encode() + b"# caf\xe9\n"}, "UTF-8"),
    ("yaml-utf16", "profiles show p.yaml", {"p.yaml": PROFILE.encode("utf-16")}, "UTF-16"),
    ("yaml-binary", "profiles show p.yaml", {"p.yaml": b"\x00\x01\x02\x03gpu"}, "p.yaml"),
    ("yaml-bomb", "profiles show p.yaml", {"p.yaml": bomb()}, "alias"),
    ("yaml-self-alias", "profiles show p.yaml", {"p.yaml": "a: &x [1, *x]\n"}, "alias"),
    ("yaml-deep", "profiles show p.yaml", {"p.yaml": "a: " + "[" * 3000 + "]" * 3000}, "p.yaml"),
    ("yaml-syntax", "profiles show p.yaml", {"p.yaml": "gpu: [1,\n"}, "invalid YAML"),
    ("yaml-not-mapping", "profiles show p.yaml", {"p.yaml": "- 1\n- 2\n"}, "mapping"),
    ("yaml-missing", "profiles show nope.yaml", {}, "nope.yaml"),
    ("yaml-is-dir", "profiles show d.yaml", {"d.yaml/x": ""}, "d.yaml"),
    (
        "prof-unknown-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  count: 1 ", "  cuont: 1 ")},
        "gpu.cuont",
    ),
    (
        "prof-zero-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: 0")},
        "read_gbps",
    ),
    (
        "prof-neg-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: -1")},
        "read_gbps",
    ),
    (
        "prof-nan-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: .nan")},
        "read_gbps",
    ),
    (
        "prof-inf-iops",
        "profiles show p.yaml",
        {"p.yaml": profile("read_iops: 1850000", "read_iops: .inf")},
        "read_iops",
    ),
    (
        "prof-str-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: fast")},
        "read_gbps",
    ),
    (
        "prof-bool-cores",
        "profiles show p.yaml",
        {"p.yaml": profile("cores: 16", "cores: true")},
        "cpu.cores",
    ),
    (
        "prof-frac-count",
        "profiles show p.yaml",
        {"p.yaml": profile("count: 2 ", "count: 2.5 ")},
        "count",
    ),
    (
        "prof-neg-latency",
        "profiles show p.yaml",
        {"p.yaml": profile("read_latency_us: 60", "read_latency_us: -60")},
        "read_latency_us",
    ),
    (
        "prof-tiny-ssd",
        "profiles show p.yaml",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.000001")},
        "capacity_gib",
    ),
    (
        "sim-ssd-below-kv",
        "sim --hw p.yaml",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.001")},
        "exceeds 2 SSD(s) of mine (0.002 GiB)",
    ),
    (
        "prof-zero-dram",
        "profiles show p.yaml",
        {"p.yaml": profile("capacity_gib: 64,", "capacity_gib: 0,")},
        "capacity_gib",
    ),
    (
        "prof-efficiency",
        "profiles show p.yaml",
        {"p.yaml": profile("pcie: 0.94", "pcie: 1.5")},
        "efficiency.pcie",
    ),
    (
        "prof-link-kind",
        "profiles show p.yaml",
        {"p.yaml": profile("kind: membus, duplex", "kind: bogus, duplex")},
        "kind",
    ),
    (
        "prof-link-node",
        "profiles show p.yaml",
        {"p.yaml": profile("between: [ssd0, sw0]", "between: [ssd9, sw0]")},
        "between",
    ),
    (
        "prof-duplicate-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  cores: 16", "  cores: 16\n  cores: 8")},
        "cores",
    ),
    (
        "prof-missing-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  bf16_tflops: 756", "")},
        "bf16_tflops",
    ),
    ("sim-hw-latin1", "sim --hw p.yaml", {"p.yaml": b"name: caf\xe9\n"}, "p.yaml"),
    (
        "sweep-hw-tiny",
        "sweep --hw p.yaml --factor ssds=1",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.001")},
        "exceeds 1 SSD(s) of mine (0.001 GiB)",
    ),
    # --- scenario YAML
    ("scen-latin1", "sim --scenario s.yaml", {"s.yaml": sparse().encode() + b"# \xe9\n"}, "UTF-8"),
    ("scen-bomb", "sim --scenario s.yaml", {"s.yaml": bomb()}, "alias"),
    ("scen-utf16", "sim --scenario s.yaml", {"s.yaml": sparse().encode("utf-16")}, "UTF-16"),
    ("scen-batch-neg", "sim --scenario s.yaml", {"s.yaml": sparse(batch="-1")}, "batch"),
    ("scen-batch-frac", "sim --scenario s.yaml", {"s.yaml": sparse(batch="1.5")}, "batch"),
    ("scen-sparsity", "sim --scenario s.yaml", {"s.yaml": sparse(sparsity="2")}, "sparsity"),
    ("scen-sparsity-nan", "sim --scenario s.yaml", {"s.yaml": sparse(sparsity=".nan")}, "sparsity"),
    ("scen-steps-frac", "sim --scenario s.yaml", {"s.yaml": sparse(steps="1.5")}, "steps"),
    (
        "scen-context-str",
        "sim --scenario s.yaml",
        {"s.yaml": sparse(context="1e12")},
        "context_tokens",
    ),
    (
        "scen-context-huge",
        "sim --scenario s.yaml --hw h100-2dimm-2ssd",
        {"s.yaml": sparse(context="1.0e+12")},
        "context_tokens",
    ),
    (
        "scen-context-inf",
        "sim --scenario s.yaml",
        {"s.yaml": sparse(context=".inf")},
        "context_tokens",
    ),
    (
        "scen-unknown-key",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  bogus: 1\n"},
        "workload.bogus",
    ),
    (
        "scen-unknown-kind",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  kind: bogus\n"},
        "kind",
    ),
    (
        "scen-variant-key",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "variants:\n  - {name: a, bogus: 1}\n"},
        "bogus",
    ),
    (
        "scen-model",
        "sim --scenario s.yaml",
        {"s.yaml": sparse().replace("Llama-3.1-8B", "Nope-1B")},
        "Nope-1B",
    ),
    (
        "serve-doc-huge",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  trace: long_doc\n  context_tokens: 1.0e+12\n  docs: 1\n")},
        "context_tokens",
    ),
    (
        "serve-ssd-gib",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  design: paged-ssd\n  design_params: {ssd_gib: 100000.0}\n")},
        "ssd_gib",
    ),
    (
        "serve-cpu-gib",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  design: paged-cpu-ssd\n  design_params: {cpu_gib: 5000.0}\n")},
        "cpu_gib",
    ),
    ("serve-design", "sim --scenario v.yaml", {"v.yaml": serving("  design: bogus\n")}, "design"),
    ("serve-think", "sim --scenario v.yaml", {"v.yaml": serving("  think_s: -1\n")}, "think_s"),
    (
        "serve-steps",
        "sim --scenario v.yaml --steps 2",
        {"v.yaml": serving("  design: gpu-only\n")},
        "--steps",
    ),
    (
        "serve-elastic-layout",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  instances:\n    - {name: w, gpu: gpu1, role: worker, lend_share: 0.5,"
                " elastic: {layout: diagonal}}\n"
            )
        },  # fmt: skip
        "elastic.layout",
    ),
    (
        "serve-elastic-n-i",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  instances:\n    - {name: w, gpu: gpu1, role: worker, lend_share: 0.5,"
                " elastic: {n_i: all}}\n"
            )
        },  # fmt: skip
        "elastic.n_i",
    ),
    (
        "serve-cache-replies",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  instances:\n    - {name: m, gpu: gpu0, cache_replies: yes}\n")},
        "cache_replies",
    ),
    (
        "serve-gpu-util",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  gpu_memory_utilization: 0\n")},
        "gpu_memory_utilization",
    ),
    (
        "sweep-context-huge",
        "sweep --scenario s.yaml --hw h100-2dimm-2ssd --factor context_tokens=4096,1000000000000",
        {"s.yaml": sparse()},
        "context_tokens",
    ),
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
]
