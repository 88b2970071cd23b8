"""``kvtier sim`` tables of the ``kvdrive`` workload kind (seed 003): speed,
GPU cache and memory, the per-layer time of each pipeline stage, then the
sync strategies' data movement (seed 003 §7.3, Fig. 21a)."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from kvtier.cli.tables import decode_title, rows_table
from sim.scenarios.kvdrive_kind import BREAKDOWN

HEADERS = {
    "select": "select",
    "lookup": "lookup",
    "kv_fetch": "SSD I/O",
    "stage": "staging",
    "h2d": "H2D",
    "cpu_attn": "CPU attn",
    "attn": "attn+FFN",
}


def kvdrive_tables(df: pd.DataFrame, cfg) -> list[Table]:
    """Three tables, one row per variant (columns missing from ``df`` are left out)."""
    title = decode_title(cfg.workload)
    speed = [
        ("design", "variant", str),
        ("micro-batches", "micro_batches", lambda v: f"{v:.0f}"),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
        ("step ms", "step_ms", lambda v: f"{v:,.2f}"),
        ("GPU hit %", "gpu_hit_rate", lambda v: f"{100 * v:.1f}"),
        ("recall", "recall", lambda v: f"{v:.3f}"),
        ("read MB/step", "read_mb_per_step", lambda v: f"{v:,.2f}"),
        ("index MB/layer", "index_mb_per_layer", lambda v: f"{v:.2f}"),
        ("GPU cache MB/layer", "gpu_cache_mb_per_layer", lambda v: f"{v:.2f}"),
        ("GPU GB", "gpu_mem_gb", lambda v: f"{v:.1f}"),
        ("host GB", "host_need_gb", lambda v: f"{v:.1f}"),
        ("host budget GB", "host_budget_gb", lambda v: f"{v:.1f}"),
        ("fits", "oom_where", lambda v: f"{v} OOM" if v else "yes"),
    ]
    stages = [("design", "variant", str)] + [
        (f"{HEADERS[t]} ms", f"{t}_ms_per_layer", lambda v: f"{v:.3f}") for t in BREAKDOWN
    ]
    sync = [
        ("design", "variant", str),
        ("sync", "sync", str),
        ("fetch ms/layer", "fetch_ms_per_layer", lambda v: f"{v:.3f}"),
        ("SSD MB/step", "read_mb_per_step", lambda v: f"{v:,.1f}"),
        ("DRAM-bus MB/step", "dram_bus_mb_per_step", lambda v: f"{v:,.1f}"),
        ("H2D MB/step", "h2d_mb_per_step", lambda v: f"{v:,.1f}"),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
    ]
    return [
        rows_table(df, f"{title}: throughput and GPU cache", speed),
        rows_table(df, "sync strategy: fetch (SSD I/O + staging + H2D) and data moved", sync),
        rows_table(
            df, "per-layer time of each stage (when any of its ops runs, per (step, layer))", stages
        ),
    ]
