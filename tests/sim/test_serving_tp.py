"""Tensor parallelism (sim/serving/execute/tp.py): the rank's shard, its all-reduce and its
share of the machine, checked by hand arithmetic and against N ranks simulated together."""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles import load_profile
from sim.config import ScenarioConfig, ServingParams, Variant
from sim.hw.machine import Machine
from sim.models import get_model
from sim.registry import Unsupported
from sim.runner import run
from sim.serving.execute import tp as tp_mod
from sim.serving.execute.online import OnlineOps
from sim.serving.execute.tp import (
    allreduce_bytes,
    allreduce_latency_s,
    rank_card,
    rank_kv_heads,
    rank_profile,
)
from sim.serving.policy.costs import iteration_layer_cost

H20 = "h20-8ssd"  # NVLink 450 GB/s per direction x 0.85; 2 GPUs per PCIe switch


def test_rank_card_holds_one_nth_of_weights_kv_and_flops():
    card = get_model("Llama-3.1-70B")
    r = rank_card(card, 2)
    # 8 KV heads over 2 ranks: 4 each; K+V x 4 heads x 128 x 2 B = 2048 B per token-layer
    assert r.kv_heads == 4 and r.kv_bytes_per_token_layer == 2 * 4 * 128 * 2 == 2048
    assert r.layer_params == pytest.approx(card.layer_params / 2, rel=1e-12)
    assert r.weight_bytes == pytest.approx(card.weight_bytes / 2, rel=1e-12)  # 128256 / 2 exact
    full = iteration_layer_cost(card, [(4096, 0)], [])
    half = iteration_layer_cost(r, [(4096, 0)], [])
    assert half.flops == pytest.approx(full.flops / 2, rel=1e-12)
    assert half.hbm_bytes == pytest.approx(full.hbm_bytes / 2, rel=1e-12)


def test_kv_heads_replicated_when_ranks_outnumber_them():
    card = dataclasses.replace(get_model("Llama-3.1-8B"), kv_heads=4)  # 32 q heads, 4 KV heads
    assert rank_kv_heads(card, 2) == 2
    assert rank_kv_heads(card, 8) == 1  # each KV head held by 2 of the 8 ranks
    r = rank_card(card, 8)
    assert r.kv_bytes_per_token_layer == 2 * 1 * 128 * 2
    # the replica's k/v projections: 2 x hidden x head_dim x (1 - 4/8) more per layer
    extra = 2 * 4096 * 128 * (1 - 4 / 8)
    assert r.layer_params == pytest.approx(card.layer_params / 8 + extra, rel=1e-12)
    with pytest.raises(Unsupported, match="KV heads"):
        rank_kv_heads(dataclasses.replace(card, kv_heads=8, q_heads=24), 3)


def test_allreduce_of_one_layer_by_hand():
    card = get_model("Llama-3.1-70B")
    # 1024 tokens x 8192 x 2 B = 16 MiB a message; 2 per layer; ring: 2 (N-1)/N of it per rank
    msg = 1024 * 8192 * 2
    assert allreduce_bytes(card, 1024, 2) == 2 * 2 * (1 / 2) * msg
    assert allreduce_bytes(card, 1024, 8, layers=80) == 80 * 2 * 2 * (7 / 8) * msg
    # simulated: the copy gpu0 -> gpu1 crosses both NVLink ports at 450e9 x 0.85 B/s
    prof = rank_profile(load_profile(H20), 2)
    m = Machine(prof)
    ops = OnlineOps(m)
    nbytes = int(allreduce_bytes(card, 1024, 2))
    ops.submit("copy", "gpu0", "gpu1", nbytes=nbytes)
    m.env.run()
    assert ops.end_s[0] - ops.start_s[0] == pytest.approx(nbytes / (450e9 * 0.85), rel=1e-9)


def test_rank_profile_shares_by_topology():
    base = load_profile(H20)
    r = rank_profile(base, 4)  # ranks gpu0..gpu3: two under sw0, two under sw1
    g = {ln.name: ln.gbps for ln in r.topology.links}
    assert g["dram0.bus"] == pytest.approx(614.4 / 4)  # every rank's KV crosses it
    assert g["ssd5.pcie"] == pytest.approx(7.88 / 4)  # each rank's slice is on every SSD
    assert g["sw0.up"] == pytest.approx(63.0 / 2) and g["sw1.up"] == pytest.approx(63.0 / 2)
    assert g["sw2.up"] == 63.0  # no rank below it
    assert g["gpu0.pcie"] == 63.0 and g["gpu0.nvlink"] == 450.0  # the rank's own
    assert r.dram[0].capacity_gib == 256 and r.cpu.cores == 16
    assert r.ssds[0].read_iops == pytest.approx(1.1e6 / 4) and r.ssds[0].read_gbps == 6.9 / 4
    with pytest.raises(Unsupported, match="needs 16 GPUs"):
        rank_profile(base, 16)


