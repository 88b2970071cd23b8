"""Figures of a capacity plan (``plan.parquet`` of ``kvtier plan``).

* :func:`pareto_figure`: cost vs each objective the workload models (P99 TTFT,
  tokens/s), every evaluated point coloured by the class of its binding
  resource (:func:`sim.capacity.binding.resource_class`), the Pareto front
  drawn as a line through its points (:func:`sim.capacity.search.pareto`);
* :func:`bottleneck_map`: per design and SSD model (and GPU count, when the
  plan searched more than one: one panel per count, so the map shows where
  adding GPUs moves the bottleneck), a grid of SSD count (x) by DRAM
  configuration (y, ``modules x GiB``), each cell coloured by its binding
  resource's class; cells the search skipped (dominated) are left blank.

A plan over several base profiles (``base``: GPU models) marks each base's points
with its own marker on the Pareto figure and gives each base its own map panels.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from sim.capacity.binding import resource_class  # noqa: E402
from sim.capacity.search import pareto  # noqa: E402

LABELS = {"ttft_p99_s": "P99 TTFT (s)", "throughput_tok_s": "output tokens/s"}


def classes(df: pd.DataFrame) -> pd.Series:
    """The binding resource's class of each row ('' for points not evaluated)."""
    ok = df["status"] == "ok"
    return df["bottleneck"].where(ok, "").fillna("").map(lambda n: resource_class(n) if n else "")


def _palette(names: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {n: cmap(i % 10) for i, n in enumerate(sorted(names))}


def pareto_figure(df: pd.DataFrame):
    """Cost vs each modelled objective; the front as a line, points by bottleneck."""
    metrics = [m for m in LABELS if m in df and df.loc[df["status"] == "ok", m].notna().any()]
    fig, axes = plt.subplots(1, max(len(metrics), 1), figsize=(6 * max(len(metrics), 1), 4.5))
    axes = np.atleast_1d(axes)
    ok = df[df["status"] == "ok"].assign(cls=classes(df))
    colours = _palette(list(ok["cls"].unique()))
    bases = sorted(ok["base"].unique()) if "base" in ok and ok["base"].nunique() > 1 else []
    marker = {b: "osD^vP*X"[i % 8] for i, b in enumerate(bases)}
    for ax, metric in zip(axes, metrics, strict=False):
        for key, g in ok.groupby(["cls", "base"] if bases else ["cls"]):
            cls, label = key[0], " | ".join(key)
            m = marker[key[1]] if bases else "o"
            ax.scatter(g["cost_usd"], g[metric], color=colours[cls], marker=m, label=label, s=24,
                       zorder=2)  # fmt: skip
        front = pareto(df, "cost_usd", metric)
        ax.plot(front["cost_usd"], front[metric], "k-", lw=1.2, label="Pareto front", zorder=3)
        ax.set_title(f"cost vs {LABELS[metric]}")
        ax.set_xlabel("machine cost (USD)")
        ax.set_ylabel(LABELS[metric])
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def gpu_facets(df: pd.DataFrame) -> bool:
    """Whether the plan searched more than one GPU count (a facet of the map)."""
    return "gpus" in df and df["gpus"].nunique() > 1


def bottleneck_map(df: pd.DataFrame):
    """Per (design, SSD model): SSD count x DRAM configuration, cells by bottleneck class."""
    df = df.assign(
        cls=classes(df),
        dram=[f"{m}x{g:g}" for m, g in zip(df["dram_modules"], df["dram_gib"], strict=True)],
    )
    several = "base" in df and df["base"].nunique() > 1
    facets = (["base"] if several else []) + ["design", "ssd_model"]
    facets += ["gpus"] if gpu_facets(df) else []
    panels = list(df.groupby(facets, sort=True))
    names = sorted(c for c in df["cls"].unique() if c)
    colours = _palette(names)
    code = {n: i for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    cmap = ListedColormap([colours[n] for n in names] or ["white"])
    for ax, (key, g) in zip(axes[0], panels, strict=True):
        grid = g.pivot_table(index="dram", columns="ssds", values="cls", aggfunc="first")
        cells = grid.map(lambda c: code.get(c, np.nan) if isinstance(c, str) else np.nan)
        vmax = max(len(names) - 1, 1)
        ax.imshow(cells.to_numpy(dtype=float), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
        ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
        ax.set_yticks(range(len(grid.index)), list(grid.index))
        ax.set_xlabel("SSDs")
        ax.set_ylabel("DRAM modules x GiB")
        f = dict(zip(facets, key, strict=True))
        n = f.get("gpus")
        gpus = f", {n} GPU{'s' if n != 1 else ''} (TP)" if n is not None else ""
        base = f"{f['base']}: " if "base" in f else ""
        ax.set_title(f"{base}{f['design']}{gpus}\n{f['ssd_model']}", fontsize=8)
    fig.legend(handles=[Patch(color=colours[n], label=n) for n in names], loc="lower center",
               ncol=min(len(names), 5), fontsize=7)  # fmt: skip
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def write_figures(df: pd.DataFrame, out) -> list:
    """``pareto.png`` and ``bottlenecks.png`` under ``out``; the paths written."""
    paths = []
    for name, make in (("pareto.png", pareto_figure), ("bottlenecks.png", bottleneck_map)):
        fig = make(df)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths
