"""Every table ``kvtier sim`` (and ``kvtier sweep``) prints, in a narrow
terminal: no truncated cell ("…"), no line wider than the terminal, one unit
per column (in the header: every right-justified cell parses as a bare
number), and every number printed whole on one line (a number folded across
two lines would not appear intact in the text)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hwprofiles import load_profile
from kvtier.cli.kvdrive_tables import kvdrive_tables
from kvtier.cli.simulate import (
    _reload_table,
    _swift_paper_table,
    design_tables,
    device_table,
    summary_table,
)
from kvtier.cli.tables import fit, frame_table
from sim.config import load_scenario
from sim.scenarios.kvdrive_kind import BREAKDOWN
from sim.scenarios.seedref import judge, load_seed_figures, seed_tables
from sim.serving.report import context_table, design_table, serving_tables

WIDTHS = (60, 80)
NAMES = ["GPU only", "+CPU (minimal) +SSD", "multi-turn: +CPU (minimal) +SSD", "Unified KV pooling"]


def _frame(keys: list[str], value: float = 12345.678) -> pd.DataFrame:
    """One row per long design name, every numeric key at a wide value."""
    rows = []
    for i, name in enumerate(NAMES):
        row = {k: value * (i + 1) for k in keys}
        row.update(variant=name, design=name, model="Qwen3-30B-A3B", io_path="kernel")
        row.update(busiest="ssd0", busiest_util=0.5, cpu_bound_share=0.0, queue_bound_share=0.9)
        row.update(queue_depth=32, match_reached=bool(i % 2), oom=bool(i % 2))
        rows.append(row)
    return pd.DataFrame(rows)


SERVING = ["ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s",
           "throughput_tok_s", "queue_mean_s", "hit_rate_gpu", "hit_rate_cpu", "hit_rate_ssd",
           "hit_rate_pool", "blocked_io_s", "ssd_util", "duration_s", "cache_blocks",
           "hit_ceiling_infinite", "hit_ceiling_belady", "hit_ceiling_lru"]  # fmt: skip
DECODE = ["step_ms", "tokens_per_s", "fetch_ms_per_step", "fetch_gbps", "ssd_share_of_aggregate",
          "cpu_cores_busy", "fetch_bytes_per_step", "io_ms_per_step", "read_bytes_per_step",
          "ios_per_step", "ssd_gbps", "dram_hit_rate", "recall", "select_ms", "index_mb_per_layer",
          "replication", "index_key_share", "select_speedup", "match_scale", "match_recall",
          "matched_tokens_per_s", "match_target", "micro_batches", "gpu_hit_rate",
          "read_mb_per_step", "gpu_cache_mb_per_layer", "gpu_mem_gb",
          *(f"{t}_ms_per_layer" for t in BREAKDOWN),
          "fetch_ms_per_layer", "dram_bus_mb_per_step", "h2d_mb_per_step"]  # fmt: skip
WORKLOAD = SimpleNamespace(
    workload=SimpleNamespace(
        model="Llama-3.1-8B", context_tokens=131072, batch=8, sparsity=0.1, steps=100
    )  # fmt: skip
)


def _seed(name: str) -> list[Table]:
    figs = load_seed_figures(load_scenario(name).source_file)
    rows = [
        judge(f, "Qwen3-30B-A3B 128K", 1234.5 * f.seed + 0.1, figs.tolerance) for f in figs.figures
    ]
    return seed_tables(figs, rows, f"{name} on a machine")


def _context_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [{"model": m, "design": d, "context_tokens": c, "ttft_mean_s": 123.456 * c / 1024,
          "blocked_io_mean_s": 1.5, **{f"hit_rate_{t}": 0.2 for t in ("gpu", "cpu", "ssd", "pool")},
          "hit_ceiling_belady": 0.999}
         for m in ("Llama-3.1-8B", "GPT-OSS-20B") for d in NAMES
         for c in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)]
    )  # fmt: skip


def _context() -> Table:
    df = _context_frame()
    return context_table(df, "ttft_mean_s", "unified-pooling on h100-2dimm-2ssd: mean TTFT (s)")


def _devices() -> Table:
    dev = pd.DataFrame(
        [{"device": f"ssd{i}", "type": "ssd", "bytes_read": 1.5e12, "bytes_written": 2e11,
          "n_ios": 123456789, "busy_s": 1234.567891, "util_mean": 0.987} for i in range(4)]
    )  # fmt: skip
    return device_table(dev, "plan.parquet on h20-8ssd: makespan 1234.567891 s")


_RELOAD = pa.Table.from_pylist([
    {"history_tokens": h, "path": path, "ttft_s": 0.5, "reload_s": 0.25, "reload_share": 0.5}
    for h in (5_000, 50_000) for path in ("pcie", "nvlink")
])  # fmt: skip


def _swift_paper(scenario: str = "swiftcache") -> Table:
    """Seed 002's paper-vs-kvtier rows over a hand-made summary of ``scenario``."""
    row = {
        "ttft_mean_s": 0.3,
        "blocked_io_mean_s": 0.05,
        "duration_s": 200.0,
        "wlwm_ttft_mean_s": 0.065,
        "wlwm_tpot_mean_s": 0.004,
        "w14b_ttft_mean_s": 0.12,
        "w14b_tpot_mean_s": 0.008,
        "peer_hbm_gb_gpu1": 100.0,
        "peer_hbm_gb_gpu2": 50.0,
    }
    summary = pd.DataFrame([
        {**row, "design": "vLLM+LMCache", "ttft_p99_s": 1.8, "lent_gb": 0.0},
        {**row, "design": "SGLang HiCache", "ttft_p99_s": 1.3, "lent_gb": 0.0},
        {**row, "design": "SwiftCache", "ttft_p99_s": 0.4, "lent_gb": 60.0},
    ])  # fmt: skip
    prof = load_profile("h20-4gpu-nvlink")
    return _swift_paper_table(load_scenario(scenario), summary, prof, _RELOAD)


