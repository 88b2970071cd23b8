"""The copy and compute ops of a replay wait out the time the simulator gives them:
the machine replaying a plan has no GPU to run them (:func:`real.replay.replay`,
``nonio_s``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.executor import simulate


def modelled_durations(plan: pa.Table, profile: HardwareProfile) -> np.ndarray:
    """Seconds the simulator gives each copy/compute op on ``profile`` (0 for I/O ops)."""
    ops = simulate(plan, profile).ops
    secs = ops.column("end_s").to_numpy() - ops.column("start_s").to_numpy()
    io = np.isin(np.asarray(ops.column("kind").to_pylist(), dtype=object), ["read", "write"])
    return np.where(io, 0.0, secs)
