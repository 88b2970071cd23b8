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


def draw_metric(ax, df: pd.DataFrame, factor: str, metric: str) -> None:
    """One line per variant of ``metric`` against ``factor`` on ``ax``."""
    numeric = pd.api.types.is_numeric_dtype(df[factor])
    for variant, g in df.groupby("variant", sort=False):
        g = g.sort_values(factor) if numeric else g
        x = g[factor] if numeric else g[factor].astype(str)
        ax.plot(x, g[metric], marker="o", label=str(variant))
    if numeric and df[factor].min() > 0 and df[factor].max() / df[factor].min() >= 16:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(factor)
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.grid(True, alpha=0.3)


def sweep_figure(df: pd.DataFrame, factor: str, metrics: Sequence[str], title: str = ""):
    """A row of panels, one per metric present in ``df``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [m for m in metrics if m in df.columns]
    fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], present, strict=True):
        draw_metric(ax, df, factor, metric)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title or f"sweep over {factor}")
    fig.tight_layout()
    return fig


def plot_sweep(
    df: pd.DataFrame, factor: str, metrics: Sequence[str], out_dir: str | Path, title: str = ""
) -> list[Path]:
    """One PNG per metric of ``metrics`` against ``factor``, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for metric in metrics:
        if metric not in df.columns:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
        draw_metric(ax, df, factor, metric)
        ax.set_title(title or f"{metric} vs {factor}")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / f"{metric}-vs-{factor}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