BUILDERS = {
    "serving": lambda: [design_table(_frame(SERVING), "paged-ssd on dgx-spark")],
    "unified-pooling": lambda: [_context()],
    "unified-pooling, all": lambda: serving_tables(_context_frame(), "unified-pooling on a box"),
    "seed unified-pooling": lambda: _seed("unified-pooling"),
    "seed paged-ssd": lambda: _seed("paged-ssd"),
    "sparse decode": lambda: [summary_table(_frame(DECODE), 8)],
    "swarm": lambda: design_tables(_frame(DECODE), WORKLOAD),
    "kvdrive": lambda: kvdrive_tables(_frame(DECODE), WORKLOAD),
    "swiftcache reload": lambda: [_reload_table(load_profile("h20-4gpu-nvlink"), _RELOAD)],
    "swiftcache paper": lambda: [_swift_paper()],
    "swiftcache-leval paper": lambda: [_swift_paper("swiftcache-leval")],
    "sweep": lambda: [
        frame_table(
            _frame(DECODE)[
                [
                    "variant",
                    "tokens_per_s",
                    "ssd_gbps",
                    "fetch_gbps",
                    "io_ms_per_step",
                    "recall",
                    "match_scale",
                ]
            ],
            "default: ssds",
        )
    ],  # fmt: skip
    "sim --plan": lambda: [_devices()],
}


def _plain(cell) -> str:
    return (cell if isinstance(cell, Text) else Text.from_markup(str(cell))).plain


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_table_fits_the_width_whole_with_one_unit_per_column(name, width):
    console = Console(record=True, width=width, color_system=None)
    parts = [part for table in BUILDERS[name]() for part in fit(table, width)]
    numbers = []
    for part in parts:
        console.print(part)
        if len(parts) > 1:  # split parts: rich never has to squeeze (and fold) a column
            assert sum(c.width + 3 for c in part.columns) + 1 <= width
        for col in part.columns:
            if col.justify != "right":
                continue
            for cell in map(_plain, col._cells):
                if cell != "-":
                    float(cell.replace(",", ""))  # a bare number: the unit is in the header
                    numbers.append(cell)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    flat = text.replace(" ", "")  # cells may sit next to rules; numbers have no spaces
    for n in numbers:
        assert n in flat, n
    assert numbers  # each builder has numeric columns to check


def test_a_table_that_fits_is_printed_as_built_and_a_wide_one_keeps_every_cell():
    table = design_table(_frame(SERVING), "t")
    assert fit(table, 400) == [table]
    parts = fit(table, 60)
    assert len(parts) > 1
    keys = {c.header for c in parts[0].columns[:1]}
    assert all({c.header for c in p.columns[:1]} == keys for p in parts)  # the key repeats
    shown = [c.header for p in parts for c in p.columns[1:]]
    assert sorted(shown) == sorted(c.header for c in table.columns[1:])  # each column once


@pytest.mark.parametrize("width", WIDTHS)
def test_progress_bars_fold_their_description_and_keep_counts_whole(width):
    from kvtier.cli.simulate import _progress

    console = Console(record=True, width=width, color_system=None)
    with _progress(console) as bar:
        task = bar.add_task("LMCache+LP+AsyncKV | Qwen3-30B-A3B | 128K 1,234 s simulated", total=9)
        bar.update(task, completed=9)
    text = console.export_text()
    assert "…" not in text and "9/9" in text
    assert max(len(line) for line in text.splitlines()) <= width
