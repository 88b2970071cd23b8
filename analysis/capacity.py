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
# # Capacity plan: cost fronts and what binds each point
#
# Drawn from the `plan.parquet` of one `kvtier plan` run (`make plan`, or
# `kvtier plan --out DIR ...`): the Pareto fronts of machine cost against P99
# TTFT and tokens/s, each point coloured by its binding resource (the largest
# used share of a capacity), and the bottleneck map (SSD count x DRAM per design;
# one panel per GPU count when the plan searched several: tensor parallelism over
# N GPUs, each rank on its share of the host).  `RESULTS` may be a folder above several
# plans: the newest `plan.parquet` of a `kvtier plan` under it is drawn.
#
# ```sh
# make plan   # kvtier plan $(PLAN_ARGS) --out results/plan: see the Makefile
# ```
#
# `make lab` opens this notebook with `KVTIER_RESULTS` set to your results folder
# (`results/`), or, when that holds none, to the tiny run shipped in `analysis/tiny-run/`
# (its `README.md` lists the commands that made it).

# %%
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from IPython.display import display

from analysis.capacity_plots import bottleneck_map, classes, pareto_figure
from analysis.results import newest_run

# %% tags=["parameters"]
# the folder kvtier plan wrote (the tests inject a tiny one)
RESULTS = os.environ.get("KVTIER_RESULTS", "../results/plan")

# %%
# a kvtier plan's table (priced points), not a transfer plan of a `kvtier sim` run
RESULTS = newest_run(
    RESULTS, "plan.parquet", lambda d: "cost_usd" in pq.read_schema(d / "plan.parquet").names
)
print(f"plan: {RESULTS}")
plan = pd.read_parquet(Path(RESULTS) / "plan.parquet")
plan = plan.assign(bottleneck_class=classes(plan))
ok = plan[plan["status"] == "ok"]
print(f"{len(ok)} evaluated points of a {len(plan)}-point grid")
shown = ["design", "gpus", "ssds", "dram_modules", "cost_usd", "ttft_p99_s", "bottleneck"]
display(ok.sort_values("cost_usd")[[c for c in shown if c in ok]])

# %% [markdown]
# ## Cost vs latency and throughput (the front as a line)

# %%
front = pareto_figure(plan)

# %% [markdown]
# ## Bottleneck map

# %%
bmap = bottleneck_map(plan)

# %% [markdown]
# ## The GPU dimension: the best point at each GPU count
#
# Per GPU count (0: the base's GPUs, serving on one), the lowest P99 TTFT and
# the highest tokens/s any evaluated point reached, and the cheapest point's
# cost and bottleneck: where one more GPU stops paying, the bottleneck has left
# the GPU (an NVLink port under the all-reduce, or a host resource every rank
# shares).

# %%
by_gpus = (
    ok.sort_values("cost_usd")
    .groupby("gpus" if "gpus" in ok else "design")
    .agg(points=("key", "size"), cheapest_usd=("cost_usd", "first"),
         best_ttft_s=("ttft_p99_s", "min"), best_tok_s=("throughput_tok_s", "max"),
         cheapest_bound_by=("bottleneck", "first"))
)  # fmt: skip
display(by_gpus)
