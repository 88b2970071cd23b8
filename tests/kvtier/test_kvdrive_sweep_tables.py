"""``kvtier sim``'s tables of a kvdrive run over several (context, batch) pairs:
a row per (pair, design), the throughput per pair and design, the variants run
at one pair beside the reference there."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pandas as pd
from rich.console import Console

from kvtier.cli.kvdrive_tables import kvdrive_tables

CFG = SimpleNamespace(
    workload=SimpleNamespace(
        model="Llama-3-8B-1048K", context_tokens=122880, batch=4, sparsity=0.0156, steps=16
    )
)


def _row(name: str, ctx: int, batch: int, tps: float, oom: str = "") -> dict:
    return {"variant": name, "context_tokens": ctx, "batch": batch, "tokens_per_s": tps,
            "oom_where": oom, "gpu_hit_rate": 0.5, "host_budget_gb": 99.4}  # fmt: skip


def _cells(table) -> list[list[str]]:
    cols = [list(c._cells) for c in table.columns]
    return [list(r) for r in zip(*cols, strict=True)]


def test_throughput_per_pair_and_the_ratio_of_the_best_kvdrive_to_the_best_other():
    nan = float("nan")
    df = pd.DataFrame([
        _row("KVDrive (SFC) | 60K | 8", 61440, 8, 500.0),
        _row("KVDrive (SFC+prefetch) | 60K | 8", 61440, 8, 900.0),
        _row("ShadowKV | 60K | 8", 61440, 8, 600.0),
        _row("Original | 60K | 8", 61440, 8, nan, "GPU"),
        _row("KVDrive (calibrated) | 60K | 8", 61440, 8, 720.0),
        _row("KVDrive (SFC) | 120K | 4", 122880, 4, 250.0),
        _row("KVDrive (SFC+prefetch) | 120K | 4", 122880, 4, 400.0),
        _row("ShadowKV | 120K | 4", 122880, 4, 320.0),
        _row("Original | 120K | 4", 122880, 4, nan, "GPU"),
        _row("KVDrive (calibrated) | 120K | 4", 122880, 4, 384.0),
        _row("KVDrive (window 4)", 122880, 4, 260.0),
    ])  # fmt: skip
    tables = kvdrive_tables(df, CFG)
    speed, one = tables[0], tables[1]
    headers = [str(c.header) for c in speed.columns]
    assert headers[1:6] == ["KVDrive (SFC)", "KVDrive (SFC+prefetch)", "ShadowKV", "Original",
                            "KVDrive (calibrated)"]  # fmt: skip
    assert headers[6:8] == ["KVDrive (calibrated) / best other x", "best KVDrive / best other x"]
    rows = _cells(speed)
    # the paper's system 720 / 600 and 384 / 320, the best KVDrive 900 / 600 and 400 / 320,
    # worked by hand; Original has no throughput: "-"
    assert rows[0] == ["60K x 8", "500.0", "900.0", "600.0", "-", "720.0", "1.20", "1.50",
                       "Original (GPU)"]  # fmt: skip
    assert rows[1] == ["120K x 4", "250.0", "400.0", "320.0", "-", "384.0", "1.20", "1.25",
                       "Original (GPU)"]  # fmt: skip
    # the one-pair variant after the reference (the first design) at its pair
    assert [r[:2] for r in _cells(one)] == [["KVDrive (SFC)", "120K x 4"],
                                            ["KVDrive (window 4)", "120K x 4"]]  # fmt: skip
    # the full tables: a row per (pair, design), named by the design with a pair column
    full = tables[2]
    assert [r[:2] for r in _cells(full)][:2] == [["KVDrive (SFC)", "60K x 8"],
                                                 ["KVDrive (SFC+prefetch)", "60K x 8"]]  # fmt: skip
    assert len(_cells(full)) == len(df)
    Console(width=80, file=io.StringIO()).print(*tables)  # renders


def test_one_pair_runs_keep_the_old_tables():
    df = pd.DataFrame([_row("KVDrive (SFC)", 122880, 4, 250.0), _row("Quest", 122880, 4, 90.0)])
    tables = kvdrive_tables(df, CFG)
    assert len(tables) == 3 and [r[0] for r in _cells(tables[0])] == ["KVDrive (SFC)", "Quest"]


def test_many_variants_share_one_progress_bar_advanced_once_per_plan_and_run():
    from rich.progress import Progress

    from kvtier.cli.simulate import MANY_VARIANTS, _variant_bars

    n = MANY_VARIANTS + 1
    with Progress(console=Console(file=io.StringIO())) as bar:
        update = _variant_bars(bar, {}, n)
        for i in range(n):  # each variant: planned in 4 ticks, then simulated in 2
            for done in range(1, 5):
                update(f"v{i} (plan)", done, 4)
            update(f"v{i}", 1, 2)
            update(f"v{i}", 2, 2)
        (task,) = bar.tasks
        assert task.total == 2 * n and task.completed == 2 * n and task.finished
    with Progress(console=Console(file=io.StringIO())) as bar:
        update = _variant_bars(bar, {}, MANY_VARIANTS)  # few: a bar per variant
        update("a (plan)", 1, 4)
        update("a", 3, 7)
        assert [(t.description, t.completed, t.total) for t in bar.tasks] == [
            ("a (plan)", 1, 4),
            ("a", 3, 7),
        ]
