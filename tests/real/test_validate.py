"""The sim-vs-real validation: plan shapes by hand, comparison arithmetic, and
one tiny end-to-end run on paced files (no root needed)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from hwprofiles import load_profile
from kvtier.cli.main import main
from kvtier.contracts.records import Records
from real.profile_yaml import scaled_profile
from real.validate import compare, regime_plan, regime_shapes, within_target
from sim.executor import simulate

# with fio the end-to-end runs include its cross-check; without it they skip that part
FIO_FLAGS = [] if shutil.which("fio") else ["--no-fio"]


def test_regime_shapes_follow_littles_law():
    h20 = load_profile("h20-8ssd")
    s = regime_shapes(h20)
    # PM9A3: 1.1M IOPS x 80 us = 88 in flight; twice that, capped at the device's 128
    assert s["iops"].queue_depth == 128 and s["iops"].io_bytes == 4096
    assert s["latency"].queue_depth == 1
    assert s["write"].kind == "write"


def test_regime_plan_sizes_steps_from_the_profile():
    prof = scaled_profile(load_profile("h20-8ssd"), 2, 0.02, 1 << 30)  # 138 MB/s, 22k IOPS, 80 us
    plan, steps = regime_plan(prof, steps_per_regime=2, step_s=0.1, n_ssd=2, warmup=0)
    assert len(steps) == 8 and plan.num_rows == 16  # 4 regimes x 2 steps x 2 SSDs
    n = dict(zip(steps["regime"], steps["n_ios_per_device"], strict=False))
    assert n["latency"] == round(0.1 / 80e-6)  # QD1: one I/O per latency
    assert n["iops"] == round(0.1 * 22000)  # IOPS-bound
    assert n["bandwidth"] == round(0.1 * 0.138e9 / 2**20)  # bandwidth-bound
    # steps run one after the other: each op depends on every op of the step before
    deps = plan.column("depends_on").to_pylist()
    assert deps[2] == [0, 1] and deps[0] == []
    # and the simulator agrees with the hand numbers within 5%
    rec = simulate(plan, prof)
    ops = rec.ops.to_pandas()
    t = (ops.groupby("step")["end_s"].max() - ops.groupby("step")["start_s"].min()).to_numpy()
    assert t[:6] == pytest.approx([0.1] * 6, rel=0.05)
    # a warm-up step opens every regime
    _, warm = regime_plan(prof, steps_per_regime=2, n_ssd=2)
    assert len(warm) == 12 and warm["warmup"].sum() == 4 and warm["warmup"].iloc[0]


def test_throttled_iops_steps_span_twenty_slices():
    """Kernel-throttled devices: the IOPS steps last 20 x 100 ms slices = 2 s of the
    model (22,000 IOPS x 2 s = 44,000 I/Os), the other regimes keep ``step_s``; the
    256 MiB cap of a step's span still holds (65,536 x 4 KiB)."""
    from real.validate import THROTTLE_IOPS_STEP_S

    assert pytest.approx(2.0) == THROTTLE_IOPS_STEP_S
    prof = scaled_profile(load_profile("h20-8ssd"), 2, 0.02, 1 << 30)  # 22k IOPS
    _, steps = regime_plan(
        prof, steps_per_regime=1, step_s=0.1, n_ssd=2, warmup=0, iops_step_s=THROTTLE_IOPS_STEP_S
    )
    n = dict(zip(steps["regime"], steps["n_ios_per_device"], strict=False))
    assert n["iops"] == 44_000
    assert n["latency"] == round(0.1 / 80e-6) and n["bandwidth"] == round(0.1 * 0.138e9 / 2**20)
    _, capped = regime_plan(
        prof,
        regimes=("iops",),
        steps_per_regime=1,
        n_ssd=2,
        warmup=0,
        iops_step_s=10.0,
        max_bytes_per_device=256 << 20,
    )
    assert capped["n_ios_per_device"].iloc[0] == (256 << 20) // 4096


def test_only_kernel_throttled_devices_get_the_long_iops_steps():
    from kvtier.compare.devices import Devices
    from real.targets import Limits, Target

    prof = load_profile("h20-8ssd")
    lim = Limits(read_iops=1000)
    t = Target(node="ssd0", path="/dev/loop0", size=1 << 20, kind="loop", limits=lim)
    assert Devices(prof, "/x", targets={"ssd0": t}).kernel_throttled  # emulated, throttle
    paced = {"ssd0": replace(t, pacing=True)}
    assert not Devices(prof, "/x", targets=paced).kernel_throttled  # user-space pacing
    free = {"ssd0": replace(t, limits=Limits())}
    assert not Devices(prof, "/x", targets=free).kernel_throttled  # devices as they are
    assert not Devices(prof, "/x", limits=lim, pacing=True).kernel_throttled  # --pace files


