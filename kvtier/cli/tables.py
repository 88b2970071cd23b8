"""Rich tables shared by the simulation commands: one row per design."""

from __future__ import annotations

import pandas as pd
from rich.table import Table


def decode_title(w) -> str:
    """The title line of a sparse-decode workload's tables."""
    return (
        f"{w.model}, {w.context_tokens:,}-token prefix, batch {w.batch}, "
        f"{100 * w.sparsity:g}% sparsity, {w.steps} decode steps"
    )


def rows_table(df: pd.DataFrame, title: str, cols: list, caption: str | None = None) -> Table:
    """One row per design with the columns of ``cols`` that ``df`` has ("-" for NaN)."""
    table = Table(title=title, caption=caption)
    cols = [c for c in cols if c[1] in df.columns]
    for header, _, _ in cols:
        table.add_column(header, justify="left" if header == "design" else "right")
    for _, row in df.iterrows():
        cells = [fmt(row[key]) if row.get(key) == row.get(key) else "-" for _, key, fmt in cols]
        reached = row.get("match_reached")
        matched = cols[-1][1] == "matched_tokens_per_s" and reached is not None
        if matched and reached == reached and not bool(reached):  # NaN: not matched
            cells[-3] = f"unreachable ({row['match_scale']:.2f})"
        table.add_row(*cells)
    return table
