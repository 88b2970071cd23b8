"""The real backend replays plans with host-CPU (``cpu``) compute ops.

Like a GPU compute op, a ``cpu`` op moves no SSD bytes: the replay waits it
out for the duration the simulator models (``kvtier replay`` passes
:func:`modelled_durations`), and orders the reads around it by ``depends_on``.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwprofiles import load_profile
from kvtier.compare.durations import modelled_durations
from kvtier.contracts.plan import CPU, PlanBuilder
from kvtier.contracts.records import ssd_totals
from real.datafile import prepare_targets
from real.replay import replay, validate_for_replay

MiB = 1 << 20


def cpu_plan():
    """read -> a 1 GFLOP, 1 MB selection on one host thread -> read."""
    b, io = PlanBuilder(), {"io_path": "io_uring"}
    r0 = b.read("ssd0", "dram0", MiB, 4, **io)
    sel = b.cpu_compute(1e9, 1e6, 1, depends_on=[r0], tag="select")
    b.read("ssd0", "dram0", MiB, 2, offset=2 * MiB, depends_on=[sel], step=1, **io)
    return b.table(), sel


def test_the_modelled_duration_of_a_cpu_op_is_the_hand_value():
    plan, sel = cpu_plan()
    validate_for_replay(plan, load_profile("h20-8ssd"))
    validate_for_replay(plan)  # against the plan's own nodes: "cpu" is always a device
    secs = modelled_durations(plan, load_profile("h20-8ssd"))
    # h20-8ssd: one core at 134.4 GFLOP/s, 25.6 GB/s: max(1e9/134.4e9, 1e6/25.6e9) = 7.44 ms
    assert secs[sel] == pytest.approx(max(1e9 / 134.4e9, 1e6 / 25.6e9), rel=1e-9)
    assert np.all(np.delete(secs, sel) == 0)


def test_replay_waits_out_the_cpu_op_between_its_reads(direct_dir):
    plan, sel = cpu_plan()
    secs = modelled_durations(plan, load_profile("h20-8ssd"))
    with prepare_targets(plan, direct_dir / "t", seed=3) as files:
        rec = replay(plan, files, engine="threads", nonio_s=secs)
    ops = rec.ops.to_pandas()
    assert ops["end_s"][sel] - ops["start_s"][sel] == pytest.approx(secs[sel], rel=1e-9)
    assert ops["start_s"][sel] >= ops["end_s"][0] and ops["start_s"][2] >= ops["end_s"][sel]
    row = {r["device"]: r for r in rec.devices.to_pylist()}["ssd0"]
    assert (row["bytes_read"], row["n_ios"]) == ssd_totals(plan)["ssd0"][::2]
    assert plan.column("dst")[sel].as_py() == CPU


def test_a_chain_of_modelled_ops_runs_on_its_own_clock(direct_dir):
    """read -> CPU op of 3 ms -> GPU copy of 4 ms -> GPU compute of 5 ms -> read: the
    three modelled ops end exactly 3, 7 and 12 ms after the first read ended, each
    starting when the one before ended (the loop notices each end up to a pass late,
    and a GPU does not wait for it: :mod:`real.scheduler`); the last read, issued by
    the loop, starts no earlier than the compute's end."""
    b, io = PlanBuilder(), {"io_path": "io_uring"}
    r0 = b.read("ssd0", "dram0", MiB, 4, **io)
    c1 = b.cpu_compute(1e9, 1e6, 1, depends_on=[r0])
    c2 = b.copy("dram0", "gpu0", MiB, depends_on=[c1])
    c3 = b.compute("gpu0", 1e9, 1e6, depends_on=[c2])
    r1 = b.read("ssd0", "dram0", MiB, 2, offset=2 * MiB, depends_on=[c3], step=1, **io)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t", seed=5) as files:
        rec = replay(plan, files, engine="threads", nonio_s={c1: 0.003, c2: 0.004, c3: 0.005})
    ops = rec.ops.to_pandas()
    start, end = ops["start_s"].to_numpy(), ops["end_s"].to_numpy()
    assert start[c1] == end[r0] and start[c2] == end[c1] and start[c3] == end[c2]
    assert end[[c1, c2, c3]] - end[r0] == pytest.approx([0.003, 0.007, 0.012], abs=1e-12)
    assert start[r1] >= end[c3]
