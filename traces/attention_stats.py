"""What real attention does, measured on access traces (captured or generated).

Per (layer, KV head), on the *scored* selections (``AccessTrace.activations(
scored_only=True)``: the sinks and the local window are selected whatever the
query, so they would co-activate with everything):

* **Co-activation** (Swarm §5.1, Eq. 2 read as ``P_ij = A_ij / T``;
  ``A_ij``: steps selecting i and j together, ``T``: steps).  Pairs are
  (i, j) with i in a sample of entries selected at least twice and j any
  other such entry.  ``jaccard_ij = A_ij / (f_i + f_j - A_ij)`` (``f_i``:
  i's own count) is 1 for two entries always selected together.  A *strong
  partner* of i is a j with ``jaccard_ij >= strong`` and ``A_ij >= min_joint``
  (Swarm Fig. 5a counts "co-activation relationships" per entry; more than
  20 for some).  The same numbers on a *null* (each entry's activation series
  permuted in time: counts kept, structure destroyed) say what chance gives.
* **Temporal overlap** (KVDrive Finding 1, Fig. 7): ``overlap_next`` is
  ``|S_t ∩ S_t+1| / |S_t+1|``; ``topm_next[M]`` the share of step t's top-M
  (by score) that step t+1 selects again, M a fraction of the scored budget;
  ``reload[w]`` the share of ``S_t`` outside the union of the ``w`` previous
  steps' selections (KVDrive's "x w" window; ``reload[0] = 1``) and
  ``window_size[w]`` that union's size over the budget (its memory cost).
* **Attention mass** (captures, whose scores are softmax sums over the query
  heads of a KV group): ``mass_selected`` the share of the attention the
  selection holds, ``mass_forced`` the share the sinks and window hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traces.access import AccessTrace, forced_ids

WINDOWS = (0, 1, 2, 3, 4, 8)
TOPM = (0.125, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class StatsParams:
    strong: float = 0.5  # Jaccard at or above which j is a strong partner of i
    min_joint: int = 4  # ... and at least this many joint activations
    sample: int = 256  # entries i whose partners are counted exactly (against all j)
    seed: int = 0


def dense_activations(trace: AccessTrace, layer: int = 0, head: int = 0) -> np.ndarray:
    """``steps x entries`` bool: the scored selections (sinks and window left out)."""
    return trace.activations(layer, head, scored_only=True).toarray()


def coactivation(
    X: np.ndarray, p: StatsParams = StatsParams(), null: bool = False
) -> dict[str, object]:
    """Pair probabilities, Jaccard and strong partners of a ``T x E`` bool matrix.

    Returns arrays ``p_pairs`` (``A_ij / T``), ``jaccard`` and ``partners``
    (strong partners of each sampled i) and the sample size.  ``null``
    permutes every column in time first (seeded by ``p.seed``).
    """
    rng = np.random.default_rng(p.seed)
    counts = X.sum(0)
    cand = np.flatnonzero(counts >= 2)
    if len(cand) < 2:
        empty = np.empty(0)
        return {"p_pairs": empty, "jaccard": empty, "partners": empty, "candidates": len(cand)}
    Xc = X[:, cand]
    if null:
        Xc = rng.permuted(Xc, axis=0)
    pick = np.sort(rng.choice(len(cand), size=min(p.sample, len(cand)), replace=False))
    a = Xc.astype(np.float32)
    joint = a[:, pick].T @ a  # sample x candidates
    joint[np.arange(len(pick)), pick] = 0  # no self pairs
    f = counts[cand].astype(np.float64)
    union = f[pick][:, None] + f[None, :] - joint
    jac = np.where(union > 0, joint / np.maximum(union, 1), 0.0)
    mask = np.ones(joint.shape, dtype=bool)
    mask[np.arange(len(pick)), pick] = False
    strong = (jac >= p.strong) & (joint >= p.min_joint)
    return {
        "p_pairs": joint[mask] / X.shape[0],
        "jaccard": jac[mask],
        "partners": strong.sum(1),
        "candidates": len(cand),
    }


def coactivation_summary(X: np.ndarray, p: StatsParams = StatsParams()) -> dict[str, float]:
    """Quantiles of the pair probabilities and partner counts, real and null."""
    out: dict[str, float] = {}
    for tag, null in (("", False), ("null_", True)):
        c = coactivation(X, p, null)
        pp, jac, part = c["p_pairs"], c["jaccard"], c["partners"]
        if tag == "":
            out["candidates"] = float(c["candidates"])
            if len(pp):
                out.update({f"p_pair_q{q}": float(np.quantile(pp, q / 100)) for q in (50, 90, 99)})
                out["p_pair_max"] = float(pp.max())
                out["p_pair_zero"] = float(np.mean(pp == 0))
                out["jaccard_q99"] = float(np.quantile(jac, 0.99))
        if len(part):
            out[f"{tag}partners_mean"] = float(part.mean())
            out[f"{tag}partners_q90"] = float(np.quantile(part, 0.9))
            out[f"{tag}partners_max"] = float(part.max())
            out[f"{tag}partners_gt20"] = float(np.mean(part > 20))
            out[f"{tag}best_jaccard"] = _best(jac, len(part))
    return out


def _best(jac: np.ndarray, rows: int) -> float:
    """Mean over sampled i of its best partner's Jaccard (``jac`` is row-major, self removed)."""
    return float(jac.reshape(rows, -1).max(1).mean()) if rows and len(jac) else float("nan")


