"""The numbers the design validation compares (:mod:`kvtier.compare.designs`):
per design the mean decode-step time and the effective read bandwidth, each backend's
own count of bytes and I/Os, the errors ``(sim - real) / real`` and the ranking of the
designs by step time in both backends (Kendall's tau)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

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
    return {
        "step_ms": float(step_times(ops, warmup).mean() * 1e3),
        "bytes_read": nbytes,
        "n_ios": int(dev["n_ios"].sum()),
        "read_io_s": io_s,
        "read_gbps": nbytes / io_s / 1e9 if io_s > 0 else 0.0,
    }


def design_table(sim: dict[str, dict], real: dict[str, dict]) -> pd.DataFrame:
    """One row per design: both backends' metrics and the errors relative to real."""
    rows = []
    for name in sim:
        s, r = sim[name], real[name]
        rows.append(
            {
                "design": name,
                "sim_step_ms": s["step_ms"],
                "real_step_ms": r["step_ms"],
                "step_error": (s["step_ms"] - r["step_ms"]) / r["step_ms"],
                "sim_read_gbps": s["read_gbps"],
                "real_read_gbps": r["read_gbps"],
                "gbps_error": (s["read_gbps"] - r["read_gbps"]) / r["read_gbps"]
                if r["read_gbps"] > 0
                else math.nan,
                "sim_bytes_read": s["bytes_read"],
                "real_bytes_read": r["bytes_read"],
                "sim_n_ios": s["n_ios"],
                "real_n_ios": r["n_ios"],
                "bytes_match": s["bytes_read"] == r["bytes_read"] and s["n_ios"] == r["n_ios"],
            }
        )
    return pd.DataFrame(rows)


def ranking(table: pd.DataFrame) -> dict[str, Any]:
    """Designs fastest first by simulated and by real step time, and Kendall's tau."""
    sim_order = table.sort_values("sim_step_ms", kind="stable")["design"].tolist()
    real_order = table.sort_values("real_step_ms", kind="stable")["design"].tolist()
    tau = math.nan
    if len(table) > 1:
        tau = float(kendalltau(table["sim_step_ms"], table["real_step_ms"]).statistic)
    return {
        "sim_order": sim_order,
        "real_order": real_order,
        "same_order": sim_order == real_order,
        "kendall_tau": tau,
    }
