"""Time KVDrive's host-side copy primitives with torch on this machine's CPU.

``python -m analysis.measure_host_copy`` writes ``analysis/host_copy.csv``.

KVDrive's prototype (seed 003 §8) is "built on PyTorch 2.3.0"; "sparse
updates and retrievals are performed through ``torch.Tensor.index_copy_()``"
and "the data movement primitives for gather and copy are derived from
ShadowKV".  kvtier charges the step's staging copy (memmap region -> pinned
buffer, :mod:`sim.policies.kvdrive.sync`) as a CPU op over ``2 S`` bytes of
DRAM traffic for ``S`` bytes staged (:mod:`sim.scenarios.kvdrive`), at the
profile's per-core rate ``core_mem_gbps`` times the op's threads.  This script
times the real primitives at the paper's sizes, with 1 and 2 intra-op threads:

* ``gather``: ``torch.index_select(src, 0, idx, out=buf)``: ``rows`` rows at
  the selection's ids of one layer's KV into a contiguous buffer (a
  retrieval, the staging copy's shape);
* ``scatter``: ``dst.index_copy_(0, idx, buf)``: a contiguous buffer into
  ``rows`` rows of the layer's KV (a sparse update);
* ``copy``: ``buf.copy_(src[:rows])``: a contiguous memcpy of the same bytes
  (the reference: no indexing).

Sizes (seed 003 §9.1, Fig. 13; ``docs/kvdrive-vs-paper.md``): one layer's KV
of 4 sequences at 122,880 tokens, 4,096 B per token (K and V of 8 KV heads x
128 x 2 B), 2.01 GB, resident in DRAM; fp16.  Rows of 512 B (one KV head of
one token), 4,096 B (one token, kvtier's entry) and 16,384 B (a chunk of 4
tokens, KVDrive's default chunk); row counts 1,150 and 2,300, which bracket
what kvtier stages at 120K x 4 (Llama, L20, 16 steps: 125.0 MB of staging
traffic per step over 8 layers, ``dram_bus_mb_per_step`` less
``h2d_mb_per_step``, i.e. ~954 entries per micro-batch and ~1,908 per layer),
and 7,668 (the whole selection: 4 x 1,917 = 1.56% of 122,880 per sequence).
Ids are distinct, drawn at random and sorted.

What it cannot say: the buffer here is pageable (no CUDA: pinning needs a
driver), and this is a 2-core VM, so the scaling beyond 2 threads of the
paper's 48-core Xeon Platinum 8457C (8 DDR5-4800 channels) cannot be
measured here (``docs/kvdrive-vs-paper.md``, "The staging copy's threads").
Each cell: ``WARMUP`` rounds, then ``REPEATS`` timed calls, each on a fresh id set
(and a fresh source range for ``copy``), 1 and 2 threads taking turns; min and median.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import statistics
import time
from pathlib import Path

OUT = Path(__file__).with_name("host_copy.csv")
KV_BYTES = 4 * 122_880 * 4_096  # one layer, 4 sequences at 120K (seed 003 Fig. 13)
ROW_BYTES = (512, 4_096, 16_384)
ROWS = (1_150, 2_300, 7_668)
THREADS = (1, 2)
REPEATS = 40
WARMUP = 5
N_CALLS = (WARMUP + REPEATS) * 3 * len(THREADS)  # 3 ops


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _time(calls: dict, torch) -> dict:
    """Seconds per timed call of each ``(op, threads)``: the thread counts take
    turns call by call (so both see the same background load on a shared
    machine), each call on a fresh id set (``fn(k)``); WARMUP rounds untimed."""
    out: dict = {}
    k = 0
    for r in range(WARMUP + REPEATS):
        for op, fn in calls.items():
            for threads in THREADS:
                torch.set_num_threads(threads)
                t = time.perf_counter()
                fn(k)
                dt = time.perf_counter() - t
                k += 1
                if r >= WARMUP:
                    out.setdefault((op, threads), []).append(dt)
    return out


def measure() -> list[dict]:
    import numpy as np
    import torch

    rng = np.random.default_rng(3)
    kv = torch.empty(KV_BYTES // 2, dtype=torch.float16)
    kv.fill_(1.0)  # touch every page: the layer's KV is resident in DRAM
    rows_out = []
    for row_bytes in ROW_BYTES:
        table = kv.view(-1, row_bytes // 2)
        for rows in ROWS:
            # a fresh id set (and source range) per call: no call finds the last one's rows in cache
            idx = [
                torch.from_numpy(np.sort(rng.choice(table.shape[0], size=rows, replace=False)))
                for _ in range(N_CALLS)
            ]
            buf = torch.empty(rows, row_bytes // 2, dtype=torch.float16)
            span = table.shape[0] // rows
            calls = {
                "gather": lambda k, t=table, i=idx, b=buf: torch.index_select(t, 0, i[k], out=b),
                "scatter": lambda k, t=table, i=idx, b=buf: t.index_copy_(0, i[k], b),
                "copy": lambda k, t=table, b=buf, n=rows, m=span: b.copy_(
                    t[k % m * n : (k % m + 1) * n]
                ),
            }
            timed = _time(calls, torch)
            for (op, threads), secs in sorted(timed.items()):
                rows_out.append(_row(op, row_bytes, rows, threads, secs))
    return rows_out


def _row(op: str, row_bytes: int, rows: int, threads: int, secs: list[float]) -> dict:
    s = row_bytes * rows  # bytes copied; the DRAM traffic is 2 S (read S, write S)
    lo, med = min(secs), statistics.median(secs)
    return {
        "op": op,
        "row_bytes": row_bytes,
        "rows": rows,
        "bytes": s,
        "threads": threads,
        "min_us": round(lo * 1e6, 2),
        "median_us": round(med * 1e6, 2),
        "traffic_gbps_min": round(2 * s / lo / 1e9, 2),  # 2 S / t: kvtier's charge
        "traffic_gbps_median": round(2 * s / med / 1e9, 2),
        "per_thread_gbps_median": round(2 * s / med / 1e9 / threads, 2),
    }


def main() -> None:
    import torch

    load = os.getloadavg()[0]
    rows = measure()
    meta = {
        # before-after: the 2 cores are shared with other work
        "loadavg_1min": f"{load:.2f}-{os.getloadavg()[0]:.2f}",
        "cpu": _cpu_model(),
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }
    with OUT.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], *meta])
        w.writeheader()
        for r in rows:
            w.writerow({**r, **meta})
    for r in rows:
        print(
            f"{r['op']:8} {r['row_bytes']:6} B x {r['rows']:5} t={r['threads']}: "
            f"min {r['min_us']:8.1f} us  median {r['median_us']:8.1f} us  "
            f"2S/t {r['traffic_gbps_min']:6.1f} / {r['traffic_gbps_median']:6.1f} GB/s"
        )


if __name__ == "__main__":
    main()
