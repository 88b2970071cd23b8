"""``kvtier sim`` tables of the ``kvdrive`` workload kind (seed 003): speed,
GPU cache and memory, the per-layer time of each pipeline stage, then the
sync strategies' data movement (seed 003 §7.3, Fig. 21a)."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from kvtier.cli.tables import MISSING, decode_title, rows_table
from sim.scenarios.kvdrive_kind import BREAKDOWN

NAN = float("nan")
# the paper's system: SFC with the §6.2 pre-run choosing window, cache and micro-batches
PAPER_SYSTEM = "KVDrive (calibrated)"
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
    """Three tables, one row per variant (columns missing from ``df`` are left out).
    A run over several (context, batch) pairs (the workload's ``points``) has a
    row per (pair, design) and two more tables first: throughput per pair and
    design (:func:`throughput_table`) and the variants run at one pair beside
    the reference there (:func:`one_pair_table`)."""
    title = decode_title(cfg.workload)
    lead = [("design", "variant", str)]
    first: list[Table] = []
    if "context_tokens" in df and len(df[["context_tokens", "batch"]].drop_duplicates()) > 1:
        df = by_pair(df)
        w = cfg.workload
        title = f"{w.model}, {100 * w.sparsity:g}% sparsity, {w.steps} decode steps"
        lead.append(("pair", "pair", str))
        first = [throughput_table(df, title), one_pair_table(df)]
    speed = [
        *lead,
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
    stages = lead + [
        (f"{HEADERS[t]} ms", f"{t}_ms_per_layer", lambda v: f"{v:.3f}") for t in BREAKDOWN
    ]
    sync = [
        *lead,
        ("sync", "sync", str),
        ("fetch ms/layer", "fetch_ms_per_layer", lambda v: f"{v:.3f}"),
        ("SSD MB/step", "read_mb_per_step", lambda v: f"{v:,.1f}"),
        ("DRAM-bus MB/step", "dram_bus_mb_per_step", lambda v: f"{v:,.1f}"),
        ("H2D MB/step", "h2d_mb_per_step", lambda v: f"{v:,.1f}"),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
    ]
    return first + [
        rows_table(df, f"{title}: throughput and GPU cache", speed),
        rows_table(df, "sync strategy: fetch (SSD I/O + staging + H2D) and data moved", sync),
        rows_table(
            df, "per-layer time of each stage (when any of its ops runs, per (step, layer))", stages
        ),
    ]


def by_pair(df: pd.DataFrame) -> pd.DataFrame:
    """Rows named by their design (the variant's name before " | ") with a
    ``pair`` column ("60K x 8"), sorted by context then batch, variants in
    scenario order within a pair."""
    out = df.assign(
        variant=df["variant"].str.split(" | ", n=1, regex=False).str[0],
        pair=[
            f"{c // 1024:,}K x {b}" for c, b in zip(df["context_tokens"], df["batch"], strict=True)
        ],
        order=range(len(df)),
    )
    return out.sort_values(["context_tokens", "batch", "order"], kind="stable").drop(
        columns="order"
    )


def throughput_table(df: pd.DataFrame, title: str) -> Table:
    """Generation throughput (tokens/s), a row per pair and a column per design
    run at more than one pair (seed 003 Fig. 13), "-" where it does not fit
    (the last column says which designs and where: GPU or host); the ratio
    columns divide the paper's system (:data:`PAPER_SYSTEM`, its §6.2 calibration
    included) and the best KVDrive variant (prefetch, an upper bound, included)
    by the best other design (designs named "KVDrive ..." against the rest)."""
    counts = df.groupby("variant", sort=False)["pair"].nunique()
    names = [n for n in counts.index if counts[n] > 1]
    table = Table(title=f"{title}: generation throughput, tokens/s")
    table.add_column("pair", justify="left")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column(f"{PAPER_SYSTEM} / best other x", justify="right")
    table.add_column("best KVDrive / best other x", justify="right")
    table.add_column("out of memory", justify="left")
    for pair, rows in df[df["variant"].isin(names)].groupby("pair", sort=False):
        speed = dict(zip(rows["variant"], rows["tokens_per_s"], strict=True))
        cells = [f"{speed[n]:,.1f}" if speed.get(n, NAN) == speed.get(n, NAN) else MISSING
                 for n in names]  # fmt: skip
        fast = rows.groupby(rows["variant"].str.startswith("KVDrive"))["tokens_per_s"].max()
        ratio = fast.get(True, NAN) / fast.get(False, NAN)
        paper = speed.get(PAPER_SYSTEM, NAN) / fast.get(False, NAN)
        where = rows.get("oom_where", pd.Series("", index=rows.index)).fillna("")
        oom = ", ".join(f"{n} ({w})" for n, w in zip(rows["variant"], where, strict=True) if w)
        shown = [f"{x:.2f}" if x == x else MISSING for x in (paper, ratio)]
        table.add_row(pair, *cells, *shown, oom or "none")
    return table


def one_pair_table(df: pd.DataFrame) -> Table:
    """The variants run at one pair only (sensitivities, eviction, host size),
    each pair's rows after the scenario's first design at that pair (the
    reference they vary), with throughput, hit rate, memory and stage times."""
    counts = df.groupby("variant", sort=False)["pair"].nunique()
    ref = df["variant"].iloc[0] if len(df) else ""
    single = df["variant"].map(counts) == 1
    pairs = set(df.loc[single, "pair"])
    rows = df[single | ((df["variant"] == ref) & df["pair"].isin(pairs))]
    cols = [
        ("design", "variant", str),
        ("pair", "pair", str),
        ("host budget GB", "host_budget_gb", lambda v: f"{v:.1f}"),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
        ("GPU hit %", "gpu_hit_rate", lambda v: f"{100 * v:.1f}"),
        ("SSD MB/step", "read_mb_per_step", lambda v: f"{v:,.1f}"),
        ("GPU GB", "gpu_mem_gb", lambda v: f"{v:.1f}"),
        ("index MB/layer", "index_mb_per_layer", lambda v: f"{v:.2f}"),
    ] + [(f"{HEADERS[t]} ms", f"{t}_ms_per_layer", lambda v: f"{v:.3f}") for t in BREAKDOWN]
    return rows_table(rows, f"run at one pair, beside {ref} there", cols)
