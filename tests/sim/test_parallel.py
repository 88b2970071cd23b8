"""One executor for many runs (:mod:`sim.parallel`): real simulations (two sweeps and
a plan's grid over two base profiles) sent through a local Ray instance give the local
process pool's results, field by field."""

from __future__ import annotations

import dataclasses
import socket

import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.capacity.evaluate import Question
from sim.capacity.search import Space, search
from sim.config import ConfigError, load_scenario
from sim.parallel import LocalExecutor, check_address, make_executor
from sim.sweep import sweep


def _tiers():
    """The ``tiers`` scenario (sparse decoding, 10 variants) cut to 2 steps of 2 layers."""
    cfg = load_scenario("tiers")
    w = dataclasses.replace(cfg.workload, steps=2, layers=2)
    return dataclasses.replace(cfg, workload=w)


def _chat():
    """The ``paged-ssd`` serving scenario, its first 2 variants, a few sessions."""
    cfg = load_scenario("paged-ssd")
    w = dataclasses.replace(cfg.workload, session_rate=6.0)
    return dataclasses.replace(cfg, workload=w, variants=cfg.variants[:2])


SWEEPS = [  # (scenario, profile, factors, rows: points x variants worked out by hand)
    (_tiers, "h20-8ssd", {"ssds": [1, 2], "batch": [1, 4]}, 2 * 2 * 10),
    (_chat, "dgx-spark", {"sessions": [4, 8]}, 2 * 2),
]


# kvtier plan's grid: Llama-3.1-8B, 2 documents of 16K tokens, pool design, 1 or 2 PM9A3s,
# on two bases (GPU models): H20s and H100 SXMs
PLAN = (Question(base="h20-8ssd", docs=2, context_tokens=16384),
        Space(("pool",), ("Samsung PM9A3 3.84 TB U.2",), (1, 2), (1,), (32.0,),
              bases=("h20-8ssd", "dgx-h100")))  # fmt: skip


def _sweeps(executor) -> list[pd.DataFrame]:
    frames = [
        sweep(make(), load_profile(hw), factors, executor=executor)
        for make, hw, factors, _ in SWEEPS
    ]
    plan = search(*PLAN, executor=executor, prune=False).rows
    assert (plan["status"] == "ok").all() and (plan["sim_wall_s"] > 0).all()
    return [*frames, plan.drop(columns="sim_wall_s")]  # the one field that is a stopwatch


def test_sweeps_and_a_plan_on_ray_equal_the_local_pool() -> None:
    ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
    pool = _sweeps(LocalExecutor(2))  # two worker processes
    ex = make_executor("ray", jobs=2)  # a Ray instance started here with 2 CPUs
    try:
        about = ex.describe()
        on_ray = _sweeps(ex)
    finally:
        ray.shutdown()
    assert about == {"executor": "ray", "address": "local", "workers": 2, "ray": ray.__version__}
    for (_, _, factors, rows), want in zip(SWEEPS, pool, strict=False):
        assert len(want) == rows
        for name, values in factors.items():  # every point, in the product's order
            assert sorted(set(want[name])) == values
    for got, want in zip(on_ray, pool, strict=True):
        pd.testing.assert_frame_equal(got, want, check_exact=True)
    plan = pool[-1]  # the plan's four grid points, each simulated on its base's GPU
    assert list(zip(plan["base"], plan["ssds"], strict=True)) == [
        ("h20-8ssd", 1), ("h20-8ssd", 2), ("dgx-h100", 1), ("dgx-h100", 2)
    ]  # fmt: skip
    assert plan["gpu_model"].tolist() == ["NVIDIA H20"] * 2 + ["NVIDIA H100 SXM5 80 GB"] * 2
    assert plan["ttft_p99_s"].nunique() > 1


def test_an_address_is_checked_by_a_tcp_connect() -> None:
    """A listening port passes (Ray would then join it); once closed, the same port is
    refused at once instead of after Ray's minutes of retries (the CLI's cases:
    tests/badinput/cases_flags.py)."""
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        port = head.getsockname()[1]
        check_address(f"127.0.0.1:{port}")
        check_address(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=f"^--address 127.0.0.1:{port}: no Ray cluster"):
        check_address(f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="^--address ray://head:99999: not a Ray address"):
        check_address("ray://head:99999")
