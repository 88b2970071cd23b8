"""Records: what an executor observed, one schema for the simulator and the
real backend.

* ``ops``: one row per plan op with its ``ready_s``, ``start_s`` and
  ``end_s`` (seconds from the start of the run) and the op's identity
  columns copied from the plan;
* ``devices``: one row per device or link, the same definitions for both
  backends (:data:`DEVICE_RECORD_SCHEMA`), each measured by the backend that
  writes it, never copied from the plan;
* ``steps``: per plan step, first start, last end and bytes (derived from
  ``ops``).

On disk each is a Parquet file in one directory, beside ``run.json`` with
the provenance written by the runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import arrow_array, write_parquet
from kvtier.contracts.plan_schema import OP_IDENTITY, PLAN_SCHEMA

if TYPE_CHECKING:  # pandas is imported where a frame is made: running needs none
    import pandas as pd

OP_RECORD_SCHEMA = pa.schema(
    [
        *(PLAN_SCHEMA.field(c) for c in ("op_id", *OP_IDENTITY)),  # the op, as planned
        ("ready_s", pa.float64()),
        ("start_s", pa.float64()),
        ("end_s", pa.float64()),
        ("cpu_s", pa.float64()),  # CPU time of the op's software path
        ("backend", pa.string()),
    ]
)

DEVICE_RECORD_SCHEMA = pa.schema(
    [
        ("device", pa.string()),
        ("type", pa.string()),  # ssd | link | cpu | gpu
        ("bytes_read", pa.int64()),
        ("bytes_written", pa.int64()),
        ("n_ios", pa.int64()),
        ("busy_s", pa.float64()),
        ("util_mean", pa.float64()),
    ]
)
"""The device columns, one definition for the simulator and the real replay.

==============  =============================================================
column          meaning (how each backend measures it)
==============  =============================================================
bytes_read      bytes the backend moved *from* the device: simulator = the
                bytes of every read whose data flow completed (an SSD), or
                the integrated flow work (a link: all bytes that crossed it,
                in that direction); replay = bytes read AND verified
bytes_written   bytes moved *to* an SSD: simulator = writes whose data flow
                completed; replay = bytes written (completed, full length)
n_ios           I/Os of those bytes: simulator = the ``n_ios`` of each
                completed op (one per extent); replay = I/Os completed
busy_s          seconds with at least one I/O in flight on the device (the
                simulator counts an SSD op's base-latency phase as in flight;
                links, CPU and GPU: seconds with at least one flow active)
util_mean       ``busy_s / makespan``
==============  =============================================================

What only one backend can state lives in ``Records.stats``: the simulator's
``capacity_mean``/``capacity_peak`` (fraction of a resource's modelled capacity
in use), the replay's ``inflight_mean``/``inflight_peak`` (I/Os in flight over
the device's queue depth).
"""


@dataclass
class Records:
    ops: pa.Table
    devices: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        return float(self.stats.get("makespan_s", 0.0))

    def steps(self) -> pd.DataFrame:
        return step_records(self.ops)

    def write(self, out_dir: str | Path) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_parquet(self.ops, out / "ops.parquet")
        write_parquet(self.devices, out / "devices.parquet")
        write_parquet(
            pa.Table.from_pandas(self.steps(), preserve_index=False), out / "steps.parquet"
        )

    @classmethod
    def read(cls, out_dir: str | Path) -> Records:
        import pyarrow.parquet as pq  # noqa: PLC0415  (here: a serving run reads and writes no file)

        out = Path(out_dir)
        return cls(
            ops=pq.read_table(out / "ops.parquet"), devices=pq.read_table(out / "devices.parquet")
        )


def op_records(
    plan: pa.Table,
    ready: Sequence[float],
    start: Sequence[float],
    end: Sequence[float],
    cpu: Sequence[float],
    backend: str,
) -> pa.Table:
    cols = [plan.column(c) for c in ("op_id", *OP_IDENTITY)]
    n = plan.num_rows
    f64 = pa.float64()
    times = [arrow_array(np.asarray(t, dtype=np.float64), f64) for t in (ready, start, end, cpu)]
    return pa.Table.from_arrays(
        cols + times + [arrow_array([backend] * n, pa.string())], schema=OP_RECORD_SCHEMA
    )


def step_records(ops: pa.Table) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415

    df = ops.select(["step", "bytes", "start_s", "end_s"]).to_pandas()
    if df.empty:
        return pd.DataFrame(columns=["step", "start_s", "end_s", "duration_s", "ops", "bytes"])
    g = df.groupby("step", sort=True)
    out = pd.DataFrame(
        {
            "start_s": g["start_s"].min(),
            "end_s": g["end_s"].max(),
            "ops": g.size(),
            "bytes": g["bytes"].sum(),
        }
    ).reset_index()
    out["duration_s"] = out["end_s"] - out["start_s"]
    return out[["step", "start_s", "end_s", "duration_s", "ops", "bytes"]]


def ssd_totals(plan: pa.Table) -> dict[str, tuple[int, int, int]]:
    """Per SSD: (bytes read, bytes written, I/Os) the plan *asks for*, to compare
    a backend's measured device records with (no backend reports these)."""
    df = plan.select(["kind", "src", "dst", "bytes", "n_ios"]).to_pandas()
    io = df[df["kind"].isin(["read", "write"])]
    dev = np.where(io["kind"] == "read", io["src"], io["dst"])
    totals: dict[str, tuple[int, int, int]] = {}
    if len(io):
        g = io.assign(device=dev).groupby(["device", "kind"])[["bytes", "n_ios"]].sum()
        for (device, kind), row in g.iterrows():
            r, w, n = totals.get(device, (0, 0, 0))
            b = int(row["bytes"])
            totals[device] = (
                (r + b, w, n + int(row["n_ios"]))
                if kind == "read"
                else (r, w + b, n + int(row["n_ios"]))
            )
    return totals
