# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Serving with tiered prefix caches: SSD-backed PagedAttention and Unified KV Pooling
#
# Figures of seed 001 (remaining requests over time, hit rates per tier) and
# seed 004 (TTFT and blocked I/O time against context length, Figs. 8-10)
# redrawn from `kvtier sim` results of a serving scenario:
#
# ```sh
# make sim HW=h100-2dimm-2ssd SCENARIO=unified-pooling
# make sim HW=dgx-spark SCENARIO=paged-ssd
# ```
#
# Set `RESULTS` in the parameters cell (or the environment variable
# `KVTIER_RESULTS`) to one run folder (`results/<scenario>/<hw>`) or a folder
# above several; every folder holding a `summary.parquet` of a serving run is
# drawn.
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import display

from analysis.serving_plots import (
    context_figure,
    read_results,
    timeline_figure,
    ttft_cdf_figure,
)

# %% tags=["parameters"]
# one run folder, or a folder above several (the tests inject a tiny one)
RESULTS = os.environ.get("KVTIER_RESULTS", "../results")

# %%
RESULTS = Path(RESULTS)
runs = sorted(p.parent for p in RESULTS.rglob("summary.parquet"))
runs = [r for r in runs if "hit_rate_gpu" in pd.read_parquet(r / "summary.parquet")]
print(f"{len(runs)} serving runs under {RESULTS}")
loaded = {str(r.relative_to(RESULTS)) or r.name: read_results(r) for r in runs}

# %% [markdown]
# ## Per run: the summary table (latency, throughput, hits per tier, blocked I/O)

# %%
COLS = [
    "variant",
    "ttft_mean_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "throughput_tok_s",
    "queue_mean_s",
    "hit_rate_gpu",
    "hit_rate_cpu",
    "hit_rate_ssd",
    "hit_rate_pool",
    "blocked_io_mean_s",
    "load_gb",
    "ssd_util",
]
tables = {name: summary[[c for c in COLS if c in summary]] for name, (summary, _) in loaded.items()}
for name, table in tables.items():
    print(name)
    display(table.round(4))

# %% [markdown]
# ## Context-length sweeps (seed 004): TTFT and blocked I/O per design
#
# Expected by mechanism: pooling's gain over LMCache grows with context (more
# bytes to move, spread over every module and SSD, each with its own stream);
# KV-passthrough matters most where I/Os are many and small (the kernel path's
# per-I/O CPU cost).

# %%
figures = {}
for name, (summary, _) in loaded.items():
    if "context_tokens" in summary and summary["context_tokens"].nunique() > 1:
        figures[name + " ttft"] = context_figure(summary, "ttft_mean_s")
        figures[name + " blocked"] = context_figure(summary, "blocked_io_mean_s")
list(figures)

# %% [markdown]
# ## Request traces (seed 001): remaining requests over time and TTFT distribution
#
# Solid: requests released and not finished; dashed: those waiting for
# admission. Offload tiers shorten the tail when they return prefixes the GPU
# had to evict.

# %%
for name, (summary, per) in loaded.items():
    if "context_tokens" in summary and summary["context_tokens"].nunique() > 1:
        continue
    figures[name + " remaining"] = timeline_figure(per)
    figures[name + " ttft cdf"] = ttft_cdf_figure(per)
print(f"{len(figures)} figures")
