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
from kvtier.contracts.units import GB


def fetch_spans(ops: pd.DataFrame) -> pd.Series:
    """Per (step, layer): time from the first KV fetch start to the last end."""
    fetch = ops[ops["tag"] == "kv_fetch"]
    if fetch.empty:
        return pd.Series(dtype=float)
    g = fetch.groupby(["step", "layer"], sort=True)
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


def decode_summary(
    ops_table: pa.Table,
    devices_table: pa.Table,
    profile: HardwareProfile,
    batch: int,
    ssds_used: list[str],
    queue_depth: int = 0,
) -> dict[str, Any]:
    """Throughput, KV-fetch time and device utilisation of a decode run.

    ``fetch`` is every op tagged ``kv_fetch`` (SSD reads, or the DRAM / peer
    copies when the KV lives there); SSD shares are NaN when no SSD is used.
    """
    ops = ops_table.to_pandas()
    dev = devices_table.to_pandas().set_index("device")
    makespan = float(ops["end_s"].max()) if len(ops) else 0.0
    steps = int(ops["step"].nunique())
    spans = fetch_spans(ops)
    fetch = ops[ops["tag"] == "kv_fetch"]
    fetch_bytes = int(fetch["bytes"].sum())
    reads = ops[ops["kind"] == "read"]
    agg_bw = sum(profile.ssd(s).read_gbps for s in ssds_used) * GB
    span_total = float(spans.sum()) if len(spans) else 0.0
    fetch_bw = fetch_bytes / span_total if span_total > 0 else 0.0
    busiest = dev["util_mean"].idxmax() if len(dev) else ""
    dur = reads["end_s"] - reads["start_s"]
    # an op is CPU-bound when its software path took (almost) as long as the op
    cpu_bound = float((reads["cpu_s"] >= 0.95 * dur).mean()) if len(reads) else 0.0
    per_step = (lambda x: x / steps) if steps else (lambda x: 0.0)
    return {
        "steps": steps,
        "step_ms": 1e3 * makespan / steps if steps else np.nan,
        "tokens_per_s": batch * steps / makespan if makespan > 0 else np.nan,
        "fetch_ms_per_step": 1e3 * per_step(span_total),
        "fetch_bytes_per_step": per_step(fetch_bytes),
        "ios_per_step": per_step(int(reads["n_ios"].sum())),
        "fetch_gbps": fetch_bw / GB,
        "ssd_share_of_aggregate": fetch_bw / agg_bw if agg_bw and len(reads) else np.nan,
        # mean cores busy = CPU-seconds of every op's software path over the run
        "cpu_cores_busy": float(ops["cpu_s"].sum()) / makespan if makespan > 0 else 0.0,
        "cpu_bound_share": cpu_bound,
        "queue_bound_share": queue_bound_share(reads, profile, queue_depth),
        "busiest": busiest,
        "busiest_util": float(dev.loc[busiest, "util_mean"]) if busiest else np.nan,
        "makespan_s": makespan,
    }


def design_summary(
    ops_table: pa.Table,
    profile: HardwareProfile,
    lanes: dict,
    ssds_used: list[str],
    batch: int,
    steps: int,
    entry_bytes: int,
    bottleneck_gbps: float,
) -> dict[str, Any]:
    """Swarm-style metrics of a KV design run (seed 000 §8): throughput, I/O
    time and volume, effective SSD bandwidth, DRAM hit rate, recall of the
    oracle top-k, selection latency and index size.

    ``lanes`` maps (sequence, layer) to objects with ``decisions``,
    ``oracle``, ``always`` and ``index_bytes`` (``sim.scenarios.swarm``).
    """
    ops = ops_table.to_pandas()
    makespan = float(ops["end_s"].max()) if len(ops) else 0.0
    spans = fetch_spans(ops)
    span_total = float(spans.sum()) if len(spans) else 0.0
    reads = ops[ops["kind"] == "read"]
    fetch = reads[reads["tag"] == "kv_fetch"]
    read_bytes = int(reads["bytes"].sum())
    groups = max(1, ops.groupby(["step", "layer"]).ngroups)
    select = ops[ops["tag"] == "select"]
    agg_bw = sum(profile.ssd(s).read_gbps for s in ssds_used) * GB
    bw = int(fetch["bytes"].sum()) / span_total if span_total > 0 else 0.0
    recall, hits, misses, amplification = [], 0, 0, []
    for lane in lanes.values():
        for dec, orc in zip(lane.decisions, lane.oracle, strict=True):
            recall.append(np.intersect1d(dec.selected, orc).size / max(1, orc.size))
            cached = dec.dram_entries - lane.always
            hits += max(cached, 0)
            need = len(dec.selected) - dec.dram_entries
            misses += need
            if need > 0:
                amplification.append(dec.read_bytes / (need * entry_bytes))
    index = sum(lane.index_bytes for lane in lanes.values())
    host = sum(lane.host_bytes for lane in lanes.values())
    # Swarm's online maintenance (§6.2): tokens leaving the window join clusters or open one
    maint = {
        k: sum(d.info.get(k, 0.0) for lane in lanes.values() for d in lane.decisions)
        / max(1, len(lanes))
        for k in ("joins", "new_clusters")
    }
    unit_hits, units = _unit_hits(lanes)
    layers_modeled = len({k[1] for k in lanes})
    return {
        "steps": steps,
        "tokens_per_s": batch * steps / makespan if makespan > 0 else np.nan,
        "step_ms": 1e3 * makespan / steps if steps else np.nan,
        "io_ms_per_step": 1e3 * span_total / steps if steps else np.nan,
        "io_ms_per_layer": 1e3 * span_total / groups,
        "read_bytes_per_step": read_bytes / steps if steps else 0,
        "ios_per_step": int(reads["n_ios"].sum()) / steps if steps else 0,
        "ssd_gbps": bw / GB,
        "ssd_share_of_aggregate": bw / agg_bw if agg_bw else np.nan,
        "ssd_share_of_bottleneck": bw / (bottleneck_gbps * GB) if bottleneck_gbps else np.nan,
        "dram_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
        # per retrieval unit (cluster, block) chosen: the I/O-avoidance view of Eq. 6
        "unit_hit_rate": unit_hits / units if units else np.nan,
        "recall": float(np.mean(recall)) if recall else np.nan,
        "read_amplification": float(np.mean(amplification)) if amplification else 1.0,
        "select_ms": 1e3 * float((select["end_s"] - select["start_s"]).mean())
        if len(select)
        else 0.0,
        "index_mb_per_layer": index / layers_modeled / batch / 1e6 if lanes else 0.0,
        "dram_mb_per_layer": host / layers_modeled / batch / 1e6 if lanes else 0.0,
        "makespan_s": makespan,
        "joins_per_lane": maint["joins"],
        "new_clusters_per_lane": maint["new_clusters"],
    }


# a design's counters (StepDecision.info) of units chosen and units found in its cache
_UNIT_HITS = ("cache_hit_clusters", "cache_hits")  # Swarm; PQCache and InfLLM
_UNITS = ("chosen_clusters", "clusters_chosen", "blocks_chosen")


def _unit_hits(lanes: dict) -> tuple[float, float]:
    """(units found in the DRAM cache, units chosen) summed over every lane and
    step, from the decisions' counters (0, 0 for a design without units)."""
    hit = chosen = 0.0
    for lane in lanes.values():
        for d in lane.decisions:
            hit += next((d.info[k] for k in _UNIT_HITS if k in d.info), 0.0)
            chosen += next((d.info[k] for k in _UNITS if k in d.info), 0.0)
    return hit, chosen
