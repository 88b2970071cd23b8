"""The replayer's costs the design validation models: measured on the path the
design replays take (paced) and charged by the simulator's CPU
model (:func:`kvtier.compare.replayer.design_profile`)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hwprofiles import load_profile
from kvtier.compare.devices import Devices
from kvtier.compare.replayer import design_profile, designs_paced, paced_costs
from kvtier.contracts.plan import PlanBuilder
from real._pacing import Pacer
from real.replay import replay
from real.targets import Limits, Target
from real.validate import (
    NO_BIND,
    ROUND_IOS,
    _cost_plan,
    engine_costs,
    round_cost,
    with_engine_costs,
)
from sim.executor import simulate

KIB = 1 << 10
LIM = Limits(read_bps=272_000_000, write_bps=160_000_000, read_iops=43_000, write_iops=7_800)


def test_no_bind_limits_never_hold_an_io_back():
    """A 4 KiB read costs 4 KiB / 2^50 B/s = 3.6 ps of device time (the IOPS term,
    1 / 2^40 s, is smaller), so the engine-cost plan's largest op, 8 x 1000 of them,
    is served 29 ns after it starts: far under one I/O's real latency, so its end is
    its last completion (real._pacing: max(F + L, last completion))."""
    n = 1000  # engine_costs' default: n + n at QD1, 8n at QD64, 4 KiB each
    pacer = Pacer(NO_BIND)
    pacer.start(0, 8 * n * 4 * KIB / 2**50, 0.0)
    assert pacer.next_finish() == pytest.approx(8 * n * 4 * KIB / 2**50)
    assert pacer.next_finish() < 1e-7


def test_paced_engine_costs_run_every_device_through_the_pacer(direct_dir: Path):
    dev = Devices(load_profile("h20-8ssd"), str(direct_dir))
    paced = engine_costs(dev, "threads", n_ssd=2, n=16, paced=True)
    batched = engine_costs(dev, "threads", n_ssd=2, n=16)
    assert paced["paced"] and sorted(paced["paced_devices"]) == ["ssd0", "ssd1"]
    assert not batched["paced"] and batched["paced_devices"] == []
    assert paced["per_io_us"] > 0 and "read_latency_us" not in paced  # QD64 only
    assert batched["per_io_us"] > 0 and batched["read_latency_us"] > 0
    assert batched["write_latency_us"] > 0
    assert not list(direct_dir.rglob("kvtier-*.dat"))  # the measurement removed its files


def test_which_design_replays_are_paced():
    prof = load_profile("h20-8ssd")
    limited = {"ssd0": Target("ssd0", "/dev/loop7", 1 << 30, limits=LIM)}
    free = {"ssd0": Target("ssd0", "/dev/loop7", 1 << 30)}
    assert designs_paced(Devices(prof, "/x", targets=limited))  # emulated: paced too
    assert not designs_paced(Devices(prof, "/x", targets=free))  # devices as they are
    assert designs_paced(Devices(prof, "/x", limits=LIM, pacing=True))  # --pace files
    assert not designs_paced(Devices(prof, "/x"))  # --hw


def test_design_profile_measures_only_for_paced_replays():
    """Unpaced devices keep the regime steps' costs (no second measurement: these
    devices could not even be prepared), and ``--no-engine-costs`` keeps the profile."""
    prof = load_profile("h20-8ssd")
    costs = {"read_latency_us": 80.0, "write_latency_us": 20.0, "per_io_us": 9.0}
    dev = Devices(prof, "/nonexistent/dir")
    assert design_profile(dev, "auto", costs) == (prof, costs)
    paced_dev = Devices(prof, "/nonexistent/dir", limits=LIM, pacing=True)
    assert design_profile(paced_dev, "auto", None) == (prof, None)


def test_replayer_costs_are_measured_outside_the_kernel_throttle(direct_dir, monkeypatch):
    """The paced measurement runs outside ``Devices.throttled`` (the emulation's blkio
    group): inside, its QD64 step waits for the throttle's 100 ms slices and measures
    the devices' limit instead of the replayer (real.validate.engine_costs)."""
    import kvtier.compare.replayer as dr

    entered: list[bool] = []

    @contextlib.contextmanager
    def throttled():
        entered.append(True)
        yield

    monkeypatch.setattr(dr, "PACED_COST_IOS", 4)
    prof = load_profile("h20-8ssd")
    dev = Devices(prof, str(direct_dir), limits=LIM, pacing=True, throttled=throttled)
    costs = {"read_latency_us": 80.0, "write_latency_us": 20.0, "per_io_us": 1e-3}
    _, model = design_profile(dev, "threads", costs)
    assert model is not None and model["paced"] and model["per_io_us"] > 0
    assert entered == []


