"""Summary statistics of an access trace: selection sizes, overlap, co-activation.

:func:`trace_stats` measures the structure a generator preset is meant to
have (the tests of :mod:`traces.generator` compare presets by it): how much
consecutive steps' selections overlap and whether entries co-activate in
groups or by chance.
"""

from __future__ import annotations

import numpy as np

from traces.access_trace import AccessTrace


def trace_stats(trace: AccessTrace, sample: int = 2000, seed: int = 0) -> dict[str, float]:
    """Summary numbers of a trace.

    * ``selected_mean/min/max``: entries per selection (row);
    * ``overlap_jaccard``: mean Jaccard index of consecutive steps' selections
      (same layer and head);
    * ``unique_entries`` / ``unique_fraction``: entries touched at least once
      per (layer, head), mean over them, and as a fraction of all entries;
    * ``coact_*``: pairwise co-activation of layer 0, head 0 on a sample of up
      to ``sample`` entries that are active in some but not all steps (sinks and
      entries always in the window are left out): ``coact_mean`` is the mean of
      P(i and j active) over sampled pairs and ``coact_indep`` the mean of
      P(i) P(j) (the two agree whatever the structure: the selection size is
      fixed); ``coact_chi2`` is the mean of ``steps * phi_ij**2`` (phi: the
      correlation of the two activation series), about 1 when entries
      co-activate by chance and far above 1 when they come in groups;
      ``coact_cond`` is the mean P(j active | i active) and ``coact_best`` the
      mean over i of the best P(j | i) -- what a clustering could exploit.
    """
    m = trace.meta
    sizes = np.diff(trace.offsets)
    out: dict[str, float] = {
        "rows": float(m.rows),
        "selected_mean": float(sizes.mean()) if len(sizes) else 0.0,
        "selected_min": float(sizes.min()) if len(sizes) else 0.0,
        "selected_max": float(sizes.max()) if len(sizes) else 0.0,
    }
    jac, uniq = [], []
    for layer in range(m.layers):
        for head in range(m.kv_heads):
            x = trace.activations(layer, head)
            uniq.append(np.count_nonzero(np.bincount(x.indices, minlength=1)))
            if m.steps > 1:
                inter = np.asarray(x[:-1].multiply(x[1:]).sum(axis=1)).ravel()
                n = np.diff(x.indptr)
                union = n[:-1] + n[1:] - inter
                jac.append(np.where(union > 0, inter / np.maximum(union, 1), 1.0))
    out["overlap_jaccard"] = float(np.concatenate(jac).mean()) if jac else float("nan")
    out["unique_entries"] = float(np.mean(uniq)) if uniq else 0.0
    out["unique_fraction"] = out["unique_entries"] / max(1, m.entries)
    out.update(_coactivation(trace, sample, seed))
    return out


def _coactivation(trace: AccessTrace, sample: int, seed: int) -> dict[str, float]:
    m = trace.meta
    nan = float("nan")
    keys = ("coact_pairs", "coact_mean", "coact_indep", "coact_chi2", "coact_cond", "coact_best")
    if m.steps < 2:
        return dict.fromkeys(keys, nan)
    x = trace.activations(0, 0).tocsc()
    counts = np.diff(x.indptr)
    candidates = np.flatnonzero((counts > 0) & (counts < m.steps))
    if len(candidates) < 2:
        return dict.fromkeys(keys, nan)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(candidates, size=min(sample, len(candidates)), replace=False))
    a = x[:, pick].astype(np.float32)
    both = (a.T @ a).toarray()
    p = counts[pick] / m.steps
    iu = np.triu_indices(len(pick), k=1)
    joint = both[iu] / m.steps
    indep = (p[:, None] * p[None, :])[iu]
    var = p * (1 - p)
    phi2 = (joint - indep) ** 2 / (var[:, None] * var[None, :])[iu]
    cond = both / counts[pick][:, None]
    np.fill_diagonal(cond, np.nan)
    return {
        "coact_pairs": float(len(joint)),
        "coact_mean": float(joint.mean()),
        "coact_indep": float(indep.mean()),
        "coact_chi2": float(m.steps * phi2.mean()),
        "coact_cond": float(np.nanmean(cond)),
        "coact_best": float(np.nanmax(cond, axis=1).mean()),
    }
