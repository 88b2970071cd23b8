"""Rich tables of a serving scenario's summary (printed by ``kvtier sim``).

A scenario whose variants span several context lengths (``unified-pooling``)
gets seed 004's two figures as tables, one row per (model, design) and one
column per context length: mean TTFT, and mean blocked I/O time, then each
design's hit rate and the trace's Belady ceiling at its cache blocks.  Any other serving
scenario gets one row per design with the serving metrics and the trace's
hit-rate ceilings at the design's cache capacity (:mod:`sim.serving.oracle`:
an infinite cache, Belady's MIN and LRU at GPU + offload tiers' blocks), and a
routed one (``router``) a second table: TPOT percentiles, the GPU hit rate,
turn affinity and each instance's requests and GPU hit rate; on a fleet
(``net_gb``) or with disaggregation (``prefill_instances``) instead the TTFT
and TPOT percentiles, the decode side of a disaggregated variant (its TPOT,
its wait for a decode slot, the KV transfer) and the network's load.
"""

from __future__ import annotations

import pandas as pd
from rich.table import Table


def serving_tables(df: pd.DataFrame, title: str) -> list[Table]:
    if "context_tokens" in df.columns and df["context_tokens"].nunique() > 1:
        return [
            context_table(df, "ttft_mean_s", f"{title}: mean TTFT (s)"),
            context_table(df, "blocked_io_mean_s", f"{title}: mean blocked I/O time (s)"),
            *_ceiling_context(df, title),
        ]
    tables = [design_table(df, title)]
    if "net_gb" in df.columns or "prefill_instances" in df.columns:  # a fleet, or P/D
        tables.append(fleet_table(df, f"{title}: fleet"))
    elif "router" in df.columns:
        tables.append(router_table(df, f"{title}: routing"))
    return tables


