"""GPU count as a plan dimension: variants keep N GPUs and pay for N; unfit chains skipped."""

from __future__ import annotations

import pytest

from sim.capacity.binding import Binding
from sim.capacity.evaluate import Point, Question, point_key, unfit
from sim.capacity.prices import bill, load_prices
from sim.capacity.search import Space, search
from sim.capacity.variants import Hardware, derive, resolve_ssd


def test_variant_keeps_n_gpus_and_pays_for_n(tmp_path):
    pm = resolve_ssd("PM9A3")
    prices = load_prices()
    two = derive("h20-8ssd", Hardware(pm, 1, 1, 512.0, 2), tmp_path)
    eight = derive("h20-8ssd", Hardware(pm, 1, 1, 512.0, 8), tmp_path)
    assert two.gpu_names == ("gpu0", "gpu1")
    assert not [ln for ln in two.topology.links if "gpu5" in ln.between]
    h20 = prices.get("gpu/NVIDIA H20").usd
    assert bill(eight, prices)["gpu"] - bill(two, prices)["gpu"] == pytest.approx(6 * h20)


def test_unfit_by_weights_and_heads():
    q = Question(base="h20-8ssd", model="Llama-3.1-70B")
    pm = resolve_ssd("PM9A3")
    # 141.1 GB of bf16 weights: one 96 GiB H20 (0.9 x 96 = 86.4 GiB) cannot hold them, two can
    assert unfit(q, Hardware(pm, 1, 1, 512.0, 1)).startswith("weights do not fit")
    assert unfit(q, Hardware(pm, 1, 1, 512.0, 2)) == ""
    assert "does not divide" in unfit(q, Hardware(pm, 1, 1, 512.0, 3))
    assert unfit(q, Hardware(pm, 1, 1, 512.0, 0)) == ""  # the base's GPUs, as before
    # more GPUs than the base has: that base's point is unfit (another base may have them)
    small = Question(base="h20-server", model="Llama-3.1-8B")
    assert unfit(small, Hardware(pm, 1, 1, 64.0, 2)) == "h20-server has 1 GPU(s), 2 asked"
    assert unfit(small, Hardware(pm, 1, 1, 64.0, 2), replicas=2) == unfit(
        small, Hardware(pm, 1, 1, 64.0, 2)
    )
    assert unfit(small, Hardware(pm, 1, 1, 64.0, 1)) == ""


def test_search_never_simulates_unfit_chains():
    q = Question(base="h20-8ssd", model="Llama-3.1-70B")
    space = Space(("lmcache",), (resolve_ssd("PM9A3"),), (1, 2), (1,), (512.0,), (1, 2))
    ran: list[Point] = []

    def fake(q, p):
        ran.append(p)
        return {"key": point_key(q, p), **p.flat(), "status": "ok", "ttft_p99_s": 1.0,
                "tpot_p99_s": 0.01, "throughput_tok_s": 10.0,
                **Binding(("gpu0.hbm",)).columns("bottleneck_run")}  # fmt: skip

    res = search(q, space, fn=fake)
    assert {p.hw.gpus for p in ran} == {2}
    assert sum(str(s).startswith("skipped: unfit") for s in res.rows["status"]) == 2


def _walk(bound_at_4: tuple[str, ...], ttft_at_8: float = 4.0) -> tuple[set[int], dict]:
    """Fake physics over GPU counts 1, 2, 4, 8 (8B fits each): TTFT 8, 4, 4, ttft_at_8 s;
    GPU compute binds at 1 and 2, ``bound_at_4`` at 4 and 8."""
    q = Question(base="h20-8ssd", model="Llama-3.1-8B")
    space = Space(("lmcache",), (resolve_ssd("PM9A3"),), (1, 2, 4), (1,), (512.0,), (1, 2, 4, 8))
    ttft, ran = {1: 8.0, 2: 4.0, 4: 4.0, 8: ttft_at_8}, set()

    def fake(q, p):
        g = p.hw.gpus
        ran.add(g)
        bound = Binding(("gpu0.tensor",) if g < 4 else bound_at_4)
        return {"key": point_key(q, p), **p.flat(), "status": "ok", "ttft_p99_s": ttft[g],
                "tpot_p99_s": 0.01, "throughput_tok_s": 10.0,
                **bound.columns("bottleneck_run")}  # fmt: skip

    res = search(q, space, fn=fake)
    return ran, dict(zip(res.rows["gpus"], res.rows["status"], strict=False))


def test_gpu_walk_stops_where_the_allreduce_or_a_shared_host_resource_binds():
    # 2 -> 4 GPUs improved nothing and NVLink (the all-reduce) binds at 4: 8 never runs
    ran, status = _walk(("gpu0.nvlink>",))
    assert ran == {1, 2, 4} and status[8].startswith("skipped: saturated: gpu0.nvlink")
    ran, _ = _walk(
        ("dram0.bus", *(f"ssd{i}" for i in range(8)))
    )  # every rank shares the DRAM bus and the SSDs
    assert ran == {1, 2, 4}


def test_gpu_walk_goes_on_while_more_gpus_can_help():
    assert _walk(("gpu0.hbm",))[0] == {1, 2, 4, 8}  # each rank brings its own HBM
    assert _walk(("sw0.up>",))[0] == {1, 2, 4, 8}  # a rank moves 1/N through its share


def test_replicas_on_one_machine_split_its_dram_and_ssd_budgets():
    """h20-8ssd: one 1,024 GiB module, 16 GiB reserved; four replicas get a quarter of
    the 1,008 GiB and of the question's 372.53 GiB of SSD each; tensor parallelism (one
    instance) keeps it whole."""
    from hwprofiles import load_profile
    from sim.capacity.evaluate import scenario

    h20, q = load_profile("h20-8ssd"), Question(base="h20-8ssd")
    four = scenario(q, "lmcache", h20, replicas=4, router="round_robin").workload
    assert four.design_params == pytest.approx({"cpu_gib": 252.0, "ssd_gib": 372.53 / 4})
    assert four.replicas == 4
    one = scenario(q, "lmcache", h20, tp=8).workload
    assert one.design_params == pytest.approx({"cpu_gib": 1008.0, "ssd_gib": 372.53})
