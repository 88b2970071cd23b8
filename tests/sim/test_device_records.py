"""The simulator's device records, measured from its flows and worked out by hand.

Tiny machine (tests/sim/conftest.py): PM9A3 SSDs (6.9 GB/s read, 4.1 GB/s write,
80 us read / 20 us write latency, 1.1M read IOPS), each on a 7.88 GB/s PCIe link.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate

MIB = 1 << 20
L_READ, BW_READ = 80e-6, 6.9e9
L_WRITE, BW_WRITE = 20e-6, 4.1e9


def devices(rec):
    return rec.devices.to_pandas().set_index("device")


def test_one_read_on_an_idle_ssd_is_busy_for_latency_plus_transfer(tiny):
    # 64 MiB in 64 I/Os of 1 MiB at QD 32: IOPS x 1 MiB and QD x 1 MiB / 80 us far exceed
    # 6.9 GB/s and the 7.88 GB/s link does not bind, so the data flows at 6.9 GB/s
    n = 64 * MIB
    b = PlanBuilder()
    b.read("ssd0", "dram0", n, 64, queue_depth=32, io_path="passthrough", release_s=0.01)
    rec = simulate(b.table(), tiny)
    dev = devices(rec)
    busy = L_READ + n / BW_READ
    assert rec.makespan_s == pytest.approx(0.01 + busy)
    ssd = dev.loc["ssd0"]
    assert ssd["busy_s"] == pytest.approx(busy)  # the latency phase counts as in flight
    assert ssd["util_mean"] == pytest.approx(busy / (0.01 + busy))
    assert (ssd["bytes_read"], ssd["bytes_written"], ssd["n_ios"]) == (n, 0, 64)
    link = dev.loc["ssd0.pcie>"]  # the link carries the flow only (no latency phase)
    assert link["busy_s"] == pytest.approx(n / BW_READ)
    assert link["bytes_read"] == pytest.approx(n, abs=1)
    assert dev.loc["ssd1", "busy_s"] == 0 and dev.loc["ssd1", "n_ios"] == 0
    # the simulator-only capacity measure: the SSD ran at full rate while moving data
    assert rec.stats["capacity_mean"]["ssd0"] == pytest.approx((n / BW_READ) / (0.01 + busy))


def test_overlapping_ops_count_busy_once_and_bytes_when_their_flows_complete(tiny):
    # a scattered read (3 extents) and a write on the same SSD, started together: busy is
    # the union of their in-flight periods, bytes and I/Os are each op's, by direction
    b = PlanBuilder()
    ext = np.array([[0, MIB], [8 * MIB, 2 * MIB], [4 * MIB, MIB]], dtype=np.int64)
    r = b.read("ssd0", "dram0", extents=ext, io_path="passthrough")
    w = b.write("dram0", "ssd0", 2 * MIB, 2, offset=16 * MIB, io_path="passthrough")
    rec = simulate(b.table(), tiny)
    ops = rec.ops.to_pandas()
    ssd = devices(rec).loc["ssd0"]
    assert (ssd["bytes_read"], ssd["bytes_written"], ssd["n_ios"]) == (4 * MIB, 2 * MIB, 5)
    first, last = ops.loc[[r, w], "start_s"].min(), ops.loc[[r, w], "end_s"].max()
    assert ssd["busy_s"] == pytest.approx(last - first)
    assert ssd["util_mean"] == pytest.approx(ssd["busy_s"] / rec.makespan_s)
    # each alone would take latency + bytes / bandwidth; together they share the device
    assert ops.loc[r, "end_s"] > L_READ + 4 * MIB / BW_READ
    assert ops.loc[w, "end_s"] > L_WRITE + 2 * MIB / BW_WRITE
