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
# # How real attention selects KV entries (SmolLM2-135M captures)
#
# Measured on access traces captured from a real model (`kvtier trace capture`):
# co-activation (Swarm §3, Fig. 5a), temporal reuse (KVDrive Finding 1, Fig. 7),
# heterogeneity across layers and heads, stability across texts, and how the
# fitted generator preset `smollm2-fitted` compares. Produce captures with:
#
# ```sh
# kvtier trace capture --out traces-real/pydoc-a.parquet --context 7680 --steps 512 --window 256
# kvtier trace capture --out traces-real/pydoc-b.parquet --context 7680 --steps 512 --window 256 \
#     --text-offset 300000
# ```
#
# Set `FOLDER` in the parameters cell (or the environment variable `KVTIER_TRACES`) to the
# folder holding the captures (default `../traces-real`). The first two (sorted by name) are
# text A and text B.
#
# `make lab` opens this notebook with `KVTIER_TRACES` set to `traces-real/`, or, when
# that holds no capture, to the two tiny ones shipped in `analysis/tiny-run/traces/`
# (its `README.md` lists the commands that made them).

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from traces import attention_stats as st
from traces.access import read_access_trace
from traces.fit import compare, generated_stats
from traces.generator import PRESETS

# %% tags=["parameters"]
# the folder holding the captures (the tests inject a tiny one)
FOLDER = os.environ.get("KVTIER_TRACES", "../traces-real")

# %%
FOLDER = Path(FOLDER)
files = sorted(f for f in FOLDER.glob("*.parquet"))
traces = {f.stem: read_access_trace(f) for f in files}
for name, tr in traces.items():
    m = tr.meta
    print(
        f"{name}: {m.source}, N={m.context_tokens}, {m.steps} steps, {m.layers} layers x "
        f"{m.kv_heads} KV heads, sparsity {m.sparsity}, window {m.local_window}, "
        f"sinks {m.sink_tokens}; {dict(m.params)}"
    )
names = list(traces)
A = traces[names[0]]
stats = {name: st.per_head(tr) for name, tr in traces.items()}
df = stats[names[0]]
print(f"{len(traces)} captures; per-head statistics of {names[0]}: {len(df)} heads")

# %% [markdown]
# ## Co-activation: pair probabilities and strong partners per entry
#
# `P_ij = A_ij / T` over the scored selections (sinks and window left out). A strong
# partner: Jaccard >= 0.5 with at least 4 joint activations. The *null* permutes every
# entry's activation series in time (same counts, no structure). Swarm Fig. 5a: some
# entries take part in more than 20 co-activation relationships.

