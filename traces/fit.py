"""Fit the synthetic generator to captured traces: ``kvtier trace fit``.

The target is the *median over (layer, KV head)* of each statistic of
:mod:`traces.attention_stats` on the real trace: one generator parameter set
stands for a typical head (the spread across heads is reported, not fitted).
The generator runs at the capture's own shape (context, steps, sparsity,
sinks, window; one layer, ``seeds`` independent heads) and the loss is the
sum over :data:`TARGETS` of ``((generated - real) / scale) ** 2`` with
``scale = max(|real|, floor)``.  The search is coordinate descent over the
grids of :data:`GRIDS`: each pass tries every value of one parameter with the
others fixed and keeps the best, starting from the ``default`` preset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd

from traces import attention_stats as st
from traces.access import AccessTrace
from traces.generator import PRESETS, AccessGenerator, GeneratorParams

# statistic -> (weight, floor of its scale)
TARGETS: dict[str, tuple[float, float]] = {
    "overlap_next": (2.0, 0.05),
    "top0.125_next": (1.0, 0.05),
    "reload_x2": (1.0, 0.05),
    "reload_x8": (1.0, 0.05),
    "best_jaccard": (1.0, 0.05),
    "partners_mean": (1.0, 1.0),
    "partners_gt20": (0.5, 0.05),
    "p_pair_q99": (0.5, 0.01),
}
GRIDS: dict[str, tuple] = {
    "drift": (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4),
    "noise": (0.0, 0.1, 0.3, 0.6, 1.0, 2.0),
    "structure": (0.3, 0.5, 0.7, 0.8, 0.9, 0.95),
    "active_groups": (1, 2, 4, 8, 16, 32),
    "group_size": (8.0, 16.0, 32.0, 64.0, 128.0),
    "memberships_mean": (1.0, 1.3, 2.0, 3.0),
    "popularity_skew": (0.5, 1.1, 1.5, 2.0, 3.0),
}


def real_targets(df: pd.DataFrame) -> dict[str, float]:
    """Median over heads of each target statistic (NaN heads left out)."""
    return {k: float(df[k].median()) for k in TARGETS if k in df}


def generated_stats(
    params: GeneratorParams, like: AccessTrace, seeds: int = 2, p: st.StatsParams | None = None
) -> pd.DataFrame:
    """:func:`attention_stats.per_head` of ``seeds`` generated heads shaped like ``like``."""
    m = like.meta
    gen = AccessGenerator(
        params, m.context_tokens, m.steps, layers=1, kv_heads=seeds, sparsity=m.sparsity,
        local_window=m.local_window, sink_tokens=m.sink_tokens, seed=0, name="fit",
    )  # fmt: skip
    return st.per_head(gen.trace(with_scores=True), p or st.StatsParams())


def loss(real: dict[str, float], gen: dict[str, float]) -> float:
    total = 0.0
    for k, (weight, floor) in TARGETS.items():
        if k in real and k in gen and np.isfinite(real[k]) and np.isfinite(gen[k]):
            total += weight * ((gen[k] - real[k]) / max(abs(real[k]), floor)) ** 2
    return total


def fit(
    trace: AccessTrace,
    real: dict[str, float],
    passes: int = 2,
    seeds: int = 2,
    start: GeneratorParams = PRESETS["default"],
    grids: dict[str, tuple] = GRIDS,
    log: Callable[[str], None] | None = None,
) -> tuple[GeneratorParams, float]:
    """Coordinate descent from ``start``; returns the best parameters and their loss."""
    cache: dict[GeneratorParams, float] = {}

    def evaluate(gp: GeneratorParams) -> float:
        if gp not in cache:
            cache[gp] = loss(real, real_targets(generated_stats(gp, trace, seeds)))
        return cache[gp]

    best, best_loss = start, evaluate(start)
    for _ in range(passes):
        for name, grid in grids.items():
            for value in grid:
                cand = dataclasses.replace(best, **{name: value})
                cand_loss = evaluate(cand)
                if cand_loss < best_loss:
                    best, best_loss = cand, cand_loss
            if log:
                log(f"{name} = {getattr(best, name)}: loss {best_loss:.4f} ({len(cache)} evals)")
    return best, best_loss


def compare(real: pd.DataFrame, gen: pd.DataFrame) -> pd.DataFrame:
    """Real vs generated: median (and real quartiles) of every shared statistic."""
    skip = {"layer", "head"}
    rows = []
    for k in [c for c in real.columns if c in gen.columns and c not in skip]:
        r, g = real[k].astype(float), gen[k].astype(float)
        if r.notna().any():
            rows.append({"stat": k, "real_median": r.median(), "real_q25": r.quantile(0.25),
                         "real_q75": r.quantile(0.75), "generated": g.median(),
                         "fitted": k in TARGETS})  # fmt: skip
    return pd.DataFrame(rows).set_index("stat")
