"""Prefill/decode disaggregation (sim/fleet/disagg.py) on the two-node fleet,
and instance placement onto a fleet's nodes (sim/scenarios/serving_routed.py).

One request of 1,000 prompt tokens and 5 output tokens, Llama-3.1-8B (KV: 2 x 8
heads x 128 x 2 B = 4,096 B a token a layer, x 32 layers = 131,072 B a token),
16-token blocks: the prompt is 63 blocks = 1,008 tokens = 132,120,576 B of KV.
Prefilled on gpu0 (node 0) and decoded on gpu8 (node 1), the KV crosses the NIC
ports at 50 GB/s x 0.99 = 49.5 GB/s after 2 us: 2.671 ms.  On gpu1 (same node)
it crosses NVLink at 450 x 0.85 = 382.5 GB/s with no latency: 0.345 ms.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, ServingParams
from sim.fleet.disagg import disagg_records, handoffs, run_disagg
from sim.fleet.routed import run_routed
from sim.fleet.router import make_router
from sim.hw.machine import Machine
from sim.models import get_model
from sim.registry import ParamError
from sim.scenarios.serving_routed import place, routed_specs
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance
from sim.serving.policy.costs import iteration_cost
from sim.serving.requests import Request

FLEET = load_profile("fleet-2x-dgx-h100")
CARD = get_model("Llama-3.1-8B")
B = 16
KV_BYTES = 63 * B * 131_072  # the prompt's whole blocks


def _req() -> Request:
    return Request(0, 0.0, -1, 0, 1000, 5, tuple(range(1, 63)))


def _inst(name: str, gpu: str) -> Instance:
    return Instance(
        name, CARD, get_design("gpu-only", {}), EngineConfig(gpu_blocks=4000, gpu=gpu), []
    )


def _router(n: int):
    return make_router("round_robin", {}, n, B, np.random.default_rng(0))


def _disagg(decode_gpu: str):
    req = _req()
    records, router = run_disagg(FLEET, [_inst("p0", "gpu0")], [_inst("d0", decode_gpu)], [req],
                                 _router(1), _router(1))  # fmt: skip
    h = handoffs([records["d0"]], router).iloc[0]
    row = disagg_records([records["p0"]], [records["d0"]], [req]).requests.to_pylist()[0]
    return records, h, row


def test_kv_geometry_by_hand():
    assert CARD.kv_bytes_per_token_layer * CARD.layers == 131_072


@pytest.mark.parametrize(
    ("decode_gpu", "transfer_s"),
    [("gpu8", 2e-6 + KV_BYTES / (50e9 * 0.99)), ("gpu1", KV_BYTES / (450e9 * 0.85))],
)
def test_decode_starts_at_prefill_end_plus_the_transfer(decode_gpu, transfer_s):
    records, h, row = _disagg(decode_gpu)
    # TTFT: one prefill iteration of the whole prompt on an idle H100, its roofline
    layer, head = iteration_cost(CARD, [(1000, 0)], [], 1)  # (chunk, tokens before it)
    work = layer * CARD.layers + head
    prefill_s = Machine(FLEET).gpu_seconds("gpu0", work.flops, work.hbm_bytes)
    assert row["ttft_s"] == pytest.approx(prefill_s, rel=1e-12)
    assert h["prefill_end_s"] == pytest.approx(prefill_s, rel=1e-12)
    # the idle decode instance admits it at once and fetches the 63 blocks
    assert h["decode_admit_s"] == h["kv_start_s"] == pytest.approx(prefill_s, rel=1e-12)
    assert h["kv_bytes"] == KV_BYTES
    assert h["kv_end_s"] - h["kv_start_s"] == pytest.approx(transfer_s, rel=1e-9)
    # the decode side starts when the KV is in, and makes the 4 tokens after the first
    d = records["d0"].requests.to_pylist()[0]
    assert d["first_token_s"] == pytest.approx(h["kv_end_s"], rel=1e-12)
    assert d["computed_tokens"] == 0  # nothing prefilled on the decode GPU
    assert row["finish_s"] == d["finish_s"] and row["output_tokens"] == 5
    assert row["tpot_s"] == pytest.approx((d["finish_s"] - row["first_token_s"]) / 4)
    assert h["decode_tpot_s"] == pytest.approx((d["finish_s"] - h["kv_end_s"]) / 4)
    ops = records["d0"].ops.to_pandas()
    kv = ops[ops["tag"] == "kv_transfer"]
    assert list(kv["src"]) == ["gpu0"] and list(kv["dst"]) == [decode_gpu]


def test_the_prefill_is_the_colocated_first_token():
    """The prefill instance computes exactly what a colocated instance does up to the
    first token; only what follows differs."""
    colo, _ = run_routed(FLEET, [_inst("r0", "gpu0")], [_req()], _router(1))
    _, _, row = _disagg("gpu8")
    assert row["ttft_s"] == colo["r0"].requests.to_pylist()[0]["ttft_s"]


def test_a_second_turn_fetches_only_what_the_decode_gpu_lacks():
    """The decode GPU keeps the prompt it received in its prefix cache: a later
    request sharing those blocks fetches only the rest (vLLM's NixlConnector loads
    the prompt beyond the local hits)."""
    first = Request(0, 0.0, 7, 0, 1000, 5, tuple(range(1, 63)))
    second = Request(1, 0.0, 7, 1, 1600, 5, tuple(range(1, 101)))
    records, router = run_disagg(FLEET, [_inst("p0", "gpu0")], [_inst("d0", "gpu8")],
                                 [first, second], _router(1), _router(1))  # fmt: skip
    h = handoffs([records["d0"]], router).set_index("request_id")
    assert h.loc[0, "kv_bytes"] == KV_BYTES
    # 1,600 tokens = 100 blocks, 62 full blocks hit (the 63rd was partial): 38 fetched
    assert h.loc[1, "kv_bytes"] == 38 * B * 131_072


def test_instances_are_placed_node_by_node():
    assert place(FLEET, 16) == [f"gpu{k}" for k in range(16)]
    # tp 4: two instances a node, each on four GPUs of one node
    assert place(FLEET, 4, tp=4) == ["gpu0", "gpu4", "gpu8", "gpu12"]
    assert place(FLEET, 2, tp=8) == ["gpu0", "gpu8"]


def test_placement_refuses_what_does_not_fit():
    with pytest.raises(ConfigError, match="fewer than 5 instances x tp 4"):
        place(FLEET, 5, tp=4, what="disaggregation")
    with pytest.raises(ConfigError, match="tp: 3 does not divide the 8 GPUs"):
        place(FLEET, 2, tp=3)


def test_disaggregated_instances_fill_node_0_with_prefill_then_decode():
    p = ServingParams(router="prefix", disaggregation={"prefill": 8, "decode": 8})
    specs, others = routed_specs(p, FLEET)
    assert others == []
    assert [s["name"] for s in specs[:2]] == ["p0", "p1"] and specs[8]["name"] == "d0"
    assert {FLEET.fleet.node_of(s["gpu"]) for s in specs[:8]} == {0}
    assert {FLEET.fleet.node_of(s["gpu"]) for s in specs[8:]} == {1}


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"disaggregation": {"prefill": 1, "decode": 1}}, "disaggregation"),
        ({"router": "prefix", "disaggregation": {"prefill": 1}}, "disaggregation.decode"),
        ({"router": "prefix", "disaggregation": {"prefill": 1, "decode": 1, "x": 1}},
         "disaggregation.x"),
        ({"router": "prefix", "replicas": 2, "disaggregation": {"prefill": 1, "decode": 1}},
         "replicas"),
    ],
)  # fmt: skip
def test_serving_params_check_the_disaggregation_fields(fields, key):
    with pytest.raises(ParamError) as err:
        ServingParams(**fields)
    assert key in str(err.value)


def test_decode_router_defaults_to_dynamos_decode_stage():
    from sim.config import disagg_decode_router

    p = ServingParams(router="round_robin", disaggregation={"prefill": 1, "decode": 1})
    assert disagg_decode_router(p) == ("prefix", {"overlap_weight": 0.0})
    q = dataclasses.replace(
        p, disaggregation={"prefill": 1, "decode": 1, "decode_router": "least_kv"}
    )
    assert disagg_decode_router(q) == ("least_kv", {})


def test_the_report_shows_a_disaggregated_run_on_one_machine():
    """No fleet, so no network columns: the fleet table shows them as '-'."""
    import pandas as pd
    from rich.console import Console

    from sim.serving.report import serving_tables

    row = {"design": "gpu-only", "variant": "pd", "router": "prefix", "prefill_instances": 1}
    row.update(decode_instances=1, kv_transfer_mean_s=0.002, kv_transfer_p99_s=0.003)
    for key in ("ttft", "tpot"):
        row.update({f"{key}_{q}_s": 0.01 for q in ("mean", "p50", "p90", "p99")})
    zero = ["throughput_tok_s", "queue_mean_s", "blocked_io_s", "duration_s", "ssd_util"]
    zero += [f"hit_rate_{t}" for t in ("gpu", "cpu", "ssd", "pool")]
    row.update(dict.fromkeys(zero, 0.0))
    tables = serving_tables(pd.DataFrame([row]), "t")
    assert [t.title for t in tables][-1] == "t: fleet"
    console = Console(width=400, record=True)
    console.print(tables[-1])
    text = console.export_text()
    assert "1P+1D" in text and "2.0" in text and "3.0" in text  # the KV transfer, ms


def test_a_disaggregated_variant_on_two_nodes_sends_every_prompt_over_the_network():
    """8 prefill instances fill node 0 and 8 decode ones node 1, so every KV
    transfer crosses the NICs: the bytes the NIC ports measured (device records)
    equal the bytes of the transfer ops, and every request is served once."""
    from sim.scenarios.serving import prepare

    p = ServingParams(model="Llama-3.1-8B", sessions=6, turns=2.0, session_rate=4.0,
                      think_s=1.0, prompt_tokens=512, reply_tokens=16, max_context=4096,
                      router="prefix", disaggregation={"prefill": 8, "decode": 8})  # fmt: skip
    drive, summarize = prepare(p, FLEET, 0, "pd")
    records = drive()
    row = summarize(records)
    req = records.requests.to_pandas()
    assert row["requests"] == len(req) == req["request_id"].nunique() > 0
    assert row["prefill_instances"] == row["decode_instances"] == 8
    assert row["kv_transfer_gb"] > 0
    assert row["net_gb"] == pytest.approx(row["kv_transfer_gb"], rel=1e-9)
    assert row["uplink_load_max"] == 0.0  # one leaf: no uplink crossed
    ops = records.ops.to_pandas()
    kv = ops[ops["tag"] == "kv_transfer"]
    assert len(kv) == (req["output_tokens"] > 1).sum()  # one transfer per decoded request
    assert all(FLEET.fleet.node_of(s) == 0 for s in kv["src"])
    assert all(FLEET.fleet.node_of(d) == 1 for d in kv["dst"])


def test_the_prefill_keeps_its_blocks_until_the_decode_side_has_read_them():
    """Two 1,000-token prompts (63 blocks each with their one token) on a prefill GPU
    of 100 blocks: the second waits for room.  The first's blocks are held after
    its prefill until gpu8 has fetched them (2.671 ms later), so the second is
    admitted exactly when that fetch lands, not when the first prefill ends."""
    a = Request(0, 0.0, -1, 0, 1000, 5, tuple(range(1, 63)))
    b = Request(1, 0.0, -1, 0, 1000, 5, tuple(range(101, 163)))
    small = Instance("p0", CARD, get_design("gpu-only", {}), EngineConfig(gpu_blocks=100), [])
    records, router = run_disagg(FLEET, [small], [_inst("d0", "gpu8")], [a, b],
                                 _router(1), _router(1))  # fmt: skip
    h = handoffs([records["d0"]], router).set_index("request_id")
    p = records["p0"].requests.to_pandas().set_index("request_id")
    assert h.loc[0, "kv_end_s"] - h.loc[0, "prefill_end_s"] == pytest.approx(
        2e-6 + KV_BYTES / (50e9 * 0.99), rel=1e-9
    )
    assert p.loc[1, "admit_s"] == h.loc[0, "kv_end_s"] > p.loc[0, "finish_s"]
    # every held block was let go once read
    assert router.source == {}
    assert all(not e.held for e in [*router.engines, *router.decoder.engines])


def test_offload_tiers_serve_the_prefill_instances_and_the_decode_side_keeps_none():
    """paged-cpu under 1P+1D on one machine, a GPU cache of 6,000 tokens (contexts up
    to 4,096): sessions' later turns find their earlier turns' prefix in the prefill
    instance's host tier (the GPU evicted it for the other sessions' prompts), every
    store and load is on the prefill GPU, and the level hits name the instance's tier."""
    from sim.scenarios.serving import prepare

    p = ServingParams(model="Llama-3.1-8B", design="paged-cpu", design_params={"cpu_gib": 4.0},
                      sessions=40, turns=4.0, session_rate=10.0, think_s=1.0, prompt_tokens=1000,
                      reply_tokens=8, max_context=4096, gpu_kv_tokens=6000, block_tokens=16,
                      router="round_robin", disaggregation={"prefill": 1, "decode": 1})  # fmt: skip
    h20 = load_profile("h20-4gpu-nvlink")
    drive, summarize = prepare(p, h20, 0, "pd")
    records = drive()
    row = summarize(records)
    assert row["hit_rate_cpu"] > 0.1  # 25.5% at seed 0 (colocated on one GPU: 24.6%)
    assert row["hit_rate_level_node_local"] == pytest.approx(row["hit_rate_cpu"])
    ops = records.ops.to_pandas()
    stores = ops[ops["tag"] == "store"]
    assert len(stores) > 0 and set(stores["src"]) == {"gpu0"}  # the prefill GPU only
    loads = ops[ops["tag"] == "load"]
    assert len(loads) > 0 and set(loads["dst"]) == {"gpu0"}
    node = dataclasses.replace(p, tier_scope="node")
    with pytest.raises(ConfigError, match="tier_scope: node with disaggregation"):
        prepare(node, h20, 0, "pd")
