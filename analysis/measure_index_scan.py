"""Time a CPU index scan (a decode query against DRAM-resident keys) with torch here.

``python -m analysis.measure_index_scan`` writes ``analysis/index_scan.csv``.

Swarm (seed 000 §7) scores each layer's query on the CPU "by comparing the
layer embedding with the cluster medoids"; No Cluster and Table 4's "Naive"
scan every key.  Both are one kernel over a different number of keys: scores
= K q for K the keys (bf16, "we evaluate all models in BF16", §8.1) of
Qwen3-32B's 8 KV heads x 128 dims (2,048 B a key) and q its 64 query heads
(GQA group 8), as ``torch.matmul`` of (8, N, 128) by (8, 128, 8), in bf16
and, for reference, fp32.  The sizes: N from 64 to 1M keys -- the issue's
4K-128K and Table 4's prefixes 128K-1M (its index is 0.412 GB at 1M) -- on
1 and 2 intra-op threads, taking turns call by call; min and median of
``REPEATS`` calls after ``WARMUP``.  ``analysis/index_scan_fit.csv`` splits
a scan into a fixed cost per call and a rate per key (:func:`fit`;
``docs/sensitivity.md``, "Swarm's index scan").

What it cannot say: this is a 2-core KVM guest shared with other work (the
load average is in each row); the paper's host is a 64-core Xeon Gold 6530
whose DDR5 and AMX bf16 units scan faster per thread and on more threads.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import statistics
import time
from pathlib import Path

OUT = Path(__file__).with_name("index_scan.csv")
FIT = Path(__file__).with_name("index_scan_fit.csv")
KV_HEADS, HEAD_DIM, GROUP = 8, 128, 8  # Qwen3-32B (seed 000 Table 2: GQA group 8)
KEYS = (64, 1_024, 4_096, 32_768, 131_072, 262_144, 524_288, 1_048_576)
DTYPES = {"bf16": 1_048_576, "fp32": 524_288}  # dtype -> the most keys timed (memory)
THREADS = (1, 2)
REPEATS, WARMUP = 12, 2


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def measure() -> list[dict]:
    import torch

    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}
    rows = []
    for name, most in DTYPES.items():
        keys_all = torch.randn(KV_HEADS, most, HEAD_DIM).to(dt[name])
        q = torch.randn(KV_HEADS, HEAD_DIM, GROUP).to(dt[name])
        key_bytes = KV_HEADS * HEAD_DIM * keys_all.element_size()
        for n in (k for k in KEYS if k <= most):
            keys = keys_all[:, :n].contiguous()
            secs: dict[int, list[float]] = {t: [] for t in THREADS}
            for r in range(WARMUP + REPEATS):
                for t in THREADS:
                    torch.set_num_threads(t)
                    t0 = time.perf_counter()
                    torch.matmul(keys, q)
                    took = time.perf_counter() - t0
                    if r >= WARMUP:
                        secs[t].append(took)
            for t in THREADS:
                lo, med = min(secs[t]), statistics.median(secs[t])
                rows.append({
                    "dtype": name, "keys": n, "key_bytes": key_bytes, "threads": t,
                    "min_us": round(lo * 1e6, 2), "median_us": round(med * 1e6, 2),
                    "gbps_min": round(n * key_bytes / lo / 1e9, 2),
                    "gbps_median": round(n * key_bytes / med / 1e9, 2),
                })  # fmt: skip
            del keys
        del keys_all
    return rows


def fit(rows: list[dict]) -> list[dict]:
    """Per dtype and thread count, from the minimums: the fixed cost of a call (the
    time of a 64-key scan, 128 KiB or less: dispatch and wake-up) and the rate
    per key between 128K keys and the most timed (the extra keys over the extra time)."""
    out = []
    for name in DTYPES:
        for t in THREADS:
            mine = {r["keys"]: r for r in rows if r["dtype"] == name and r["threads"] == t}
            big = max(mine)
            lo, hi = mine[131_072], mine[big]
            dt_us = hi["min_us"] - lo["min_us"]
            out.append({
                "dtype": name, "threads": t, "fixed_us": mine[64]["min_us"],
                "per_key_gbps": round((big - 131_072) * hi["key_bytes"] / (dt_us * 1e3), 2)
                if dt_us > 0 else float("nan"),
                "gbps_at_128k": lo["gbps_min"],
            })  # fmt: skip
    return out


def main() -> None:
    import torch

    load = os.getloadavg()[0]
    rows = measure()
    meta = {
        "loadavg_1min": f"{load:.2f}-{os.getloadavg()[0]:.2f}", "cpu": _cpu_model(),
        "torch": torch.__version__, "date": datetime.date.today().isoformat(),
    }  # fmt: skip
    for path, table in ((OUT, rows), (FIT, fit(rows))):
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*table[0], *meta])
            w.writeheader()
            w.writerows({**r, **meta} for r in table)
        print(path.read_text())


if __name__ == "__main__":
    main()