def test_paced_costs_by_hand():
    """Batched: 80 us QD1 read, 20 us write, 9 us/I/O; paced: 50 us/I/O.  Pacing adds
    50 - 9 = 41 us to each I/O's issue, so QD1 takes 121 and 61 us; a paced time
    below the batched one (noise) adds nothing."""
    batched = {"read_latency_us": 80.0, "write_latency_us": 20.0, "per_io_us": 9.0}
    c = paced_costs(batched, {"per_io_us": 50.0, "paced": True})
    assert (c["read_latency_us"], c["write_latency_us"], c["per_io_us"]) == (121.0, 61.0, 50.0)
    assert c["paced"] and c["paced_extra_us"] == 41.0
    c = paced_costs(batched, {"per_io_us": 7.0, "paced": True})
    assert (c["read_latency_us"], c["write_latency_us"], c["per_io_us"]) == (80.0, 20.0, 7.0)


def test_paced_costs_with_rounds_by_hand():
    """With rounds measured, a QD1 I/O is one I/O net of rounds plus a round of its
    own: batched 7 + 128 = 135 us, paced 6 + 256 = 262 us, so pacing adds 127 us to
    each QD1 time (80 -> 207, 20 -> 147), and the paced round and net cost are the
    model's (:func:`real.validate.with_engine_costs`: 256 us per op, 6 per I/O)."""
    batched = {"read_latency_us": 80.0, "write_latency_us": 20.0, "per_io_us": 9.0}
    batched |= {"per_io_net_us": 7.0, "round_us": 128.0}
    paced = {"per_io_us": 10.0, "per_io_net_us": 6.0, "round_us": 256.0, "paced": True}
    c = paced_costs(batched, paced)
    assert (c["read_latency_us"], c["write_latency_us"], c["paced_extra_us"]) == (207, 147, 127)
    sw = with_engine_costs(load_profile("h20-8ssd"), c).software
    assert (sw.io_uring_per_io_us, sw.io_uring_per_op_us, sw.syscall_us) == (6.0, 256.0, 0.0)
    old = with_engine_costs(load_profile("h20-8ssd"), {k: batched[k] for k in list(batched)[:3]})
    assert (old.software.io_uring_per_io_us, old.software.io_uring_per_op_us) == (9.0, 0.0)


def test_the_measured_per_io_cost_is_charged_on_the_replayers_one_core():
    """4 devices, one op of 30 4-KiB reads each, all at once, at 50 us per I/O on the
    one core of the model: the core is the bound, 4 x 30 x 50 us = 6 ms for every op
    (the devices alone: 30 reads at 1M IOPS, 30 us, and a 1 ns latency)."""
    prof = with_engine_costs(
        load_profile("h20-8ssd"),
        {"read_latency_us": 1e-3, "write_latency_us": 1e-3, "per_io_us": 50.0},
    )
    b = PlanBuilder()
    for k in range(4):
        b.read(f"ssd{k}", "dram0", 30 * 4 * KIB, 30, io_path="io_uring", stride=4 * KIB)
    ops = simulate(b.table(), prof).ops.to_pandas()
    assert ops["end_s"].to_numpy() == pytest.approx([4 * 30 * 50e-6] * 4, rel=1e-4)


def layered_plan(n_ssd: int, layers: int, ios: int):
    """A design's read pattern: per layer one read of ``ios`` 4 KiB I/Os per device,
    each layer after the previous one's reads (the device's own queue depth)."""
    b, prev = PlanBuilder(), []
    for layer in range(layers):
        prev = [
            b.read(
                f"ssd{k}", "dram0", ios * 4 * KIB, ios, io_path="io_uring", depends_on=prev,
                layer=layer, offset=layer * ios * 4 * KIB, stride=4 * KIB,
            )
            for k in range(n_ssd)
        ]  # fmt: skip
    return b.table()