# %%
cols = [
    "p_pair_q50",
    "p_pair_q90",
    "p_pair_q99",
    "p_pair_max",
    "p_pair_zero",
    "jaccard_q99",
    "best_jaccard",
    "null_best_jaccard",
    "partners_mean",
    "null_partners_mean",
    "partners_q90",
    "partners_max",
    "partners_gt20",
    "null_partners_gt20",
]
df[[c for c in cols if c in df]].describe().loc[["mean", "min", "50%", "max"]].T.round(4)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
pairs, nulls, partners = [], [], []
for layer, head in [
    (lay, h)
    for lay in range(0, A.meta.layers, max(1, A.meta.layers // 6))
    for h in range(A.meta.kv_heads)
]:
    X = st.dense_activations(A, layer, head)
    c, n = st.coactivation(X), st.coactivation(X, null=True)
    pairs.append(c["p_pairs"])
    nulls.append(n["p_pairs"])
    partners.append(c["partners"])
pp, nn = np.concatenate(pairs), np.concatenate(nulls)
bins = np.linspace(0, max(pp.max() if len(pp) else 0, 1e-3), 40)
axes[0].hist([pp, nn], bins=bins, label=["real", "null"], log=True)
axes[0].set(xlabel="P_ij = A_ij / T", ylabel="pairs", title="pair co-activation")
axes[0].legend()
part = np.concatenate(partners)
axes[1].hist(part, bins=np.arange(0, max(part.max() if len(part) else 0, 21) + 2) - 0.5, log=True)
axes[1].axvline(20, color="k", ls="--", label="Swarm: > 20")
axes[1].set(xlabel="strong partners per entry", ylabel="entries", title="partners")
axes[1].legend()
print(f"entries with > 20 strong partners: {np.mean(part > 20):.2%} (sampled heads)")

# %% [markdown]
# ## Temporal reuse: next-step overlap, top-M in next top-K, window reload
#
# KVDrive Fig. 7: of the top-M entries of one step, how many are in the next step's
# top-K. Finding 1: a window of the last *w* steps' selections ("x w") avoids reloads.

# %%
topm = [c for c in df.columns if c.startswith("top") and c.endswith("_next")]
reload = [c for c in df.columns if c.startswith("reload_x")]
window = [c for c in df.columns if c.startswith("window_x")]
summary = df[["overlap_next", *topm, *reload, *window]].median().rename("median over heads")
print(summary.round(4).to_string())
fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
by_layer = df.groupby("layer")["overlap_next"]
axes[0].plot(by_layer.mean().index, by_layer.mean(), marker="o")
axes[0].fill_between(by_layer.min().index, by_layer.min(), by_layer.max(), alpha=0.3)
axes[0].set(xlabel="layer", ylabel="|S_t ∩ S_t+1| / |S_t+1|", title="next-step overlap")
frac = [float(c[3:-5]) for c in topm]
axes[1].plot(frac, df[topm].median(), marker="o")
axes[1].set(xlabel="M / K", ylabel="share in next top-K", title="top-M reused (KVDrive Fig. 7)")
w = [int(c.removeprefix("reload_x")) for c in reload]
axes[2].plot(w, df[reload].median(), marker="o", label="reload share")
axes[2].plot(w, df[window].median(), marker="s", label="window size / budget")
axes[2].set(xlabel="window (steps)", title="sliding window (KVDrive Finding 1)")
axes[2].legend()

# %% [markdown]
# ## Heterogeneity across layers and heads

# %%
het_cols = [
    c
    for c in [
        "overlap_next",
        "reload_x2",
        "partners_mean",
        "best_jaccard",
        "mass_selected",
        "mass_forced",
    ]
    if df[c].notna().any()
]
fig, axes = plt.subplots(1, len(het_cols), figsize=(3 * len(het_cols), 4))
for ax, c in zip(np.atleast_1d(axes), het_cols, strict=True):
    grid = df.pivot(index="layer", columns="head", values=c)
    im = ax.imshow(grid.values, aspect="auto", cmap="viridis")
    ax.set(title=c, xlabel="KV head", ylabel="layer")
    fig.colorbar(im, ax=ax)
st.heterogeneity(df, het_cols).round(3)

# %% [markdown]
# ## Stability: profile early, evaluate later; profile on one text, evaluate on another
#
# Within a text: strong pairs found in the first half of the steps, and whether they
# are still strong in the second half. Across texts: per-(layer, head) statistics of
# text A against text B (what an offline per-head profile, e.g. KVDrive's 2D window
# sizing, would rely on).

# %%
rows = []
for layer in range(A.meta.layers):
    for head in range(A.meta.kv_heads):
        X = st.dense_activations(A, layer, head)
        rows.append({"layer": layer, "head": head, **st.pair_persistence(X, len(X) // 2)})
persist = pd.DataFrame(rows)
persist[["strong_pairs", "still_strong", "later_jaccard", "later_jaccard_all"]].median()

# %%
if len(names) >= 2:
    cross = st.cross_stability(stats[names[0]], stats[names[1]], het_cols + ["top0.125_next"])
else:
    cross = "one capture only: no cross-text comparison"
display(cross)

# %% [markdown]
# ## The fitted generator preset against the capture

# %%
gen_df = generated_stats(PRESETS["smollm2-fitted"], A, seeds=2)
compare(df, gen_df).round(4)