@pytest.mark.parametrize("per_io_us", [5.0, 12.0])
def test_iops_step_is_the_devices_or_the_replayers_core_whichever_binds(per_io_us):
    """The model of an IOPS step with the replayer's measured costs: 4 devices x 3,000
    4 KiB reads at QD 40, 29,920 IOPS each, 100 us QD1 latency, one core at ``c`` us
    per I/O.  The core's work and the devices' overlap (the replay loop issues while
    the devices serve), so the step is whichever is longer, never their sum:
    c = 5: devices 100 us + 3,000 / 29,920 = 100.37 ms > core 4 x 3,000 x 5 us = 60 ms;
    c = 12: core 144 ms > devices 100.37 ms (the latency under the core's work)."""
    from kvtier.contracts.plan import PlanBuilder
    from real.validate import with_engine_costs

    prof = scaled_profile(load_profile("h20-8ssd"), 4, 0.0272, 1 << 30)
    assert prof.ssds[0].read_iops == 29_920
    costs = {"read_latency_us": 100.0, "write_latency_us": 50.0, "per_io_us": per_io_us}
    b, n = PlanBuilder(), 3000
    for s in range(4):
        b.read(f"ssd{s}", "dram0", n * 4096, n, queue_depth=40, io_path="io_uring", stride=4096)
    ops = simulate(b.table(), with_engine_costs(prof, costs)).ops.to_pandas()
    devices, core = 100e-6 + n / 29_920, 4 * n * per_io_us * 1e-6
    assert ops["end_s"].max() - ops["start_s"].min() == pytest.approx(max(devices, core))


def test_the_replayers_round_is_charged_per_op_not_per_batch():
    """The IOPS step above with the loop's round measured (100 us, and 12 us per I/O
    net of it): the core spends 4 x (3,000 x 12 + 100) us = 144.4 ms, one round per
    op, not one per batch of its queue depth -- 75 batches a device would charge
    4 x 7.5 ms more (a stream's passes reap and refill what completed, their cost in
    the per-I/O time), and bound by the core the step would read 174.4 ms."""
    from kvtier.contracts.plan import PlanBuilder
    from real.validate import with_engine_costs

    prof = scaled_profile(load_profile("h20-8ssd"), 4, 0.0272, 1 << 30)
    costs = {"read_latency_us": 100.0, "write_latency_us": 50.0, "per_io_us": 12.03}
    costs |= {"per_io_net_us": 12.0, "round_us": 100.0}
    b, n = PlanBuilder(), 3000
    for s in range(4):
        b.read(f"ssd{s}", "dram0", n * 4096, n, queue_depth=40, io_path="io_uring", stride=4096)
    ops = simulate(b.table(), with_engine_costs(prof, costs)).ops.to_pandas()
    assert ops["end_s"].max() - ops["start_s"].min() == pytest.approx(4 * (n * 12 + 100) * 1e-6)


def test_a_loaded_machine_is_named():
    from kvtier.cli.validate import load_note

    assert load_note((0.7, 0.6, 0.5), 2) is None
    assert load_note((2.0, 9.0, 9.0), 2) is None  # the 1-minute load, at most the cores
    note = load_note((5.5, 4.0, 3.0), 2)
    assert note is not None and "load 5.5 on 2 cores" in note


def _records(step_times: list[float], backend: str) -> Records:
    n = len(step_times)
    ends = pd.Series(step_times).cumsum()
    ops = pa.table(
        {
            "op_id": list(range(n)),
            "step": list(range(n)),
            "layer": [-1] * n,
            "kind": ["read"] * n,
            "src": ["ssd0"] * n,
            "dst": ["dram0"] * n,
            "bytes": [4096] * n,
            "n_ios": [1] * n,
            "tag": ["iops"] * n,
            "ready_s": (ends - step_times).tolist(),
            "start_s": (ends - step_times).tolist(),
            "end_s": ends.tolist(),
            "cpu_s": [0.0] * n,
            "backend": [backend] * n,
        }
    )
    dev = pa.table(
        {
            "device": ["ssd0"],
            "type": ["ssd"],
            "bytes_read": [4096 * n],
            "bytes_written": [0],
            "n_ios": [n],
            "busy_s": [float(ends.iloc[-1])],
            "util_mean": [1.0],
        }
    )
    return Records(ops, dev)


