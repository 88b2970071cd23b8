"""What a simulated machine measured: the shared device records and the
simulator-only capacity statistics of a run (used by :mod:`sim.executor` and
the serving engine, :mod:`sim.serving.execute.online`)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kvtier.contracts.arrays import arrow_array
from kvtier.contracts.records import DEVICE_RECORD_SCHEMA
from sim.hw.machine import Machine


def device_records(plan: pa.Table | None, machine: Machine, makespan: float) -> pa.Table:
    """The shared device columns (:data:`kvtier.contracts.records.DEVICE_RECORD_SCHEMA`) as
    measured on ``machine``: SSD bytes and I/Os from its meters (what the flows
    moved), a link's bytes from its integrated work, ``busy_s`` from the meters
    (SSDs) or the flow networks (time with a flow active), ``util_mean =
    busy_s / makespan``.  ``plan`` is not read (kept for callers' signature)."""
    rows: dict[str, list[Any]] = {f.name: [] for f in DEVICE_RECORD_SCHEMA}
    ssds = {r: name for name, r in machine.ssd_res.items()}
    for net, r, name in machine.resources():
        b_read = b_written = n_ios = 0
        busy = net.busy_s[r]
        if net is machine.net and r in ssds:
            kind, meter = "ssd", machine.meters[ssds[r]]
            b_read, b_written, n_ios, busy = (
                meter.bytes_read,
                meter.bytes_written,
                meter.n_ios,
                meter.busy_s,
            )
        elif net is machine.net:
            kind, b_read = "link", int(round(net.work[r]))
        else:
            kind = "cpu" if net is machine.cpu_net else "gpu"
        rows["device"].append(name)
        rows["type"].append(kind)
        rows["bytes_read"].append(b_read)
        rows["bytes_written"].append(b_written)
        rows["n_ios"].append(n_ios)
        rows["busy_s"].append(busy)
        rows["util_mean"].append(busy / makespan if makespan > 0 else 0.0)
    cols = [arrow_array(rows[f.name], f.type) for f in DEVICE_RECORD_SCHEMA]
    return pa.Table.from_arrays(cols, schema=DEVICE_RECORD_SCHEMA)


def capacity_stats(machine: Machine, makespan: float) -> dict[str, dict[str, float]]:
    """Simulator-only measures (stats, not shared columns: a real device's capacity
    is what the replay measures): per resource, the mean and peak fraction of its
    capacity in use (``capacity_mean`` = work / (capacity x makespan))."""
    mean: dict[str, float] = {}
    peak: dict[str, float] = {}
    for net, r, name in machine.resources():
        mean[name] = net.work[r] / (net.capacity[r] * makespan) if makespan > 0 else 0.0
        peak[name] = net.peak[r]
    return {"capacity_mean": mean, "capacity_peak": peak}
