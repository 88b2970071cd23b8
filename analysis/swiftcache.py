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
# # SwiftCache (seed 002): a master borrowing idle KV memory over NVLink
#
# Redraws, from one `kvtier sim` run of the `swiftcache` scenario,
#
# ```sh
# make sim HW=h20-4gpu-nvlink SCENARIO=swiftcache
# ```
#
# the master's TTFT per design (Fig. 7), its breakdown (Fig. 10), the workers'
# interference (Fig. 8) and the longest context per GPU memory size (Fig. 9).
# Tables are written beside the run as Parquet, plots as PNG
# (`analysis/swift_plots.py`). Set `RESULTS` to the run folder, or a folder above it:
# the newest run there whose scenario has a master instance is drawn.
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import os
from pathlib import Path

import pandas as pd
import yaml
from IPython.display import display

from analysis.results import newest_run
from analysis.swift_plots import swift_tables, write_swift_outputs
from sim.scenarios.swiftcache import FIG9_WORKER_SHARE

# %% tags=["parameters"]
# one run folder of the swiftcache scenario (the tests inject a tiny one)
RESULTS = os.environ.get("KVTIER_RESULTS", "../results/swiftcache/h20-4gpu-nvlink")

# %% [markdown]
# The workers' share sizes Fig. 9's SwiftCache column: Eq. 2 sizes the layer stream
# cache by each worker's whole KV memory ("the KV cache size of the i-th worker
# model"), so Fig. 9 uses a share of 1 whatever the run's own split
# (`FIG9_WORKER_SHARE`, `sim/scenarios/swiftcache.py`).


# %%
def has_master(run: Path) -> bool:
    """A run of a scenario with a master instance (SwiftCache's)."""
    path = run / "scenario.yaml"
    doc = yaml.safe_load(path.read_text()) if path.exists() else None
    instances = (doc or {}).get("workload", {}).get("instances", [])
    return any(i.get("role") == "master" for i in instances)


RESULTS = newest_run(RESULTS, "summary.parquet", has_master)
print(f"run: {RESULTS}")
summary = pd.read_parquet(RESULTS / "summary.parquet")
scenario = yaml.safe_load((RESULTS / "scenario.yaml").read_text())
specs = [i for v in [scenario["workload"], *scenario.get("variants", [])]
         for i in v.get("instances", [])]  # fmt: skip
lend_share = FIG9_WORKER_SHARE if specs else 0.0
tables = swift_tables(summary, lend_share)
display(summary[["design", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s", "queue_mean_s"]])

# %% [markdown]
# ## The master's TTFT broken down, and the workers' interference
#
# Expected by mechanism: SwiftCache's blocked load is smallest (NVLink, not
# the shared PCIe host link); the workers slow down only where lending takes
# memory they need or their GPU's time (layer-major resize copies).

# %%
display(tables["breakdown"].round(4))
display(tables["interference"].round(4))

# %% [markdown]
# ## Longest context per GPU memory size (Fig. 9)

# %%
display(tables["max-context"])
written = write_swift_outputs(RESULTS, lend_share)
print("\n".join(p.name for p in written))
