"""The binding resource by used share of capacity, on hand-made records worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.capacity.binding import Binding, binding, resource_class, resource_kind, shares

# h100-2dimm-2ssd (efficiency: pcie 0.94, membus 0.80, ssd 1.0, hbm 0.90, tensor 0.75):
# sw0.up 63 GB/s x 0.94 = 59.22e9 B/s; dram0.bus 21.3 x 0.80 = 17.04e9 B/s;
# 9100 PRO: 14.7 GB/s read, 1.85M read IOPS; GPU 756 TFLOPS x 0.75, 2000 GB/s x 0.9.
T = 2.0  # makespan: the last op ends at 2 s


def records(ssd0_ios: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    devices = pd.DataFrame(
        [  # device, type, bytes_read, bytes_written, n_ios, busy_s, util_mean
            ("sw0.up>", "link", 59_220_000_000, 0, 0, 1.9, 0.95),  # 59.22e9 / (59.22e9 x 2) = 0.5
            ("dram0.bus", "link", 17_040_000_000, 0, 0, 2.0, 1.0),  # 17.04e9 / (17.04e9 x 2) = 0.5
            ("ssd0", "ssd", 14_700_000_000, 0, ssd0_ios, 1.2, 0.6),  # 14.7e9 / (14.7e9 x 2) = 0.5
            ("ssd1", "ssd", 7_350_000_000, 0, 0, 0.6, 0.3),  # 0.25
            ("cpu", "cpu", 0, 0, 0, 0.5, 0.25),
            ("gpu0.compute", "gpu", 0, 0, 0, 1.8, 0.9),
        ],
        columns=["device", "type", "bytes_read", "bytes_written", "n_ios", "busy_s", "util_mean"],
    )
    ops = pd.DataFrame(
        {
            "kind": ["read", "read", "compute"],
            "src": ["ssd0", "ssd1", ""],
            "dst": ["dram0", "dram0", "gpu0"],
            "n_ios": [ssd0_ios, 0, 0],
            "cpu_s": [4.0, 0.0, 0.0],
            "end_s": [1.0, 1.5, T],
        }  # fmt: skip
    )  # CPU: 4 core-s / (16 cores x 2 s) = 0.125
    # GPU: 113.4e12 FLOPs / (567e12 x 2) = 0.1; HBM 0.9e12 B / (1.8e12 x 2) = 0.25
    plan = pd.DataFrame({"kind": ["compute"], "dst": ["gpu0"], "flops": [113.4e12],
                         "hbm_bytes": [0.9e12]})  # fmt: skip
    return devices, ops, plan


def table(ssd0_ios: int) -> pd.DataFrame:
    return shares(*records(ssd0_ios), load_profile("h100-2dimm-2ssd")).set_index(
        ["resource", "measure"]
    )


def test_shares_by_hand():
    df = table(1_850_000)  # 1.85e6 I/Os / (1.85e6 IOPS x 2 s) = 0.5
    want = {("sw0.up>", "bytes"): 0.5, ("dram0.bus", "bytes"): 0.5,
            ("ssd0", "bandwidth_s"): 0.5, ("ssd0", "iops_s"): 0.5, ("ssd1", "bandwidth_s"): 0.25,
            ("cpu", "core_s"): 0.125, ("gpu0.tensor", "flops"): 0.1,
            ("gpu0.hbm", "hbm_bytes"): 0.25}  # fmt: skip
    for key, share in want.items():
        assert df.loc[key, "share"] == pytest.approx(share, rel=1e-9), key
    assert df.loc[("gpu0.hbm", "hbm_bytes"), "busy_share"] == 0.9  # the busy share rides along


def test_binding_is_highest_share_not_busiest():
    # dram0.bus is the busiest (util 1.0) but ssd0's I/Os: 3.7e6 / (1.85e6 x 2) = 1.0 bind
    b = binding(table(3_700_000).reset_index())
    assert (b.label, b.share, b.busy) == ("ssd0", pytest.approx(1.0), 0.6)
    assert resource_class(b.label) == "ssdN"


def test_ties_name_every_resource():
    # sw0.up>, dram0.bus and ssd0 (bandwidth and IOPS) all at 0.5: all named, once each
    b = binding(table(1_850_000).reset_index())
    assert sorted(b.label.split(" & ")) == ["dram0.bus", "ssd0", "sw0.up>"]
    assert b.share == pytest.approx(0.5)


def test_many_ties_of_one_class_are_counted():
    df = pd.DataFrame({"resource": [f"ssd{i}" for i in range(8)] + ["cpu"],
                       "share": [0.6] * 8 + [0.1], "busy_share": 0.5})  # fmt: skip
    assert binding(df).label == "ssdN x8"


def test_classes_by_name():
    want = {"ssd3": "ssd", "ssd0.pcie>": "ssd_link", "gpu1.tensor": "gpu_compute",
            "gpu0.hbm": "gpu_hbm", "gpu2.pcie<": "gpu_link", "gpu0.nvlink>": "gpu_peer_link",
            "gpu0.c2c": "gpu_peer_link", "sw1.up>": "switch_uplink", "dram0.bus": "host_link",
            "mc0.ch<": "host_link", "cpu": "cpu", "node0.ssd3": "other", "": "other"}  # fmt: skip
    assert {n: resource_kind(n) for n in want} == want


def test_tied_classes_and_what_relieves_them():
    # the three-way tie at 0.5: a DRAM bus, an SSD and a switch uplink
    b = binding(table(1_850_000).reset_index())
    assert dict(zip(b.resources, b.classes, strict=True)) == {
        "dram0.bus": "host_link", "ssd0": "ssd", "sw0.up>": "switch_uplink"}  # fmt: skip
    assert not b.ssd_only and b.gpu_relieved  # the uplink: each rank moves 1/N through it
    alone = binding(table(3_700_000).reset_index())  # ssd0's IOPS alone at 1.0
    assert alone.resources == ("ssd0",) and alone.ssd_only and not alone.gpu_relieved


def test_relief_of_each_tie_by_hand():
    assert Binding(("ssd1", "ssd1.pcie>")).ssd_only  # an SSD and its own link
    assert not Binding(("ssd0", "cpu")).ssd_only  # the CPU binds too
    assert not Binding().ssd_only and not Binding().gpu_relieved  # nothing binds
    assert Binding(("gpu0.nvlink>", "gpu0.hbm")).gpu_relieved  # the HBM: one each rank
    assert not Binding(("gpu0.nvlink>", "dram0.bus")).gpu_relieved  # all-reduce, shared bus
    eight = Binding(tuple(f"ssd{i}" for i in range(8)), 0.6, 0.5)
    assert eight.columns("bottleneck_run") == {
        "bottleneck_run": "ssdN x8", "bottleneck_run_share": 0.6,
        "bottleneck_run_ssd_only": True, "bottleneck_run_gpu_relieved": False}  # fmt: skip
