"""The tornado plot of a sensitivity run (``kvtier sim --sensitivity``).

Reads the table :func:`sim.sensitivity.tornado` makes (``tornado.csv``): one bar
per assumption, largest effect on top, spanning the headline ratio of the base
run's top two designs at the assumption's low and high ends; a line at the base
ratio and one at 1 (left of it the second design wins); fragile assumptions
(flips, or a move over 25%) in red; a dot marks the low end, a triangle the
high.  Never runs a simulation; matplotlib runs headless (Agg).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def tornado_figure(table: pd.DataFrame, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.iloc[::-1]  # largest effect on top
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    for y, r in enumerate(rows.itertuples()):
        lo, hi = sorted((r.ratio_low, r.ratio_high))
        color = "tab:red" if r.flips or r.moves else "tab:blue"
        ax.barh(y, hi - lo, left=lo, color=color, height=0.6)
        ax.plot([r.ratio_low], [y], "o", color=color, ms=5)  # the low end: a dot
        ax.plot([r.ratio_high], [y], ">", color=color, ms=6)  # the high end: a triangle
        ax.text(hi, y, f"  {r.verdict}", va="center", fontsize=8)
    ax.set_yticks(
        range(len(rows)), [f"{r.assumption} [{r.low:g}, {r.high:g}]" for r in rows.itertuples()]
    )
    if len(table):
        ax.axvline(table["ratio_base"].iloc[0], color="black", lw=1, label="as given")
    ax.axvline(1.0, color="grey", ls="--", lw=1, label="designs equal")
    top, second = (table["top"].iloc[0], table["second"].iloc[0]) if len(table) else ("", "")
    ax.set_xlabel(f"{top} / {second}, headline ratio (> 1: {top} ahead)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def write_tornado(table: pd.DataFrame, path: str | Path, title: str) -> Path:
    """The plot written to ``path`` (PNG)."""
    fig = tornado_figure(table, title)
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return Path(path)
