"""The numbers the design validation compares (:mod:`kvtier.compare.designs`):
per design the mean decode-step time and the effective read bandwidth, each backend's
own count of bytes and I/Os, the errors ``(sim - real) / real`` and the ranking of the
designs by step time in both backends (Kendall's tau)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kvtier.contracts.records import Records

WARMUP_STEPS = 1  # decode steps left out: pipeline fill, a throttle's carried-over budget


def busy_time(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals ``[start, end)`` (sorted sweep, O(n log n))."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0], new[1:] = True, s[1:] > reach[:-1]  # a gap before this interval
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return float((reach[last] - s[first]).sum())


def step_times(ops: pd.DataFrame, warmup: int = WARMUP_STEPS) -> np.ndarray:
    """Seconds per decode step: end of its last op minus the previous step's end."""
    ends = ops.groupby("step")["end_s"].max().sort_index()
    prev = np.r_[ops["start_s"].min(), ends.to_numpy()[:-1]]
    return (ends.to_numpy() - prev)[warmup:]


def design_metrics(records: Records, warmup: int = WARMUP_STEPS) -> dict[str, float]:
    """Mean step time, bytes and I/Os read (as the backend counted them), read bandwidth."""
    ops = records.ops.to_pandas()
    dev = records.devices.to_pandas()
    dev = dev[dev["type"] == "ssd"] if "type" in dev else dev
    reads = ops[ops["kind"] == "read"]
    io_s = busy_time(reads["start_s"].to_numpy(), reads["end_s"].to_numpy())
    nbytes = int(dev["bytes_read"].sum())
    paced = records.stats.get("paced_ops", 0)
    return {
        # the share of paced I/O ops the replay's own completions ended (0 in the model)
        "real_bound": records.stats.get("paced_real_bound", 0) / paced if paced else 0.0,
        "step_ms": float(step_times(ops, warmup).mean() * 1e3),
        "bytes_read": nbytes,
        "n_ios": int(dev["n_ios"].sum()),
        "read_io_s": io_s,
        "read_gbps": nbytes / io_s / 1e9 if io_s > 0 else 0.0,
    }


def design_table(sim: dict[str, dict], real: dict[str, list[dict]]) -> pd.DataFrame:
    """One row per design: both backends' metrics and the errors relative to real.

    ``real[name]`` holds one metrics dict per repeat of the replay; the row takes the
    median repeat's step time and bandwidth (:func:`repeat_stats`), the repeats' range
    and the design's noise (``noise``, the relative half-range), and matches the bytes
    and I/Os only when every repeat read what the simulator did."""
    rows = []
    for name in sim:
        s, reps = sim[name], real[name]
        step = repeat_stats([r["step_ms"] for r in reps])
        gbps = float(np.median([r["read_gbps"] for r in reps]))
        r = reps[0]
        rows.append(
            {
                "design": name,
                "sim_step_ms": s["step_ms"],
                "real_step_ms": step["median"],
                "real_step_ms_min": step["min"],
                "real_step_ms_max": step["max"],
                "noise": step["noise"],
                "real_bound": float(np.median([x.get("real_bound", 0.0) for x in reps])),
                "repeats": len(reps),
                "step_error": (s["step_ms"] - step["median"]) / step["median"],
                "sim_read_gbps": s["read_gbps"],
                "real_read_gbps": gbps,
                "gbps_error": (s["read_gbps"] - gbps) / gbps if gbps > 0 else math.nan,
                "sim_bytes_read": s["bytes_read"],
                "real_bytes_read": r["bytes_read"],
                "sim_n_ios": s["n_ios"],
                "real_n_ios": r["n_ios"],
                "bytes_match": all(
                    x["bytes_read"] == s["bytes_read"] and x["n_ios"] == s["n_ios"] for x in reps
                ),
            }
        )
    return pd.DataFrame(rows)


def repeat_stats(values: list[float]) -> dict[str, float]:
    """A design's repeated real step times: their median, range, and its *noise*, the
    half-range relative to the median, ``(max - min) / (2 median)``: the median
    repeat lies within ``median x (1 +- noise)`` of every repeat.  One repeat measures
    no noise (0)."""
    v = np.asarray(values, float)
    med = float(np.median(v))
    lo, hi = float(v.min()), float(v.max())
    return {"median": med, "min": lo, "max": hi, "noise": (hi - lo) / (2 * med) if med else 0.0}


def tied(s_a: float, noise_a: float, s_b: float, noise_b: float) -> bool:
    """Whether two designs' simulated step times lie within the measured noise of each
    other: their bands ``s x (1 +- noise)`` overlap, ``|s_a - s_b| <= noise_a s_a +
    noise_b s_b``.  A tied pair's order is one the replay's noise can swap."""
    return abs(s_a - s_b) <= noise_a * s_a + noise_b * s_b


def ranking(table: pd.DataFrame) -> dict[str, Any]:
    """Designs fastest first by simulated and by real step time, Kendall's tau over
    every pair, and the check on what the noise can separate.

    Pairs whose simulated times are :func:`tied` (by each design's ``noise`` column,
    0 where absent) are left out; over the others, *separable*, ``C`` keep their order
    for real and ``D`` swap it (a real tie counts as neither, and stays in the
    denominator): ``kendall_tau_separable = (C - D) / separable``, NaN when no pair is
    separable, and ``separable_same_order`` holds when ``D = 0``.  ``noise_band`` is the
    largest design noise, ``sim_order_ties`` the simulated order with ``~`` between
    neighbours that are tied."""
    sim_order = table.sort_values("sim_step_ms", kind="stable")["design"].tolist()
    real_order = table.sort_values("real_step_ms", kind="stable")["design"].tolist()
    tau = math.nan
    if len(table) > 1:
        from scipy.stats import kendalltau  # noqa: PLC0415  (scipy.stats: 0.7 s to import)

        tau = float(kendalltau(table["sim_step_ms"], table["real_step_ms"]).statistic)
    by = table.set_index("design")
    sim, real = by["sim_step_ms"], by["real_step_ms"]
    noise = by["noise"] if "noise" in by else pd.Series(0.0, index=by.index)
    names = list(by.index)
    ties, conc, disc, sep = [], 0, 0, 0
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if tied(sim[a], noise[a], sim[b], noise[b]):
                ties.append([a, b])
                continue
            sep += 1
            d = np.sign(sim[a] - sim[b]) * np.sign(real[a] - real[b])
            conc, disc = conc + int(d > 0), disc + int(d < 0)
    chain = sim_order[:1]
    for a, b in zip(sim_order, sim_order[1:], strict=False):
        near = tied(sim[a], noise[a], sim[b], noise[b])
        chain += [" ~ " if near else " < ", b]
    return {
        "sim_order": sim_order,
        "real_order": real_order,
        "same_order": sim_order == real_order,
        "kendall_tau": tau,
        "noise_band": float(noise.max()) if len(noise) else 0.0,
        "tied": ties,
        "separable_pairs": sep,
        "concordant": conc,
        "discordant": disc,
        "kendall_tau_separable": (conc - disc) / sep if sep else math.nan,
        "separable_same_order": disc == 0,
        "sim_order_ties": "".join(chain),
    }
