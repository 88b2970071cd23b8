"""Plots of a serving scenario's results (``kvtier sim`` of a serving scenario).

Reads only what the runner writes under ``results/<scenario>/<hw>/``:
``summary.parquet`` (one row per variant) and, per variant,
``variants/<slug>/requests.parquet`` and ``timeline.parquet``.  Never runs a
simulation; matplotlib runs headless (Agg).

* :func:`context_figure` -- seed 004's Figs. 8-10 shape: a metric (mean TTFT,
  mean blocked I/O) against context length, one panel per model, one line
  per design;
* :func:`timeline_figure` -- seed 001's "remaining requests over time": per
  design, requests not yet finished, and those waiting for admission;
* :func:`ttft_cdf_figure` -- the distribution of TTFT per design.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

LABELS = {
    "ttft_mean_s": "mean TTFT (s)",
    "blocked_io_mean_s": "mean blocked I/O time (s)",
    "ttft_p99_s": "P99 TTFT (s)",
    "load_gb": "KV loaded to the GPU (GB)",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_results(root: str | Path) -> tuple[pd.DataFrame, dict[str, dict[str, pd.DataFrame]]]:
    """(summary, variant name -> {"requests": ..., "timeline": ...}) of one run folder."""
    from sim.runner import slug

    root = Path(root)
    summary = pd.read_parquet(root / "summary.parquet")
    per: dict[str, dict[str, pd.DataFrame]] = {}
    for name in summary["variant"]:
        vdir = root / "variants" / slug(name)
        per[name] = {
            t: pd.read_parquet(vdir / f"{t}.parquet")
            for t in ("requests", "timeline")
            if (vdir / f"{t}.parquet").exists()
        }
    return summary, per


def context_figure(df: pd.DataFrame, metric: str = "ttft_mean_s"):
    """``metric`` against context length: one panel per model, one line per design."""
    plt = _plt()
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        sub = df[df["model"] == model]
        for design, g in sub.groupby("design", sort=False):
            g = g.sort_values("context_tokens")
            ax.plot(g["context_tokens"], g[metric], marker="o", label=str(design))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.set_title(model)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize="small")
    fig.tight_layout()
    return fig


def remaining(requests: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per timeline instant: requests released but not finished, and waiting ones."""
    done = requests[~requests["rejected"]]
    t = np.union1d(timeline["t_s"].to_numpy(), done["finish_s"].to_numpy())
    released = np.searchsorted(np.sort(done["release_s"].to_numpy()), t, side="right")
    finished = np.searchsorted(np.sort(done["finish_s"].to_numpy()), t, side="right")
    idx = np.searchsorted(timeline["t_s"].to_numpy(), t, side="right") - 1
    waiting = timeline["waiting"].to_numpy()[np.maximum(idx, 0)]
    return pd.DataFrame({"t_s": t, "remaining": released - finished, "waiting": waiting})


def timeline_figure(per: dict[str, dict[str, pd.DataFrame]]):
    """Remaining (solid) and waiting (dashed) requests over time, per design."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, tables in per.items():
        if "timeline" not in tables or "requests" not in tables:
            continue
        r = remaining(tables["requests"], tables["timeline"])
        (line,) = ax.step(r["t_s"], r["remaining"], where="post", label=name)
        ax.step(r["t_s"], r["waiting"], where="post", ls="--", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests in the system (dashed: waiting)")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def ttft_cdf_figure(per: dict[str, dict[str, pd.DataFrame]]):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, tables in per.items():
        req = tables.get("requests")
        if req is None:
            continue
        x = np.sort(req.loc[~req["rejected"], "ttft_s"].to_numpy())
        ax.plot(x, np.arange(1, len(x) + 1) / max(len(x), 1), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("share of requests")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def write_serving_plots(root: str | Path) -> list[Path]:
    """The figures that fit the run in ``root``, as PNGs beside its tables."""
    plt = _plt()
    root = Path(root)
    summary, per = read_results(root)
    figs = {}
    if "context_tokens" in summary and summary["context_tokens"].nunique() > 1:
        figs["ttft-vs-context"] = context_figure(summary, "ttft_mean_s")
        figs["blocked-io-vs-context"] = context_figure(summary, "blocked_io_mean_s")
    else:
        # a routed fleet's variants keep their timelines per instance, not per design
        if any("timeline" in t and "requests" in t for t in per.values()):
            figs["remaining-requests"] = timeline_figure(per)
        figs["ttft-cdf"] = ttft_cdf_figure(per)
    out = []
    for name, fig in figs.items():
        path = root / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out
