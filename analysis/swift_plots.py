"""Seed 002 (SwiftCache) outputs of a ``swiftcache`` run: tables as Parquet, plots as PNG.

From the run's ``summary.parquet`` (:mod:`sim.scenarios.swiftcache` computes
the tables, so the CLI, the notebook and the tests share one arithmetic):

* ``swift-breakdown.parquet`` -- the master's mean TTFT split into queueing,
  blocked load and execution, per design (Fig. 10's breakdown);
* ``swift-interference.parquet`` -- each worker's mean TTFT and TPOT alone vs
  lending (Fig. 8);
* ``swift-max-context.parquet`` -- the longest context per master and GPU
  memory size, vLLM with and without chunked prefill vs SwiftCache (Fig. 9);
* ``swift-ttft.png`` (mean and P99 TTFT per design, Fig. 7) and
  ``swift-max-context.png`` (one panel per master, Fig. 9).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.serving_plots import _plt
from sim.scenarios.swiftcache import max_context_table, prefill_breakdown, worker_interference

SYSTEMS = {"vllm": "vLLM", "vllm_chunk_32k": "vLLM, 32K chunks",
           "vllm_chunk_8k": "vLLM, 8K chunks", "swiftcache": "SwiftCache"}  # fmt: skip


def swift_tables(summary: pd.DataFrame, lend_share: float) -> dict[str, pd.DataFrame]:
    """The three tables of a run's summary (module docstring)."""
    summ = pa.Table.from_pandas(summary, preserve_index=False)
    return {
        "breakdown": prefill_breakdown(summ).to_pandas(),
        "interference": worker_interference(summ).to_pandas(),
        "max-context": max_context_table(lend_share).to_pandas(),
    }


def ttft_figure(summary: pd.DataFrame):
    """Mean and P99 TTFT per design, side by side."""
    fig, ax = _plt().subplots(figsize=(7, 3.5))
    x = range(len(summary))
    for k, (col, label) in enumerate((("ttft_mean_s", "mean"), ("ttft_p99_s", "P99"))):
        ax.bar([i + 0.4 * k for i in x], summary[col], width=0.4, label=label)
    ax.set_xticks([i + 0.2 for i in x], summary["design"], rotation=15, fontsize=8)
    ax.set_ylabel("master TTFT (s)")
    ax.legend()
    fig.tight_layout()
    return fig


def max_context_figure(table: pd.DataFrame):
    """One panel per master: longest context (tokens) per GPU size and system."""
    masters = list(dict.fromkeys(table["model"]))
    fig, axes = _plt().subplots(1, len(masters), figsize=(4 * len(masters), 3.5), squeeze=False)
    for ax, model in zip(axes[0], masters, strict=True):
        t = table[table["model"] == model]
        x = range(len(t))
        for k, (col, label) in enumerate(SYSTEMS.items()):
            ax.bar([i + 0.2 * k for i in x], t[col], width=0.2, label=label)
        ax.set_xticks([i + 0.3 for i in x], [f"{g:g} GB" for g in t["gpu_gb"]])
        ax.set_title(model)
        ax.set_ylabel("max context (tokens)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_swift_outputs(root: str | Path, lend_share: float) -> list[Path]:
    """The tables (Parquet) and plots (PNG) above, written into run folder ``root``."""
    root = Path(root)
    summary = pd.read_parquet(root / "summary.parquet")
    out = []
    for name, df in swift_tables(summary, lend_share).items():
        path = root / f"swift-{name}.parquet"
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
        out.append(path)
    plt = _plt()
    for name, fig in (("ttft", ttft_figure(summary)),
                      ("max-context", max_context_figure(swift_tables(summary, lend_share)
                                                         ["max-context"]))):  # fmt: skip
        path = root / f"swift-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out
