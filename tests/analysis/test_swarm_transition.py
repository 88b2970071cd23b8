"""The bound arithmetic of analysis/swarm_transition.py on hand-made SSD reads.

PM9A3 (h20-8ssd): 6.9 GB/s, 1.1M IOPS, 80 us, queue depth 128, efficiency 1.0, so
an I/O below 6.9e9 / 1.1e6 = 6,273 B is IOPS-bound.
"""

import pandas as pd
import pytest

from analysis.swarm_transition import op_bounds, per_io
from hwprofiles.loader import load_profile


def _read(n_ios, nbytes, extents=(), io_bytes=0, qd=0):
    return {
        "kind": "read",
        "src": "ssd0",
        "bytes": nbytes,
        "n_ios": n_ios,
        "queue_depth": qd,
        "extents": [{"offset": 0, "length": x} for x in extents],
        "io_bytes": io_bytes,
    }


def test_an_op_is_rated_by_its_mean_io_size():
    prof = load_profile("h20-8ssd")
    plan = pd.DataFrame(
        [
            _read(10, 10 * 4096),  # 4 KiB I/Os: 10 / 1.1e6 = 9.09 us > 40960 / 6.9e9 = 5.94 us
            _read(10, 10 * 65536),  # 64 KiB I/Os: 95.0 us of bandwidth > 9.09 us of IOPS
            _read(256, 256 * 65536, qd=128),  # queue: (256-128) x 80 us / 128 = 80 us < 2,431 us
            {
                "kind": "compute",
                "src": "",
                "bytes": 0,
                "n_ios": 0,
                "queue_depth": 0,
                "extents": [],
                "io_bytes": 0,
            },
        ]
    )
    ops = op_bounds(plan, prof)
    assert ops["bound"].tolist() == ["iops", "bw", "bw"]
    want = [10 / 1.1e6, 655360 / 6.9e9, 256 * 65536 / 6.9e9]
    assert ops["t_bound"].tolist() == pytest.approx(want)
    assert ops["t_latency"].tolist() == pytest.approx([80e-6] * 3)
    assert ops["knee_bytes"].iloc[0] == pytest.approx(6.9e9 / 1.1e6)


def test_few_ios_deep_in_the_queue_are_queue_bound():
    prof = load_profile("h20-8ssd")
    # 1,000 I/Os of 4 KiB at queue depth 1: (1000 - 1) x 80 us = 79.9 ms, far above
    # IOPS (0.91 ms) and bandwidth (0.59 ms)
    ops = op_bounds(pd.DataFrame([_read(1000, 1000 * 4096, qd=1)]), prof)
    assert ops["bound"].tolist() == ["queue"]
    assert ops["t_bound"].iloc[0] == pytest.approx(999 * 80e-6)


def test_rated_io_by_io_a_mixed_op_is_partly_iops_bound():
    prof = load_profile("h20-8ssd")
    # one op, mean 36 KiB (bandwidth-bound as a whole), but one 4 KiB and one 64 KiB I/O;
    # a 3 MiB extent cut at 1.25 MiB gives 1.25 + 1.25 + 0.5 MiB I/Os, all large
    plan = pd.DataFrame(
        [
            _read(2, 4096 + 65536, extents=(4096, 65536), io_bytes=1310720),
            _read(3, 3 * 2**20, extents=(3 * 2**20,), io_bytes=1310720),
        ]
    )
    small, t_iops, t_all = per_io(plan, prof)
    assert small == pytest.approx(1 / 5)
    assert t_iops == pytest.approx(1 / 1.1e6)
    assert t_all == pytest.approx(1 / 1.1e6 + (65536 + 3 * 2**20) / 6.9e9)
    assert op_bounds(plan, prof)["bound"].tolist() == ["bw", "bw"]
