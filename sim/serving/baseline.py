"""The serving engine's physics, saved once and compared after a change.

    python -m sim.serving.baseline save DIR [--designs D,...] [--quick]
    python -m sim.serving.baseline cmp DIR

A speed change of the serving engine must leave every request's TTFT, every
op and every device record as they were (issue 13: "the same TTFTs as
today").  ``save`` runs each design (all registered ones by default) on the
benchmark's Mooncake-shaped trace (:mod:`sim.serving.bench`; as it was
before its output lengths were fitted, ``fitted_outputs=False``, so that
baselines saved before that fit still compare) in
:data:`CONFIGS` -- 16-token blocks, 256-token blocks, and small tiers that
evict and demote all the time, with the plan kept -- and writes each run's
request, op and device tables (and its plan, where kept) as Parquet files
under ``DIR``.  ``cmp`` runs the same again on the working tree and compares
every column exactly (a float NaN equals NaN, nothing else is forgiven);
it prints one line per run and ``N of M columns differ``, and exits 1 when
any does.  ``--quick`` uses a tenth of the requests.

The configurations are chosen to exercise every placement path: a tier that
is filling, one that is full and evicts (dropped or demoted victims), spills
between pool devices, write-through copies, waiting stores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sim.serving.bench import build, mooncake_requests
from sim.serving.designs import DESIGNS


@dataclass(frozen=True)
class Config:
    """One run's shape: KV block (tokens), requests, offload budgets (GiB), plan kept."""

    name: str
    block: int
    requests: int
    tiers_gib: tuple[float, float]
    keep_plan: bool = False


SEED004 = (18.63, 186.26)  # seed 004's 20 GB and 200 GB offload budgets
CONFIGS = (
    Config("b16", 16, 300, SEED004),
    Config("b256", 256, 1000, SEED004),
    Config("b16-small", 16, 200, (2.0, 8.0), keep_plan=True),
)
TABLES = ("requests", "ops", "devices", "plan")


def run_tables(design: str, c: Config, scale: float = 1.0) -> dict[str, pa.Table]:
    """The tables of ``design`` run as ``c`` (``scale``: share of the requests)."""
    n = max(1, math.ceil(c.requests * scale))
    reqs = mooncake_requests(n, c.block, fitted_outputs=False)  # the trace saved runs hold
    engine = build(reqs, design, c.block, "h100-2dimm-2ssd", "Llama-3.1-8B", c.tiers_gib,
                   c.keep_plan)  # fmt: skip
    r = engine.run()
    out = {"requests": r.requests, "ops": r.ops, "devices": r.devices}
    if c.keep_plan:
        out["plan"] = r.plan
    return {k: v for k, v in out.items() if v is not None}


def differing(ref: pa.Table, new: pa.Table) -> list[str]:
    """The columns of ``ref`` that ``new`` lacks or holds otherwise (NaN equals NaN)."""
    bad = []
    for name in ref.column_names:
        if name not in new.column_names or not _same(ref.column(name), new.column(name)):
            bad.append(name)
    return bad


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    if len(a) != len(b) or a.type != b.type:
        return False
    for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True):
        if x != y and not (isinstance(x, float) and isinstance(y, float) and x != x and y != y):
            return False
    return True


def save(where: Path, designs: list[str], scale: float) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / "baseline.json").write_text(json.dumps({"designs": designs, "scale": scale}))
    for d in designs:
        for c in CONFIGS:
            for name, table in run_tables(d, c, scale).items():
                pq.write_table(table, where / f"{d}__{c.name}__{name}.parquet")
            print(f"saved {d} {c.name}", flush=True)


def compare(where: Path) -> int:
    """Run again what ``where`` holds; 1 when a column differs."""
    meta = json.loads((where / "baseline.json").read_text())
    total = bad_total = 0
    for d in meta["designs"]:
        for c in CONFIGS:
            new = run_tables(d, c, meta["scale"])
            bad = []
            for name in TABLES:
                path = where / f"{d}__{c.name}__{name}.parquet"
                if not path.exists():
                    continue
                ref = pq.read_table(path)
                total += ref.num_columns
                bad += [f"{name}.{col}" for col in differing(ref, new.get(name, pa.table({})))]
            bad_total += len(bad)
            print(f"{d} {c.name}: " + ("same" if not bad else "DIFFER " + ", ".join(bad)))
    print(f"{bad_total} of {total} columns differ")
    return 1 if bad_total else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.serving.baseline", description=__doc__.split("\n")[0]
    )
    ap.add_argument("mode", choices=("save", "cmp"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--designs", default="all", help="comma-separated designs (save), or all")
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests (save)")
    a = ap.parse_args(argv)
    if a.mode == "cmp":
        if not (a.dir / "baseline.json").is_file():
            print(f"baseline: {a.dir}: no baseline.json (run save first)", file=sys.stderr)
            return 2
        return compare(a.dir)
    names = DESIGNS.names()
    designs = names if a.designs == "all" else [d.strip() for d in a.designs.split(",")]
    unknown = [d for d in designs if d not in names]
    if unknown or not designs:
        print(f"baseline: --designs: unknown {', '.join(unknown)}", file=sys.stderr)
        return 2
    save(a.dir, designs, 0.1 if a.quick else 1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