def test_paced_costs_model_a_paced_replay_within_a_factor_of_2(direct_dir: Path):
    """A layered plan replayed through the pacer (limits that never bind, so the
    replayer is the bound) is predicted by the paced-path costs within a factor of 2.
    Each layer is one round of the loop per device: without the round term
    (``round_us``, :func:`real.validate.engine_costs`) the model charged only 48 I/Os
    at the QD64 stream's cost: in 12 tries (2026-11-29) a median 0.73 of the replay's
    time (0.59-0.83; CI failed at 0.47), with it 1.01 (0.80-1.11).

    (Until 2026-11-29 the test also held the paced costs to predict no worse than the
    batched path's, allowing the two measurements' disagreement.  On this plan the
    simulated time is proportional to a layer's cost, so that disagreement is exactly
    the two predictions' log ratio, and the triangle inequality made the assertion
    unable to fail but by float rounding -- which it once did, at 8e-17.)

    The machine's speed swings 3x within a minute here (the QD64 stream measured 4.8-16.6
    us per I/O in 12 replays back to back, 2026-11-29), so each try measures the costs
    and the replays they predict together, and the test takes the median of three."""
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        pytest.skip(f"load average {load:.1f} over {os.cpu_count()} cores: wall-time comparison")
    dev = Devices(load_profile("h20-8ssd"), str(direct_dir))
    plan = layered_plan(2, 6, 24)
    ratios = []  # simulated / real makespan per try
    for _ in range(3):
        batched_c = engine_costs(dev, "auto", n_ssd=2, n=100)
        paced_c = paced_costs(batched_c, engine_costs(dev, "auto", 2, n=100, paced=True))
        spans = []
        with dev.prepared(plan, 0, None, unpaced=True) as targets:
            paced_t = {k: replace(t, limits=NO_BIND, pacing=True) for k, t in targets.items()}
            for _ in range(3):
                rec = replay(plan, paced_t, engine="auto")
                assert rec.stats["paced"] == ["ssd0", "ssd1"]
                spans.append(rec.stats["makespan_s"])
        sim = simulate(plan, with_engine_costs(dev.profile, paced_c)).stats["makespan_s"]
        ratios.append(sim / float(np.median(spans)))
    assert 0.5 < np.median(ratios) < 2.0, ratios


def test_round_cost_by_hand():
    """A layer of m = 16 I/Os per device on 2 devices took 480 us, the stream 6.8 us
    per I/O with one round in its 800 I/Os per device: s = (480 / 2 - 16 x 6.8) /
    (1 - 16 / 800) = 131.2 / 0.98 = 133.88 us; c' = 6.8 - 133.88 / 800 = 6.633 us.  A
    layer no slower than its I/Os at the stream's cost gives no round; with a round
    per 64 I/Os, one so slow that c' would fall under a tenth of c keeps c' = 0.68
    (s = 0.9 x 6.8 x 64 = 391.68)."""
    s, net = round_cost(480.0, 6.8, 2, 16, 1 / 800)
    assert s == pytest.approx(131.2 / 0.98) and net == pytest.approx(6.8 - 131.2 / 0.98 / 800)
    assert round_cost(200.0, 6.8, 2, 16, 1 / 800) == (0.0, 6.8)
    s, net = round_cost(5000.0, 6.8, 2, 16, 1 / 64)
    assert s == pytest.approx(391.68) and net == pytest.approx(0.68)


@pytest.mark.parametrize("layer_us", [300.0, 480.0, 700.0])
def test_the_model_reproduces_both_cost_steps_it_was_solved_from(layer_us):
    """The solve and the simulator's CPU model (``io_uring_per_io_us`` per I/O,
    ``io_uring_per_op_us`` per op, on the replayer's one core) are written apart; they
    agree when the simulated cost plan, on devices too fast to matter, takes the
    measured time for both steps: the QD64 stream 2 x 800 x 6.8 us = 10.88 ms (its
    op's round included) and each round layer ``layer_us``."""
    prof = load_profile("h20-8ssd")
    n_ssd, n, c = 2, 100, 6.8
    plan, many, layers = _cost_plan(n_ssd, n, qd1=False)
    s, net = round_cost(layer_us, c, n_ssd, ROUND_IOS, 1 / many)
    costs = {"read_latency_us": 1e-3, "write_latency_us": 1e-3, "per_io_us": c}
    ops = simulate(plan, with_engine_costs(prof, costs | {"round_us": s, "per_io_net_us": net}))
    ops = ops.ops.to_pandas()
    span = {k: g["end_s"].max() - g["start_s"].min() for k, g in ops.groupby("step")}
    assert span[2] == pytest.approx(n_ssd * many * c * 1e-6, rel=1e-3)
    assert span[3] / layers == pytest.approx(layer_us * 1e-6, rel=1e-3)
