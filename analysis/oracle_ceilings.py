"""Hit-rate ceilings of the serving bench's Mooncake-shaped trace (docs/traces.md).

    python -m analysis.oracle_ceilings --requests 12031 --out analysis/oracle_ceilings.csv
    python -m analysis.oracle_ceilings --requests 1000 --load 0.8 --trace-out mc1000.parquet

The trace is :func:`sim.serving.bench.mooncake_table` (sessions fitted to the
Mooncake conversation trace's published totals, FAST'25: 12,031 requests,
mean input ~12K tokens), hashed in ``--block``-token engine blocks.  The
ceilings (:mod:`sim.serving.oracle`: an infinite cache, Belady's MIN, LRU)
are computed at capacities given in GiB of ``--model``'s KV: a sweep of
powers of four, and the capacities of ``h100-2dimm-2ssd`` (the H100's KV
cache at vLLM's default ``gpu_memory_utilization`` 0.9, as ``sim.serving.bench``
builds it; plus seed 004's 20 GB of host memory, plus its 200 GB of SSD).
Arrival times do not enter the ceilings, so ``--load`` changes only the
trace written by ``--trace-out`` (a kvtier Parquet request trace, the bench's
arrivals stretched to offered load ``--load``, for ``kvtier sim``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from sim.models import get_model
from sim.serving.bench import TRACE_BLOCK, bench_trace, engine_config
from sim.serving.oracle import accesses, ceilings
from sim.serving.requests import load_requests
from traces.requests import RequestTrace

GIB = 2**30
SWEEP_GIB = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
HOST_GIB, SSD_GIB = 18.63, 186.26  # seed 004 §III-A: 20 GB of host memory, 200 GB of SSD
HW = "h100-2dimm-2ssd"


def capacities(block: int, model: str) -> list[tuple[str, float]]:
    """(label, GiB) of the sweep and of the seed-004 machine's tiers."""
    card = get_model(model)
    gpu = engine_config(HW, model, block).gpu_blocks * block * card.kv_bytes_per_token / GIB
    machine = [(f"{HW} GPU", gpu), ("GPU + host 20 GB", gpu + HOST_GIB),
               ("GPU + host 20 GB + SSD 200 GB", gpu + HOST_GIB + SSD_GIB)]  # fmt: skip
    return [(f"{g:g} GiB", g) for g in SWEEP_GIB] + machine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12031)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block", type=int, default=256, help="engine block, tokens")
    ap.add_argument("--model", default="Llama-3.1-8B")
    ap.add_argument("--load", type=float, default=0.0, help="offered load of --trace-out")
    ap.add_argument("--out", type=Path, help="CSV of the ceilings")
    ap.add_argument("--trace-out", type=Path, help="write the trace as kvtier Parquet")
    args = ap.parse_args(argv)
    table, stats = bench_trace(args.requests, args.seed, args.block, HW, args.model, args.load)
    if args.trace_out:
        source = f"generator:mooncake-shaped (sim.serving.bench) seed {args.seed} load {args.load}"
        trace = RequestTrace(table.replace_schema_metadata(None), TRACE_BLOCK, source)
        trace.write_parquet(args.trace_out)
    reqs = load_requests(table, args.block)
    acc = accesses([r.hashes for r in reqs], [r.input_tokens for r in reqs], args.block)
    block_bytes = args.block * get_model(args.model).kv_bytes_per_token
    print(f"{len(reqs)} requests, mean input {stats['mean_input']:,.0f} tokens, "
          f"{len(acc.ids):,} lookups of {args.block}-token blocks, {acc.distinct:,} distinct "
          f"({acc.distinct * block_bytes / GIB:,.1f} GiB of {args.model} KV)")  # fmt: skip
    rows = []
    for label, gib in capacities(args.block, args.model):
        c = ceilings(acc, int(gib * GIB // block_bytes))
        rows.append({"capacity": label, "gib": round(gib, 2), "blocks": c.capacity,
                     "infinite": round(c.infinite, 4), "belady": round(c.belady, 4),
                     "lru": round(c.lru, 4)})  # fmt: skip
        print(" | ".join(str(v) for v in rows[-1].values()))
    if args.out:
        with args.out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
