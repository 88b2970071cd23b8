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
# # Simulator vs real replay
#
# Renders the report of `kvtier real validate` (`make real`): the same plan ran
# in the simulator and on real (or emulated) SSDs:
#
# ```sh
# make real   # kvtier real validate $(REAL_ARGS) --out results/real ...: see the Makefile
# ```
#
# Set `OUT` in the
# parameters cell (or the environment variable `KVTIER_VALIDATION`) to its output
# folder, or a folder above it (default `results/real`; else `KVTIER_RESULTS`): the newest
# report there is drawn.
#
# Error = (simulated - real) / real, per step and per op, by regime: latency-
# (QD1 4 KiB), IOPS- (deep-queue 4 KiB) and bandwidth-bound (1 MiB reads and
# writes).  Per-device bytes and I/O counts must match exactly.
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import json
import os

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from analysis.results import newest_run

# %% tags=["parameters"]
# the output folder of `kvtier real validate` (the tests inject a tiny one)
OUT = os.environ.get("KVTIER_VALIDATION", os.environ.get("KVTIER_RESULTS", "../results/real"))

# %%
OUT = newest_run(OUT, "report.json", lambda d: (d / "steps.parquet").exists())
report = json.loads((OUT / "report.json").read_text())
steps = pd.read_parquet(OUT / "steps.parquet")
ops = pd.read_parquet(OUT / "ops.parquet")
sha, host = report["git"].get("sha", "?")[:10], report["machine"].get("hostname", "?")
print(f"git {sha}  machine {host}  engine: {report.get('engine')}")
print(f"bytes match: {report['bytes_match']}  within target: {report['within_target']}")

# %%
by_regime = pd.DataFrame(report["by_regime"]).T
by_regime.round(3)

# %%
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
for regime, g in steps.groupby("regime", sort=False):
    a.plot(g["step"], g["real_s"] * 1e3, "o-", label=f"{regime} real")
    a.plot(g["step"], g["sim_s"] * 1e3, "x--", label=f"{regime} sim")
a.set(xlabel="step", ylabel="ms", title="step time")
a.legend(fontsize=7)
regimes = list(dict.fromkeys(ops["tag"]))
b.boxplot([ops.loc[ops["tag"] == r, "error"] * 100 for r in regimes], tick_labels=regimes)
b.axhline(0, color="k", lw=0.8)
b.set(ylabel="(sim - real) / real (%)", title="per-op error")
fig.tight_layout()

# %%
device_bytes = pd.read_csv(OUT / "bytes.csv")
display(device_bytes)