def overlap_next(X: np.ndarray) -> np.ndarray:
    """``|S_t ∩ S_t+1| / |S_t+1|`` for t = 0..T-2 (1 where ``S_t+1`` is empty)."""
    inter = (X[:-1] & X[1:]).sum(1)
    size = X[1:].sum(1)
    return np.where(size > 0, inter / np.maximum(size, 1), 1.0)


def window_reload(X: np.ndarray, windows=WINDOWS) -> dict[int, tuple[float, float]]:
    """``w -> (reload share, window size / budget)``, mean over steps ``t >= max(windows)``."""
    T = len(X)
    cum = np.zeros((T + 1, X.shape[1]), dtype=np.int32)
    np.cumsum(X, axis=0, out=cum[1:])
    size = X.sum(1).astype(np.float64)
    w_max = max(windows)
    steps = np.arange(w_max, T)
    out = {}
    if len(steps) == 0 or size[steps].sum() == 0:
        return {w: (float("nan"), float("nan")) for w in windows}
    for w in windows:
        if w == 0:
            out[w] = (1.0, 0.0)
            continue
        held = (cum[steps] - cum[steps - w]) > 0  # union of steps t-w..t-1
        new = (X[steps] & ~held).sum(1)
        out[w] = (float(new.sum() / size[steps].sum()), float(held.sum(1).mean() / size.mean()))
    return out


def topm_next(trace: AccessTrace, layer: int, head: int, fractions=TOPM) -> dict[float, float]:
    """Share of step t's top ``M = f * |scored|`` (by score) that step t+1 selects again."""
    m = trace.meta
    if trace.scores is None or m.steps < 2:
        return dict.fromkeys(fractions, float("nan"))
    hits = {f: [] for f in fractions}
    nxt = None
    for t in range(m.steps - 1, -1, -1):
        ids, sc = _scored_row(trace, t, layer, head)
        if nxt is not None and len(ids):
            order = ids[np.argsort(-sc.astype(np.float64), kind="stable")]
            for f in fractions:
                top = order[: max(1, round(f * len(order)))]
                hits[f].append(np.isin(top, nxt).mean())
        nxt = trace.selection(t, layer, head)
    return {f: float(np.mean(v)) if v else float("nan") for f, v in hits.items()}


def _scored_row(trace: AccessTrace, t: int, layer: int, head: int):
    m = trace.meta
    r = trace.row(t, layer, head)
    lo, hi = trace.offsets[r], trace.offsets[r + 1]
    ids, sc = trace.indices[lo:hi], trace.scores[lo:hi]
    keep = ~np.isin(ids, forced_ids(m.context_tokens + t + 1, m.sink_tokens, m.local_window))
    return ids[keep], sc[keep]


def attention_mass(trace: AccessTrace, layer: int, head: int) -> tuple[float, float]:
    """``(mass_selected, mass_forced)``, mean over steps; NaN unless the trace is a capture."""
    params = dict(trace.meta.params)
    if trace.scores is None or params.get("aggregation") != "sum-softmax":
        return float("nan"), float("nan")
    per = float(params.get("heads_per_kv_head", 1))
    m = trace.meta
    sel, forced = [], []
    for t in range(m.steps):
        r = trace.row(t, layer, head)
        lo, hi = trace.offsets[r], trace.offsets[r + 1]
        sc = trace.scores[lo:hi].astype(np.float64)
        f = np.isin(trace.indices[lo:hi], forced_ids(m.context_tokens + t + 1, m.sink_tokens,
                                                       m.local_window))  # fmt: skip
        sel.append(sc.sum() / per)
        forced.append(sc[f].sum() / per)
    return float(np.mean(sel)), float(np.mean(forced))


