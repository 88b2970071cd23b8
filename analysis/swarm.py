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
# # Swarm on the simulator: sweeps
#
# Figures of seed 000 (Swarm) §8.4 redrawn from `kvtier sweep` results (Parquet).
# Produce them with, for example:
#
# ```sh
# kvtier sweep --factor ssds --values 1,2,4,8
# kvtier sweep --factor context_tokens --values 8192,16384,32768,65536
# kvtier sweep --factor batch --values 1,4,8
# kvtier sweep --factor sparsity --values 0.02,0.05,0.1,0.2
# kvtier sweep --factor hw --values h20-8ssd,h20-8ssd-900p
# ```
#
# Set `RESULTS` in the parameters cell (or the environment variable `KVTIER_RESULTS`)
# to the folder that holds the `sweep-*.parquet` files (default:
# `results/sweeps/default`, searched recursively).
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import os
from pathlib import Path

import pandas as pd

from analysis.plots import sweep_figure

# %% tags=["parameters"]
# folder searched recursively for sweep-*.parquet (the tests inject a tiny one)
RESULTS = os.environ.get("KVTIER_RESULTS", "../results/sweeps/default")

# %%
RESULTS = Path(RESULTS)
files = sorted(RESULTS.rglob("sweep-*.parquet"))
print(f"{len(files)} sweep tables under {RESULTS}")
sweeps = {f.stem.removeprefix("sweep-"): pd.read_parquet(f) for f in files}

# %% [markdown]
# ## One figure per sweep: throughput, effective SSD bandwidth, I/O time, recall

# %%
METRICS = ["tokens_per_s", "ssd_gbps", "io_ms_per_step", "recall"]
# a sweep over several factors (sweep-ssds-batch) is drawn against its first factor,
# one line per variant and value of the others (as `kvtier sweep` plots it)
figures = {
    name: sweep_figure(df, name.split("-")[0], METRICS, f"sweep over {name}")
    for name, df in sweeps.items()
}
list(figures)

# %% [markdown]
# ## Expected by mechanism
#
# * **SSD count** — Swarm's bandwidth grows with SSDs (co-activated entries are
#   spread and balanced), No balance stays near one SSD's; with one SSD every
#   design reads the same way.
# * **Prefix length / batch** — small prefixes are IOPS-bound, long ones
#   bandwidth-bound (seed §8.4, Fig. 16).
# * **SSD type** — the 900P leaves the IOPS-bound regime at shorter prefixes.
# * **Unstructured traces** — clustering gains nothing (`trace: unstructured`).

# %%
frames = [df.assign(sweep=f) for f, df in sweeps.items()]
summary = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
cols = [c for c in ("sweep", "variant", "tokens_per_s", "ssd_gbps", "recall") if c in summary]
summary[cols].groupby(["sweep", "variant"]).mean().round(3) if len(summary) else summary
