"""kvtier's replay against fio on the same plan: the independent cross-check.

The validation's bandwidth steps (large reads on every device) are exported
as fio iologs (:mod:`real.iolog`) and replayed by fio, unstalled, on the very
targets kvtier just read, inside the same throttle or pacing.  kvtier's
throughput over those steps (their bytes over the span from the first
start to the last end in the replay records) divided by fio's (the bytes fio
counted over its longest job runtime, at the plan's queue depth) says how
close the replayer comes to what the devices deliver to a tool built for
nothing else.  Target: >= 0.9.

fio is the stricter side: it knows nothing of ``depends_on`` and keeps every
device busy through the step boundaries where kvtier waits for the slowest
device of the step, so the ratio includes that (real) barrier cost.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kvtier.contracts.records import Records
from real.iolog import fio_replay_throughput
from real.targets import Target

TARGET_RATIO = 0.9


def steps_of(plan: pa.Table, steps: Sequence[int]) -> pa.Table:
    """The ops of ``plan`` in ``steps`` (ids kept; fio ignores dependencies)."""
    mask = pc.is_in(plan.column("step"), value_set=pa.array(list(steps), pa.int64()))
    return plan.filter(mask)


def replay_throughput(records: Records, op_ids: np.ndarray) -> tuple[int, float]:
    """Bytes and span (first start to last end, s) of ``op_ids`` in ``records``."""
    ops = records.ops.to_pandas().set_index("op_id").loc[op_ids]
    return int(ops["bytes"].sum()), float(ops["end_s"].max() - ops["start_s"].min())


def fio_cross_check(
    plan: pa.Table,
    steps: pd.DataFrame,
    real: Records,
    targets: Mapping[str, Target],
    out_dir: str | Path,
    regime: str = "bandwidth",
) -> dict[str, Any]:
    """Replay ``regime``'s measured steps with fio; compare with kvtier's ``real`` replay.

    Returns ``{"skipped": why}`` when fio is missing or the plan has no such
    steps, else both throughputs (bytes/s), their ``ratio`` (kvtier / fio) and
    fio's summary.  Call it with the targets still prepared and inside the
    same throttle as the replay.
    """
    if shutil.which("fio") is None:
        return {"skipped": "fio is not installed"}
    chosen = steps[(steps["regime"] == regime) & ~steps.get("warmup", False)]["step"]
    sub = steps_of(plan, chosen.tolist())
    if sub.num_rows == 0:
        return {"skipped": f"the plan has no measured '{regime}' steps"}
    nbytes, span = replay_throughput(real, sub.column("op_id").to_numpy())
    depth = int(pc.max(sub.column("queue_depth")).as_py()) or None
    fio = fio_replay_throughput(sub, list(targets.values()), out_dir, iodepth=depth)
    if fio["bytes"] != nbytes:  # both sides moved the plan's bytes; anything else is a bug
        raise AssertionError(f"fio moved {fio['bytes']} bytes, kvtier {nbytes}")
    kvtier_bps = nbytes / span
    return {
        "regime": regime,
        "steps": chosen.tolist(),
        "bytes": nbytes,
        "kvtier_s": span,
        "fio_s": fio["elapsed_s"],
        "kvtier_bps": kvtier_bps,
        "fio_bps": fio["measured_bps"],
        "ratio": kvtier_bps / fio["measured_bps"],
        "iodepth": depth,
        "target_ratio": TARGET_RATIO,
        "fio_json": fio["fio_json"],
    }


def describe(check: Mapping[str, Any]) -> str:
    """One line for the console."""
    if "skipped" in check:
        return f"fio cross-check skipped: {check['skipped']}"
    ok = "yes" if check["ratio"] >= check["target_ratio"] else "no"
    return (
        f"kvtier replay vs fio on the same {check['regime']} steps: "
        f"{check['kvtier_bps'] / 1e9:.3f} vs {check['fio_bps'] / 1e9:.3f} GB/s, "
        f"ratio {check['ratio']:.2f} (>= {check['target_ratio']}: {ok})"
    )
