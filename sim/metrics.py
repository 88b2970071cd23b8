"""Metrics: summaries computed from records (never from the executor's state).

Everything here takes the ops/devices tables that both executors produce, so
the same numbers can be computed for a simulated and a real run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.core.units import GB


def io_spans(ops: pd.DataFrame) -> pd.Series:
    """Per (step, layer): time from the first SSD read start to the last end."""
    io = ops[ops["kind"].isin(["read", "write"])]
    if io.empty:
        return pd.Series(dtype=float)
    g = io.groupby(["step", "layer"], sort=True)
    return g["end_s"].max() - g["start_s"].min()


def queue_bound_share(reads: pd.DataFrame, profile: HardwareProfile, queue_depth: int) -> float:
    """Share of reads that took as long as their queue depth alone allows.

    With ``q`` I/Os of size ``s`` in flight and latency ``L``, a stream moves
    at most ``q * s / L`` (Little's law); a read that lasted at least 95% of
    ``L + bytes / (q * s / L)``; a read whose duration is within 5% of that
    was bounded by its queue depth (it cannot be faster; if it is much
    slower, something else bounded it).
    """
    if reads.empty:
        return 0.0
    lat = reads["src"].map(lambda s: profile.ssd(s).read_latency_us * 1e-6)
    maxqd = reads["src"].map(lambda s: profile.ssd(s).max_queue_depth)
    qd = np.minimum(queue_depth or maxqd, np.minimum(maxqd, reads["n_ios"]))
    io = reads["bytes"] / reads["n_ios"]
    bound = lat + reads["bytes"] / (qd * io / lat)
    dur = reads["end_s"] - reads["start_s"]
    return float(((dur - bound).abs() <= 0.05 * bound).mean())


def decode_summary(ops_table: pa.Table, devices_table: pa.Table, profile: HardwareProfile,
                   batch: int, ssds_used: list[str], queue_depth: int = 0) -> dict[str, Any]:
    """Throughput, I/O time and device utilisation of a decode run."""
    ops = ops_table.to_pandas()
    dev = devices_table.to_pandas().set_index("device")
    makespan = float(ops["end_s"].max()) if len(ops) else 0.0
    steps = int(ops["step"].nunique())
    spans = io_spans(ops)
    read_bytes = int(ops.loc[ops["kind"] == "read", "bytes"].sum())
    n_ios = int(ops.loc[ops["kind"] == "read", "n_ios"].sum())
    agg_bw = sum(profile.ssd(s).read_gbps for s in ssds_used) * GB
    eff_bw = read_bytes / makespan if makespan > 0 else 0.0
    io_time = float(spans.sum()) / steps if steps else 0.0
    io_bw = read_bytes / float(spans.sum()) if len(spans) and spans.sum() > 0 else 0.0
    busiest = dev["util_mean"].idxmax() if len(dev) else ""
    cpu = dev.loc["cpu"] if "cpu" in dev.index else None
    reads = ops[ops["kind"] == "read"]
    dur = reads["end_s"] - reads["start_s"]
    # an op is CPU-bound when its software path took (almost) as long as the op
    cpu_bound = float((reads["cpu_s"] >= 0.95 * dur).mean()) if len(reads) else 0.0
    return {
        "steps": steps,
        "step_ms": 1e3 * makespan / steps if steps else np.nan,
        "tokens_per_s": batch * steps / makespan if makespan > 0 else np.nan,
        "io_ms_per_step": 1e3 * io_time,
        "read_bytes_per_step": read_bytes / steps if steps else 0,
        "ios_per_step": n_ios / steps if steps else 0,
        "ssd_gbps_during_io": io_bw / GB,
        "ssd_gbps_overall": eff_bw / GB,
        "ssd_share_of_aggregate": io_bw / agg_bw if agg_bw else np.nan,
        "cpu_cores_busy": float(cpu["util_mean"]) * profile.cpu.cores if cpu is not None else 0.0,
        "cpu_bound_share": cpu_bound,
        "queue_bound_share": queue_bound_share(reads, profile, queue_depth),
        "busiest": busiest,
        "busiest_util": float(dev.loc[busiest, "util_mean"]) if busiest else np.nan,
        "makespan_s": makespan,
    }
