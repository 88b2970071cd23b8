"""Plots of sweep results: one PNG per metric, one line per design.

Only reads the tables the runner and ``kvtier sweep`` write; never runs a
simulation.  matplotlib runs headless (Agg).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

LABELS = {
    "tokens_per_s": "decode throughput (tokens/s)",
    "ssd_gbps": "effective SSD bandwidth during I/O (GB/s)",
    "fetch_gbps": "KV fetch bandwidth (GB/s)",
    "io_ms_per_step": "I/O time per step (ms)",
    "fetch_ms_per_step": "KV fetch time per step (ms)",
    "step_ms": "time per decode step (ms)",
    "read_bytes_per_step": "bytes read from SSDs per step",
    "recall": "recall of the oracle top-k",
    "dram_hit_rate": "DRAM cache hit rate",
    "select_ms": "selection latency (ms)",
    "index_mb_per_layer": "DRAM index per layer (MB)",
    "ssd_share_of_aggregate": "share of aggregate SSD bandwidth",
}


def plot_sweep(
    df: pd.DataFrame, factor: str, metrics: Sequence[str], out_dir: str | Path, title: str = ""
) -> list[Path]:
    """Line plots of ``metrics`` against ``factor``, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    numeric = pd.api.types.is_numeric_dtype(df[factor])
    for metric in metrics:
        if metric not in df.columns:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
        for variant, g in df.groupby("variant", sort=False):
            g = g.sort_values(factor) if numeric else g
            ax.plot(
                g[factor].astype(str) if not numeric else g[factor],
                g[metric],
                marker="o",
                label=str(variant),
            )
        if numeric and df[factor].min() > 0 and df[factor].max() / df[factor].min() >= 16:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(factor)
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.set_title(title or f"{metric} vs {factor}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / f"{metric}-vs-{factor}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