def head_stats(trace: AccessTrace, layer: int, head: int, p: StatsParams = StatsParams()) -> dict:
    """Every statistic of one (layer, head) as a flat dict."""
    X = dense_activations(trace, layer, head)
    row: dict[str, float] = {"layer": layer, "head": head}
    ov = overlap_next(X)
    row["overlap_next"] = float(ov.mean()) if len(ov) else float("nan")
    for f, v in topm_next(trace, layer, head).items():
        row[f"top{f:g}_next"] = v
    for w, (reload, size) in window_reload(X).items():
        row[f"reload_x{w}"] = reload
        row[f"window_x{w}"] = size
    row.update(coactivation_summary(X, p))
    row["mass_selected"], row["mass_forced"] = attention_mass(trace, layer, head)
    return row


def per_head(trace: AccessTrace, p: StatsParams = StatsParams(), heads=None) -> pd.DataFrame:
    """:func:`head_stats` of every (layer, head), or of the given ``heads`` pairs."""
    m = trace.meta
    pairs = heads or [(lay, h) for lay in range(m.layers) for h in range(m.kv_heads)]
    return pd.DataFrame([head_stats(trace, lay, h, p) for lay, h in pairs])


def heterogeneity(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Spread of each statistic across (layer, head): min, quartiles, max, and the share of
    its variance explained by the layer (the rest is between heads of a layer)."""
    rows = []
    for c in columns:
        v = df[c].astype(float)
        layer_means = df.groupby("layer")[c].transform("mean")
        total = float(((v - v.mean()) ** 2).sum())
        between = float(((layer_means - v.mean()) ** 2).sum())
        rows.append({
            "stat": c, "min": v.min(), "q25": v.quantile(0.25), "median": v.median(),
            "q75": v.quantile(0.75), "max": v.max(),
            "layer_share_of_variance": between / total if total > 0 else float("nan"),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("stat")


def cross_stability(a: pd.DataFrame, b: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per statistic: how well (layer, head) values on one text predict those on another
    (Pearson and Spearman correlation across heads, mean absolute difference)."""
    j = a.merge(b, on=["layer", "head"], suffixes=("_a", "_b"))
    rows = []
    for c in columns:
        x, y = j[f"{c}_a"].astype(float), j[f"{c}_b"].astype(float)
        rows.append({
            "stat": c, "mean_a": x.mean(), "mean_b": y.mean(), "pearson": x.corr(y),
            "spearman": x.corr(y, method="spearman"), "mean_abs_diff": (x - y).abs().mean(),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("stat")


def pair_persistence(X: np.ndarray, split: int, p: StatsParams = StatsParams()) -> dict:
    """Profile on steps ``< split``, evaluate on the rest: of the strong pairs found in the
    profile, the share still strong later, and their mean later Jaccard (vs all pairs')."""
    a, b = X[:split], X[split:]
    counts = a.sum(0)
    cand = np.flatnonzero(counts >= max(2, p.min_joint))
    if len(cand) < 2 or len(b) < 1:
        return {"strong_pairs": 0.0, "still_strong": float("nan"), "later_jaccard": float("nan")}
    rng = np.random.default_rng(p.seed)
    pick = np.sort(rng.choice(len(cand), size=min(p.sample, len(cand)), replace=False))
    ja, _ = _jaccard(a[:, cand], pick)
    jb, _ = _jaccard(b[:, cand], pick)
    strong_a = (ja >= p.strong) & (_joint(a[:, cand], pick) >= p.min_joint)
    strong_a[np.arange(len(pick)), pick] = False
    strong_b = jb >= p.strong
    n = int(strong_a.sum())
    return {
        "strong_pairs": float(n),
        "still_strong": float(strong_b[strong_a].mean()) if n else float("nan"),
        "later_jaccard": float(jb[strong_a].mean()) if n else float("nan"),
        "later_jaccard_all": float(jb.mean()),
    }


def _joint(X: np.ndarray, pick: np.ndarray) -> np.ndarray:
    a = X.astype(np.float32)
    return a[:, pick].T @ a


def _jaccard(X: np.ndarray, pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    joint = _joint(X, pick)
    f = X.sum(0).astype(np.float64)
    union = f[pick][:, None] + f[None, :] - joint
    return np.where(union > 0, joint / np.maximum(union, 1), 0.0), joint