def test_one_rank_on_its_shares_moves_what_it_moves_among_n():
    """N ranks each loading the same KV slice from DRAM and from every SSD at once, on
    the whole machine, finish exactly when rank 0 alone does on its rank profile."""
    base, n, nbytes = load_profile(H20), 4, 2_000_000_000
    ends = []
    for prof, gpus in ((base, [f"gpu{i}" for i in range(n)]), (rank_profile(base, n), ["gpu0"])):
        m = Machine(prof)
        ops = OnlineOps(m)
        for g in gpus:
            ops.submit("copy", "dram0", g, nbytes=nbytes)
            for s in prof.ssd_names:
                ops.submit(
                    "read",
                    s,
                    g,
                    nbytes=nbytes // 8,
                    n_ios=64,
                    queue_depth=32,
                    io_path="passthrough",
                )
        m.env.run()
        ends.append(max(ops.end_s))
    assert ends[1] == pytest.approx(ends[0], rel=1e-9)


def _summary(tp: int, output_tokens: int = 2) -> dict:
    w = ServingParams(
        model="Llama-3.1-70B", design="gpu-only", trace="long_doc", context_tokens=8192,
        docs=1, output_tokens=output_tokens, block_tokens=256, gpu_prefix_cache=False, tp=tp,
    )  # fmt: skip
    res = run(ScenarioConfig("t", "t", 0, w, (Variant("gpu-only"),)), load_profile(H20), None)
    return res.variants[0].summary


def _ttft(tp: int) -> float:
    return float(_summary(tp)["ttft_p99_s"])


def test_allreduce_latency_by_hand():
    # NCCL ring over NVLink, LL: 3.6 us + 2 (N-1) steps x 0.47 us an all-reduce
    assert allreduce_latency_s(1, 160) == 0.0
    assert allreduce_latency_s(2) == pytest.approx(3.6e-6 + 2 * 0.47e-6)
    assert allreduce_latency_s(8) == pytest.approx(3.6e-6 + 14 * 0.47e-6)  # 10.18 us
    # 70B decode step (80 layers x 2 all-reduces): 0.73 / 1.03 / 1.63 ms at N = 2 / 4 / 8
    for n, ms in ((2, 0.7264), (4, 1.0272), (8, 1.6288)):
        assert allreduce_latency_s(n, 160) * 1e3 == pytest.approx(ms, rel=1e-9)


def test_allreduce_latency_adds_exactly_to_each_decode_step(monkeypatch):
    """A lone request decodes in lock-step: every decode step (one TPOT) is longer by
    exactly the 160 all-reduces' latency; the prefill (TTFT) by the same amount."""
    with_lat = _summary(4, output_tokens=5)
    monkeypatch.setattr(tp_mod, "NCCL_BASE_LAT_S", 0.0)
    monkeypatch.setattr(tp_mod, "NCCL_STEP_LAT_S", 0.0)
    without = _summary(4, output_tokens=5)
    lat = 160 * (3.6e-6 + 6 * 0.47e-6)  # 1.0272 ms
    for key in ("tpot_p99_s", "ttft_p99_s"):
        assert with_lat[key] - without[key] == pytest.approx(lat, rel=1e-6)
    print(f"70B tp 4 decode TPOT {without['tpot_p99_s'] * 1e3:.3f} -> "
          f"{with_lat['tpot_p99_s'] * 1e3:.3f} ms with the all-reduce latency")  # fmt: skip


def test_tp_prefill_time_is_the_rank_roofline_plus_the_allreduces():
    card, base = get_model("Llama-3.1-70B"), load_profile(H20)
    # 70B on one 96 GB H20: 141 GB of weights do not fit, so tp 1 cannot run
    with pytest.raises(Exception, match="no room for KV|exceeds"):
        _ttft(1)
    m, t = Machine(base), 8192
    for tp in (2, 4):
        r = rank_card(card, tp)
        layer = iteration_layer_cost(r, [(t, 0)], [])
        from sim.models import lm_head_cost

        head = lm_head_cost(r, 1)
        compute = m.gpu_seconds("gpu0", layer.flops * 80 + head.flops,
                                layer.hbm_bytes * 80 + head.hbm_bytes)  # fmt: skip
        comm = int(allreduce_bytes(card, t, tp, 80)) / (450e9 * 0.85)
        comm += 160 * (3.6e-6 + 2 * (tp - 1) * 0.47e-6)  # NCCL's latency term
        assert _ttft(tp) == pytest.approx(compute + comm, rel=1e-6)
    # compute-bound prefill: 4 ranks take about half of 2 ranks' compute
    assert _ttft(4) < 0.6 * _ttft(2)


