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
# # KVDrive (seed 003) on the simulator
#
# Throughput per design, the per-layer time breakdown (selection, lookup, SSD I/O,
# host-to-device copy, CPU attention, attention+FFN: Figs. 16-18), GPU cache hit rate
# and GPU memory, and DRAM-only against DRAM+SSD (Fig. 21), from the tables of
#
# ```sh
# make sim HW=l20-server SCENARIO=kvdrive   # the paper's pairs, 16 steps (kvdrive-quick: 16K)
# kvtier sweep --scenario kvdrive-sweep --jobs 2 --factor hw=l20-server,h20-server,rtx4090-ws
# ```
#
# Set `RESULTS` in the parameters cell (or `KVTIER_RESULTS`) to a folder above the
# runs: every `summary.csv` (one `kvtier sim` run) and `sweep-*.parquet` under it whose
# rows are kvdrive rows (a `kv_fetch_ms_per_layer` column) is read.
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

# %% tags=["parameters"]
# folder searched recursively (the tests inject a tiny one)
RESULTS = os.environ.get("KVTIER_RESULTS", "../results")

# %%
RESULTS = Path(RESULTS)
STAGES = ["select", "lookup", "kv_fetch", "h2d", "cpu_attn", "attn"]
frames = []
for f in sorted(RESULTS.rglob("summary.csv")) + sorted(RESULTS.rglob("sweep-*.parquet")):
    df = pd.read_csv(f) if f.suffix == ".csv" else pd.read_parquet(f)
    if "kv_fetch_ms_per_layer" in df:
        frames.append(df.assign(source=str(f.relative_to(RESULTS))))
runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
if len(runs):  # a run over pairs names its variants "design | 60K | 8": context, batch are keys
    runs["variant"] = runs["variant"].str.split(" | ", n=1, regex=False).str[0]
KEYS = [c for c in ("source", "hw", "context_tokens", "batch") if c in runs]
print(f"{len(frames)} kvdrive tables, {len(runs)} rows under {RESULTS}")

# %% [markdown]
# ## Throughput, GPU cache hit rate, GPU memory (one row per run and design)

# %%
cols = KEYS + ["variant", "tokens_per_s", "step_ms", "gpu_hit_rate", "recall", "gpu_mem_gb"]
runs[cols].round(3) if len(runs) else runs

# %% [markdown]
# ## Per-layer time of each stage (ms; a stage's time is when any of its ops runs)

# %%
breakdown = runs.set_index(KEYS + ["variant"])[[f"{s}_ms_per_layer" for s in STAGES]]
breakdown.columns = STAGES
fig_breakdown, ax = plt.subplots(figsize=(10, 0.35 * max(4, len(breakdown))))
breakdown.plot.barh(stacked=True, ax=ax)
ax.set_xlabel("per-layer time (ms)")
ax.set_title("per-layer time breakdown")
fig_breakdown.tight_layout()

# %% [markdown]
# ## DRAM-only vs DRAM+SSD (Fig. 21: the paper loses 40% of throughput with SSD)
#
# The ratio of the DRAM + SSD run to `KVDrive (DRAM only)` at the same point: in
# `kvdrive-sweep` that is `KVDrive (SFC)` (a quarter of the prefix in DRAM, the rest on
# SSD), in `kvdrive` (the paper's pairs) `KVDrive (64 GB host)` at 360K x 2; present only
# where both variants ran.

# %%
tput = runs.pivot_table(index=KEYS, columns="variant", values="tokens_per_s")
SSD = "KVDrive (64 GB host)" if "KVDrive (64 GB host)" in tput.columns else "KVDrive (SFC)"
both = {SSD, "KVDrive (DRAM only)"} <= set(tput.columns)
ssd_over_dram = (tput[SSD] / tput["KVDrive (DRAM only)"]).dropna() if both else pd.Series()
ssd_over_dram.round(3)