def test_compare_errors_by_hand():
    steps = pd.DataFrame(
        {"step": [0, 1, 2], "regime": ["iops"] * 3, "io_bytes": [4096] * 3,
         "queue_depth": [32] * 3, "n_ios_per_device": [1] * 3}
    )  # fmt: skip
    res = compare(_records([1.05, 0.95, 1.0], "sim"), _records([1.0, 1.0, 1.0], "real"), steps)
    r = res["by_regime"]["iops"]
    assert r["median"] == pytest.approx(0.05) and r["max"] == pytest.approx(0.05)
    assert r["bias"] == pytest.approx(0.0)
    assert res["bytes"]["match"].all()
    assert within_target(res)


@pytest.mark.skipif(os.cpu_count() is None, reason="cpu count unknown")
def test_validate_end_to_end_on_paced_files(direct_dir: Path, tmp_path: Path):
    out = tmp_path / "val"
    rc = main(
        ["real", "validate", "--pace", "h20-8ssd", "--n", "2", "--steps", "2", "--step-s",
         "0.03", "--dir", str(direct_dir), "--out", str(out), "--engine", "threads",
         "--informational", *FIO_FLAGS]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["bytes_match"] is True
    assert set(report["by_regime"]) == {"latency", "iops", "bandwidth", "write"}
    assert (out / "validation.png").stat().st_size > 0
    assert "git" in report and "machine" in report  # provenance
    assert not list(direct_dir.rglob("kvtier-*.dat"))  # the replay removed its files


def test_validation_notebook_renders_the_report(direct_dir: Path, tmp_path: Path):
    nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")
    nbclient = pytest.importorskip("nbclient", reason="notebook extras not installed")
    out = tmp_path / "val"
    args = ["real", "validate", "--pace", "h20-8ssd", "--n", "1", "--steps", "1",
            "--step-s", "0.02", "--dir", str(direct_dir), "--out", str(out),
            "--informational", *FIO_FLAGS]  # fmt: skip
    assert main(args) == 0
    analysis = Path(__file__).resolve().parents[2] / "analysis"
    nb = nbformat.read(analysis / "validation.ipynb", as_version=4)
    os.environ["KVTIER_VALIDATION"] = str(out)
    try:
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(analysis)}}
        ).execute()
    finally:
        os.environ.pop("KVTIER_VALIDATION", None)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("bytes match: True" in o.get("text", "") for o in outputs)


def test_costs_pooled_before_and_after_by_hand():
    """Three replays before the regimes and three after (QD1 read, QD1 write, stream
    per-I/O us, round layer us).  Pooled, each cost is the median of six: read
    (300 + 400) / 2 = 350 (range 100-600), write (60 + 65) / 2 = 62.5, per I/O
    (10 + 11) / 2 = 10.5, layer (700 + 750) / 2 = 725; the round, on 2 devices with a
    stream of 8,000 I/Os a round each (1 / 8000 rounds per I/O), 16 I/Os a layer:
    s = (725 / 2 - 16 x 10.5) / (1 - 16 / 8000) = 194.5 / 0.998, c' = 10.5 - s / 8000."""
    from real.validate import costs_from_samples, pooled_costs

    rounds = {"n_ssd": 2, "rounds_per_io": 1 / 8000}
    before = costs_from_samples(
        np.array([[100, 50, 8, 600], [300, 60, 9, 700], [200, 55, 10, 650]], float), rounds, False
    )
    assert before["read_latency_us"] == 200 and before["read_latency_us_range"] == [100, 300]
    after = costs_from_samples(
        np.array([[500, 70, 12, 800], [400, 65, 11, 750], [600, 80, 13, 900]], float), rounds, False
    )
    c = pooled_costs(before | {"engine": "x"}, after)
    assert c["read_latency_us"] == 350 and c["read_latency_us_range"] == [100, 600]
    assert c["write_latency_us"] == 62.5 and c["per_io_us"] == 10.5
    assert c["round_layer_us"] == 725 and c["engine"] == "x"
    s = 194.5 / 0.998
    assert c["round_us"] == pytest.approx(s)
    assert c["per_io_net_us"] == pytest.approx(10.5 - s / 8000)
    assert len(c["samples"]) == 6
    # one stalled replay (a read of 2,600 us instead of 600) moves the median not at
    # all, where the mean would move by 2000 / 6 = 333 us
    stalled = after["samples"][:2] + [[2600, 80, 13, 900]]
    c2 = pooled_costs(before, after | {"samples": stalled})
    assert c2["read_latency_us"] == 350 and c2["read_latency_us_range"] == [100, 2600]
