"""Achievable-efficiency factors in the simulator: times worked out by hand,
the same capacities for every design, and bad factors rejected by the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import sim.executor
from hwprofiles import PROFILE_DIR, EfficiencySpec, load_profile
from kvtier.cli.main import main
from kvtier.contracts.plan import PlanBuilder
from sim.config import SwarmParams
from sim.executor import simulate
from sim.hw.machine import Machine
from sim.scenarios.swarm import plan_swarm

GB = 1e9


def end_of(plan, profile, op: int) -> float:
    ops = simulate(plan, profile).ops.to_pandas().set_index("op_id")
    return float(ops.loc[op, "end_s"])


def pcie5_host_link(make_profile, f: float):
    """The tiny machine with gpu0 on a PCIe 5.0 x16 link (63.0 GB/s) whose
    pcie factor is ``f``; every other hop (membus) is far wider."""
    eff = dataclasses.replace(EfficiencySpec(), pcie=f, membus=1.0)
    p = make_profile(efficiency=eff)
    links = tuple(
        dataclasses.replace(ln, gbps=63.0)
        if ln.name == "gpu0.pcie"
        else dataclasses.replace(ln, gbps=1000.0)
        if ln.name == "dram0.bus"
        else ln
        for ln in p.topology.links
    )
    return dataclasses.replace(p, topology=dataclasses.replace(p.topology, links=links))


@pytest.mark.parametrize("f", [1.0, 0.88, 0.5])
def test_1gb_host_copy_over_pcie5_x16_takes_1_over_63f_seconds(make_profile, f):
    p = pcie5_host_link(make_profile, f)
    b = PlanBuilder()
    c = b.copy("dram0", "gpu0", int(GB))
    assert end_of(b.table(), p, c) == pytest.approx(1 / (63 * f))


@pytest.mark.parametrize(("f_hbm", "f_tensor"), [(1.0, 1.0), (0.9, 0.75), (0.5, 0.6)])
def test_compute_is_charged_at_achievable_hbm_and_tensor_rates(make_profile, f_hbm, f_tensor):
    # tiny GPU: 2000 GB/s HBM, 100 TFLOPS bf16
    p = make_profile(efficiency=dataclasses.replace(EfficiencySpec(), hbm=f_hbm, tensor=f_tensor))
    b = PlanBuilder()
    mem = b.compute("gpu0", 1.0, 1e9)  # HBM-bound: 1 GB of weights/KV streamed
    flop = b.compute("gpu1", 1e12, 1.0)  # compute-bound: 1 TFLOP
    ops = simulate(b.table(), p).ops.to_pandas().set_index("op_id")
    assert ops.loc[mem, "end_s"] == pytest.approx(1e9 / (2000e9 * f_hbm))
    assert ops.loc[flop, "end_s"] == pytest.approx(1e12 / (100e12 * f_tensor))


def test_ssd_factor_scales_the_device_not_the_latency(make_profile):
    # 1 GB read from one PM9A3 in 1 MiB I/Os at QD 128: bandwidth-bound at 6.9 GB/s x f
    f = 0.8
    p = make_profile(efficiency=dataclasses.replace(EfficiencySpec(), ssd=f, pcie=1.0))
    b = PlanBuilder()
    r = b.read("ssd0", "dram0", int(GB), n_ios=954, queue_depth=128, io_path="passthrough")
    assert end_of(b.table(), p, r) == pytest.approx(1 / (6.9 * f), rel=1e-3)


def test_every_link_gets_its_kinds_factor_once():
    p = load_profile("h20-8ssd")
    m = Machine(p)
    eff = p.efficiency
    for ln in p.topology.links:
        want = (
            ln.gbps * GB * {"pcie": eff.pcie, "nvlink": eff.nvlink, "membus": eff.membus}[ln.kind]
        )
        arrows = [""] if ln.duplex == "half" else [">", "<"]
        for a in arrows:
            assert m.net.capacity[m.net.names.index(ln.name + a)] == pytest.approx(want)
    # the H20 host link: 63.0 GB/s x 0.88 = 55.44 GB/s achievable
    assert m.link_caps["gpu0.pcie"] == pytest.approx(55.44e9)


def test_two_designs_run_on_identical_capacities(monkeypatch):
    """Swarm and PQCache plans of one scenario simulate on machines whose every
    capacity is equal: the factors come from the profile, not the design."""
    built: list[Machine] = []

    class Spy(Machine):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            built.append(self)

    monkeypatch.setattr(sim.executor, "Machine", Spy)
    h20 = load_profile("h20-8ssd")
    base = SwarmParams(context_tokens=4096, batch=2, steps=2, profile_steps=96, layers=2)
    for design in ("swarm", "pqcache"):
        simulate(plan_swarm(dataclasses.replace(base, design=design), h20, seed=0).plan, h20)
    a, b = built
    for net in ("net", "cpu_net", "gpu_net"):
        na, nb = getattr(a, net), getattr(b, net)
        assert (na.names, na.capacity) == (nb.names, nb.capacity)
    assert (
        (a.hbm_bps, a.tensor_flops)
        == (b.hbm_bps, b.tensor_flops)
        == pytest.approx((3600e9, 111e12))
    )


def test_bad_factor_through_the_cli_is_one_line_exit_2(tmp_path: Path, capsys):
    text = (PROFILE_DIR / "h20-8ssd.yaml").read_text()
    assert text.count("  pcie: 0.88 ") == 1
    line = text[: text.index("  pcie: 0.88 ")].count("\n") + 1
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("  pcie: 0.88 ", "  pcie: 1.2 "))
    assert main(["sim", "--hw", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"{path}:{line}: efficiency.pcie: must be in (0, 1], got 1.2" in err
    assert not (tmp_path / "out").exists()


def test_run_json_records_the_factors(tmp_path: Path):
    out = tmp_path / "o"
    argv = ["sim", "--scenario", "tiers", "--hw", "h20-8ssd", "--steps", "2", "--out", str(out)]
    assert main(argv) == 0
    (run_json,) = out.rglob("run.json")
    recorded = json.loads(run_json.read_text())["profile"]["efficiency"]
    assert recorded == dataclasses.asdict(load_profile("h20-8ssd").efficiency)
    assert recorded["pcie"] == 0.88 and recorded["hbm"] == 0.90