def _ctx(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


HIT_TIERS = ("gpu", "cpu", "ssd", "pool")


def hit_rate(df: pd.DataFrame) -> pd.Series:
    """A design's hit rate over all its tiers (each tier's rate shares one denominator)."""
    return sum(df[f"hit_rate_{t}"] for t in HIT_TIERS)


def _ceiling_context(df: pd.DataFrame, title: str) -> list[Table]:
    """Each design's hit rate over all tiers, and the trace's Belady ceiling at
    the design's cache blocks, per context length."""
    if "hit_ceiling_belady" not in df.columns:
        return []
    pct = df.assign(hit_pct=100 * hit_rate(df), belady_pct=100 * df["hit_ceiling_belady"])
    one = lambda v: f"{v:.1f}"  # noqa: E731
    return [
        context_table(pct, "hit_pct", f"{title}: hit rate (%)", one),
        context_table(pct, "belady_pct", f"{title}: Belady ceiling at the design's cache (%)", one),
    ]


def context_table(df: pd.DataFrame, metric: str, title: str, fmt=lambda v: f"{v:.3f}") -> Table:
    """Rows (model, design) in scenario order, columns context lengths."""
    contexts = sorted(df["context_tokens"].unique())
    table = Table(title=title)
    table.add_column("model")
    table.add_column("design")
    for c in contexts:
        table.add_column(_ctx(int(c)), justify="right")
    models = list(dict.fromkeys(df["model"]))
    designs = list(dict.fromkeys(df["design"]))
    for model, design in ((m, d) for m in models for d in designs):
        sub = df[(df["model"] == model) & (df["design"] == design)].set_index("context_tokens")
        if sub.empty:
            continue
        cells = [fmt(sub.at[c, metric]) if c in sub.index else "-" for c in contexts]
        table.add_row(model, design, *cells)
    return table


def _pct(v: float) -> str:
    """A fraction as a percentage, its unit in the column header."""
    return f"{100 * v:.1f}"


def _int(v: float) -> str:
    return f"{int(v):,}"


def design_table(df: pd.DataFrame, title: str) -> Table:
    """One row per design: latency, throughput, hits, blocked I/O (hit-rate
    columns of tiers no design has are left out)."""
    table = Table(title=title)
    ms = lambda v: f"{1e3 * v:,.0f}"  # noqa: E731
    cols = [
        ("design", "variant", str),
        ("TTFT ms", "ttft_mean_s", ms),
        ("p50 ms", "ttft_p50_s", ms),
        ("p90 ms", "ttft_p90_s", ms),
        ("p99 ms", "ttft_p99_s", ms),
        ("TPOT ms", "tpot_mean_s", lambda v: f"{1e3 * v:.1f}"),
        ("tok/s", "throughput_tok_s", lambda v: f"{v:,.0f}"),
        ("queue s", "queue_mean_s", lambda v: f"{v:.2f}"),
    ]
    for tier in HIT_TIERS:
        if df[f"hit_rate_{tier}"].any():
            name = tier.upper() if tier != "pool" else tier
            cols.append((f"hit {name} %", f"hit_rate_{tier}", _pct))
    if "hit_ceiling_belady" in df.columns:  # the trace's ceilings at the design's capacity
        df = df.assign(hit_rate_all=hit_rate(df))
        opt = lambda f: lambda v: "-" if pd.isna(v) else f(v)  # noqa: E731  (several instances: none)
        cols += [
            ("hit %", "hit_rate_all", _pct),
            ("cache blocks", "cache_blocks", opt(_int)),
            ("ceiling inf %", "hit_ceiling_infinite", opt(_pct)),
            ("Belady %", "hit_ceiling_belady", opt(_pct)),
            ("LRU %", "hit_ceiling_lru", opt(_pct)),
        ]
    cols += [
        ("blocked I/O s", "blocked_io_s", lambda v: f"{v:.3f}"),
        ("SSD util %", "ssd_util", _pct),
        ("span s", "duration_s", lambda v: f"{v:.1f}"),
    ]
    for header, _, _ in cols:
        left = header == "design"
        table.add_column(header, justify="left" if left else "right", no_wrap=left)
    for _, row in df.iterrows():
        table.add_row(*[fmt(row[key]) for _, key, fmt in cols])
    return table


def router_table(df: pd.DataFrame, title: str) -> Table:
    """One row per routed variant: its router, TPOT percentiles, GPU hits, the
    share of later turns sent where the session's previous turn ran, and each
    instance's requests / GPU hit rate."""
    names = [c.removesuffix("_requests") for c in df.columns if c.endswith("_requests")]
    table = Table(title=title)
    heads = ["variant", "router", "TPOT p50 ms", "p99 ms", "hit GPU %", "turn affinity %"]
    for h in [*heads, *(f"{n} req / hit %" for n in names)]:
        table.add_column(h, justify="left" if h in ("variant", "router") else "right")
    for _, row in df.iterrows():
        per = [f"{row[f'{n}_requests']:.0f} / {_pct(row[f'{n}_hit_rate_gpu'])}" for n in names]
        table.add_row(str(row["variant"]), str(row["router"]), f"{1e3 * row['tpot_p50_s']:.1f}",
                      f"{1e3 * row['tpot_p99_s']:.1f}", _pct(row["hit_rate_gpu"]),
                      _pct(row["turn_affinity"]), *per)  # fmt: skip
    return table


def fleet_table(df: pd.DataFrame, title: str) -> Table:
    """One row per variant on a fleet: instances, TTFT and (client) TPOT
    percentiles, a disaggregated variant's decode-side TPOT, hand-off wait and KV
    transfer, the bytes its NICs sent and the busiest NIC port's and leaf
    uplink's load (bytes over achievable rate x the run) and busy share, and
    a routed variant's hit rates per level (GPU, node-local, node-shared, fleet
    pool: :func:`sim.fleet.scopes.level_hits`)."""
    table = Table(title=title)
    ms = lambda v: "-" if pd.isna(v) else f"{1e3 * v:,.1f}"  # noqa: E731
    cols = [
        ("TTFT mean ms", "ttft_mean_s", ms), ("p50", "ttft_p50_s", ms), ("p90", "ttft_p90_s", ms),
        ("p99", "ttft_p99_s", ms), ("TPOT mean ms", "tpot_mean_s", ms), ("p50", "tpot_p50_s", ms),
        ("p99", "tpot_p99_s", ms), ("decode TPOT p50 ms", "decode_tpot_p50_s", ms),
        ("p99", "decode_tpot_p99_s", ms), ("decode wait mean ms", "decode_wait_mean_s", ms),
        ("KV xfer mean ms", "kv_transfer_mean_s", ms), ("p99", "kv_transfer_p99_s", ms),
        ("net GB", "net_gb", lambda v: f"{v:,.1f}"), ("NIC load max %", "nic_load_max", _pct),
        ("NIC busy max %", "nic_busy_max", _pct), ("uplink load %", "uplink_load_max", _pct),
    ]  # fmt: skip
    if "hit_rate_level_gpu" in df.columns:  # hits per level (sim.fleet.scopes)
        cols += [("hit GPU %", "hit_rate_level_gpu", _pct),
                 ("node-local %", "hit_rate_level_node_local", _pct),
                 ("node-shared %", "hit_rate_level_node_shared", _pct),
                 ("fleet pool %", "hit_rate_level_fleet_pool", _pct)]  # fmt: skip
    table.add_column("variant", justify="left")
    table.add_column("instances", justify="right")
    for header, _, _ in cols:
        table.add_column(header, justify="right")
    for _, row in df.iterrows():
        if pd.notna(row.get("prefill_instances")):
            inst = f"{row['prefill_instances']:.0f}P+{row['decode_instances']:.0f}D"
        else:
            inst = f"{row['instances']:.0f}" if pd.notna(row.get("instances")) else "1"
        vals = [fmt(row[key]) if pd.notna(row.get(key)) else "-" for _, key, fmt in cols]
        table.add_row(str(row["variant"]), inst, *vals)
    return table
