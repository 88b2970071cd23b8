"""What binds the TTFT: used shares inside the P99 request's window, on hand-made records.

h100-2dimm-2ssd (efficiency: tensor 0.75, hbm 0.90, ssd 1.0, membus 0.80): the GPU's
achievable tensor rate is 756e12 x 0.75 = 567e12 FLOP/s; the 9100 PRO writes 13.4 GB/s;
the memory controller's link mc0.ch (two DDR4-2666 channels, one per DIMM) carries
42.6 x 0.80 = 34.08 GB/s.

The run: one request released at 0 s whose first token comes at 2 s; its prefill is one
compute op on gpu0 over [0, 2) at the full tensor rate (1134e12 FLOPs).  In the
background ssd0 writes 60.3e9 B from dram0 over [1, 10) (6.7 GB/s, half its write rate).
Whole run (makespan 10 s): ssd0's bandwidth share 60.3e9 / 13.4e9 / 10 = 0.45 beats the
tensor's 1134e12 / 567e12 / 10 = 0.2, so the whole-run label names the SSD.  Inside the
window [0, 2): the write overlaps 1 of its 9 s, 6.7e9 B: 0.5 device-s over 2 s = 0.25;
the tensor did 1134e12 FLOPs in 2 s: 1.0.  The TTFT is the GPU's.
"""

from __future__ import annotations

import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.capacity.binding import binding, overlap, p99_window, shares, window_shares

WRITE_B = 60_300_000_000
FLOPS = 1134e12


def run_records() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    devices = pd.DataFrame(
        [  # device, type, bytes_read, bytes_written, n_ios, busy_s, util_mean
            ("ssd0", "ssd", 0, WRITE_B, 0, 9.0, 0.9),
            ("gpu0.compute", "gpu", 0, 0, 0, 2.0, 0.2),
        ],
        columns=["device", "type", "bytes_read", "bytes_written", "n_ios", "busy_s", "util_mean"],
    )
    ops = pd.DataFrame(
        {
            "op_id": [0, 1],
            "kind": ["compute", "write"],
            "src": ["", "dram0"],
            "dst": ["gpu0", "ssd0"],
            "bytes": [0, WRITE_B],
            "n_ios": [0, 0],
            "cpu_s": [0.0, 0.0],
            "start_s": [0.0, 1.0],
            "end_s": [2.0, 10.0],
        }
    )
    plan = pd.DataFrame({"op_id": [0, 1], "kind": ["compute", "write"], "dst": ["gpu0", "ssd0"],
                         "flops": [FLOPS, 0.0], "hbm_bytes": [0.0, 0.0]})  # fmt: skip
    return devices, ops, plan


def test_overlap_by_hand():
    ops = pd.DataFrame({"start_s": [0.0, 1.0, 3.0, 1.5], "end_s": [2.0, 10.0, 4.0, 1.5]})
    # [0,2) all inside; [1,10) 1 of 9 s; [3,4) none; the instant 1.5 inside
    assert list(overlap(ops, 0.0, 2.0)) == pytest.approx([1.0, 1 / 9, 0.0, 1.0])


def test_whole_run_names_the_background_writer():
    df = shares(*run_records(), load_profile("h100-2dimm-2ssd")).set_index(["resource", "measure"])
    assert df.loc[("ssd0", "bandwidth_s"), "share"] == pytest.approx(0.45)
    assert df.loc[("gpu0.tensor", "flops"), "share"] == pytest.approx(0.2)
    assert binding(df.reset_index()).label == "ssd0"


def test_window_names_the_compute_that_decides_ttft():
    devices, ops, plan = run_records()
    df = window_shares(devices, ops, plan, load_profile("h100-2dimm-2ssd"), (0.0, 2.0))
    got = df.set_index(["resource", "measure"])["share"]
    assert got[("gpu0.tensor", "flops")] == pytest.approx(1.0)
    assert got[("ssd0", "bandwidth_s")] == pytest.approx(0.25)
    # the write's 6.7e9 B in the window cross the memory controller: 6.7e9 / (34.08e9 x 2)
    assert got[("mc0.ch", "bytes")] == pytest.approx(6.7e9 / (34.08e9 * 2))
    b = binding(df)
    assert (b.label, b.share, b.busy) == (
        "gpu0.tensor",
        pytest.approx(1.0),
        0.2,
    )  # busy share rides along


def test_window_is_the_p99_request():
    # TTFTs 1..8 s: np.percentile(99, linear) = 7 + 0.93 = 7.93; the request at or above it
    # is the one of 8 s, released at 0.7 s; a rejected request of 20 s does not count
    req = pd.DataFrame({"release_s": [0.1 * i for i in range(9)],
                        "ttft_s": [1, 2, 3, 4, 5, 6, 7, 8, 20.0],
                        "rejected": [False] * 8 + [True]})  # fmt: skip
    t0, t1 = p99_window(req)
    assert (t0, t1) == (pytest.approx(0.7), pytest.approx(8.7))
    assert p99_window(req.assign(rejected=True)) is None