# ---- tensor-parallel replicas behind a router -----------------------------------------
def test_rank_profile_of_two_instances_shares_what_their_ranks_share():
    """Two TP-2 instances on h20-8ssd, gpu0-1 (under sw0) and gpu2-3 (under sw1): each
    switch uplink is crossed by two ranks of one instance, the DRAM bus and every SSD
    link by two ranks of each (4 real flows, 2 rank-0 flows on a half link: 1/4 each)."""
    r = rank_profile(load_profile(H20), 2, [["gpu0", "gpu1"], ["gpu2", "gpu3"]])
    g = {ln.name: ln.gbps for ln in r.topology.links}
    assert g["sw0.up"] == g["sw1.up"] == pytest.approx(63.0 / 2)
    assert g["dram0.bus"] == pytest.approx(614.4 / 2) and g["ssd0.pcie"] == pytest.approx(7.88 / 2)
    assert g["gpu0.pcie"] == g["gpu2.pcie"] == 63.0
    assert r.dram[0].capacity_gib == 512 and r.cpu.cores == 32
    # an instance crossing sw0 with 2 ranks beside one crossing it with 1: not symmetric
    with pytest.raises(Unsupported, match="unequal rank counts"):
        rank_profile(load_profile(H20), 2, [["gpu0", "gpu1"], ["gpu2", "gpu0"]])


def test_two_tp_replicas_behind_a_router_each_run_as_one_tp_instance_alone():
    """gpu-only TP-2 replicas share nothing on the machine (their ranks' NVLink rings
    and GPUs are their own), so replica r0 serves its requests exactly as one TP-2
    instance alone serves them: same first tokens, same ends, all-reduces included."""
    import numpy as np

    from sim.fleet.routed import run_routed
    from sim.fleet.router import make_router
    from sim.serving.build import build_engine
    from sim.serving.designs import get_design
    from sim.serving.execute.engine import EngineConfig
    from sim.serving.execute.multi import Instance
    from sim.serving.execute.tp import TensorParallel
    from sim.serving.requests import Request

    base, full, design = load_profile(H20), get_model("Llama-3.1-70B"), get_design("gpu-only")
    card = rank_card(full, 2)

    def reqs():
        return [Request(i, 0.05 * i, i, 0, 3000 + 500 * i, 6, ()) for i in range(6)]

    pairs = (("gpu0", "gpu1"), ("gpu2", "gpu3"))
    insts = [
        Instance(f"r{k}", card, design, EngineConfig(gpu_blocks=3000, gpu=g, block_tokens=16),
                 [], tp=TensorParallel(2, full, g, peer))
        for k, (g, peer) in enumerate(pairs)
    ]  # fmt: skip
    two = rank_profile(base, 2, [list(p) for p in pairs])
    rr = make_router("round_robin", {}, 2, 16, np.random.default_rng(0))
    records, where = run_routed(two, insts, reqs(), rr)
    mine = [r for r in reqs() if where[r.rid] == 0]
    assert [r.rid for r in mine] == [0, 2, 4]
    cfg = EngineConfig(gpu_blocks=3000, gpu="gpu0", block_tokens=16)
    alone = build_engine(rank_profile(base, 2), card, design, cfg, mine,
                         tp=TensorParallel(2, full)).run()  # fmt: skip
    cols = ("request_id", "first_token_s", "finish_s")
    got = records["r0"].requests.select(list(cols)).to_pydict()
    want = alone.requests.select(list(cols)).to_pydict()
    assert got["request_id"] == want["request_id"] == [0, 2, 4]
    assert got["first_token_s"] == pytest.approx(want["first_token_s"], rel=1e-12)
    assert got["finish_s"] == pytest.approx(want["finish_s"], rel=1e-12)
    # the all-reduces ran: r0's ops include them, on its own NVLink pair
    ops = records["r0"].ops.to_pandas()
    ar = ops[ops["tag"] == "allreduce"]
    assert len(ar) > 0 and set(ar["src"]) == {"gpu0"} and set(ar["dst"]) == {"gpu1"}
    ops1 = records["r1"].ops.to_pandas()
    assert set(ops1.loc[ops1["tag"] == "allreduce", "src"]) == {"gpu2"}


def test_a_routed_scenario_of_tp_replicas_runs_and_refuses_disaggregation():
    """``replicas: 2, tp: 2`` through the scenario runner: both replicas serve, the
    summary names the tensor parallelism; with disaggregation: one line (ConfigError)."""
    from sim.config import ConfigError

    w = ServingParams(
        model="Llama-3.1-70B", design="gpu-only", sessions=6, turns=1.0, session_rate=20.0,
        prompt_tokens=2048, reply_tokens=4, max_context=8192, block_tokens=16,
        replicas=2, tp=2, router="round_robin",
    )  # fmt: skip
    res = run(ScenarioConfig("t", "t", 0, w, (Variant("gpu-only"),)), load_profile(H20), None)
    s = res.variants[0].summary
    assert s["tp"] == 2 and s["instances"] == 2
    assert s["r0_requests"] > 0 and s["r1_requests"] > 0  # round-robin: both serve
    bad = dataclasses.replace(w, replicas=0, disaggregation={"prefill": 1, "decode": 1})
    with pytest.raises(ConfigError, match="tp: tensor parallelism with disaggregation"):
        run(ScenarioConfig("t", "t", 0, bad, (Variant("gpu-only"),)), load_profile(H20), None)
