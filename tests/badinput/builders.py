"""Helpers of the bad-input corpus: the files its cases are run with.

``Files`` maps a name to text, bytes, or a callable writing the file at the
path it is given; the helpers below build such files (a profile with one
substitution, a scenario, a one-read plan with a column overridden...).
The cases themselves are :mod:`tests.badinput.cases`.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from hwprofiles import PROFILE_DIR
from kvtier.contracts.plan import PlanBuilder, write_plan

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


def kvdrive(extra: str) -> str:
    """A kvdrive scenario with ``extra`` (indented lines) under its workload."""
    return f"name: k\ndescription: x\nseed: 0\nworkload:\n  kind: kvdrive\n{extra}"


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


def empty_plan(path: Path) -> None:
    """A plan with the schema and no rows (written as Parquet)."""
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4096, 1, io_path="io_uring")
    write_plan(b.table().slice(0, 0), path)


def swarm(extra: str) -> str:
    """A swarm scenario (the kind's defaults) with ``extra`` (indented lines) under its workload."""
    return f"name: w\ndescription: x\nseed: 0\nworkload:\n  kind: swarm\n{extra}"


PRICE_INF = """ssd:
  Samsung PM9A3 3.84 TB U.2: {usd: .inf, source: x, date: 2026-01-01}
"""
PLAN_CMD = (
    "plan --base h100-2dimm-2ssd --trace long_doc --context-tokens 4096 --no-prune "
    "--designs lmcache --ssd-models PM9A3 --ssd-counts 1 --dram-modules 1"
)


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
