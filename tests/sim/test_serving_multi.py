"""Several serving instances on one machine (sim/serving/execute/multi.py): the shared
host link split between two engines, NVLink as the master's KV tier, dispatch."""

import pyarrow as pa
import pytest

from hwprofiles import load_profile
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance, build_instances, run_instances, split_by_model
from sim.serving.requests import KeySpace, load_requests, request_table
from sim.serving.swift.links import reload_seconds

PROFILE = load_profile("h20-4gpu-nvlink")
CARD = get_model("Qwen3-8B")
PCIE = 31.5e9 * 0.88  # a GPU's own PCIe 4.0 x16 link x efficiency: a lone host load's rate
HOST = 32e9 * 0.88  # sw0.up, the host link all four GPUs share
NVLINK = 200e9 * 0.85  # per direction x efficiency
# Qwen3-8B: 36 layers x 8 KV heads x 128 x (K, V) x 2 B = 147456 B per token.  A 4096-token
# prompt seen before hits 255 of its 256 blocks (the last token is always computed).
PER_TOKEN = 36 * 8 * 128 * 2 * 2
HIT_BYTES = 255 * 16 * PER_TOKEN  # 601.6 MB


def _rows(tokens: int = 4096):
    warm = {"request_id": 1, "arrival_s": 0.0, "session_id": 0, "turn": 0,
            "input_tokens": tokens, "output_tokens": 1}  # fmt: skip
    query = {**warm, "request_id": 0, "turn": 1}
    space = KeySpace()  # one run: the query and its history in one key space
    return [load_requests(request_table([r], 16), 16, space=space) for r in (query, warm)]


def _instance(name, gpu, design, role="solo", lend=0.0):
    reqs, warm = _rows()
    cfg = EngineConfig(gpu_blocks=1000, gpu=gpu)
    return Instance(name, CARD, design, cfg, reqs, warm, role=role, lend_bytes=lend)


def _ttft(records) -> float:
    return float(records.requests.column("ttft_s")[0].as_py())


def _compute_s(records) -> float:
    ops = records.ops.to_pandas()
    c = ops[ops["kind"] == "compute"]
    return float((c["end_s"] - c["start_s"]).sum())


CPU = get_design("gpu-only", {"cpu_gib": 8.0})


def test_per_token_bytes_by_hand():
    assert CARD.kv_bytes_per_token == PER_TOKEN


def test_one_instance_is_the_single_engine():
    reqs, warm = _rows()
    cfg = EngineConfig(gpu_blocks=1000, gpu="gpu0")
    alone = build_engine(PROFILE, CARD, CPU, cfg, reqs, warm).run()
    multi = run_instances(PROFILE, [_instance("a", "gpu0", CPU)])["a"]
    assert _ttft(multi) == _ttft(alone)
    assert multi.ops.num_rows == alone.ops.num_rows


def test_two_instances_share_the_host_link_end_to_end():
    one = run_instances(PROFILE, [_instance("a", "gpu0", CPU)])["a"]
    two = run_instances(PROFILE, [_instance("a", "gpu0", CPU), _instance("b", "gpu2", CPU)])
    # alone: the hit loads at the GPU's own link, then the last token's compute
    load_one = HIT_BYTES / PCIE  # 21.70 ms
    assert _ttft(one) == pytest.approx(load_one + _compute_s(one), rel=1e-9)
    # together: both loads cross sw0.up at once, each at half of it (14.08 GB/s, 42.73 ms)
    load_two = HIT_BYTES / (HOST / 2)
    for name in ("a", "b"):
        rec = two[name]
        assert _compute_s(rec) == pytest.approx(_compute_s(one), rel=1e-12)  # own GPUs
        assert _ttft(rec) == pytest.approx(load_two + _compute_s(rec), rel=1e-9)
        assert _ttft(rec) - _ttft(one) == pytest.approx(load_two - load_one, rel=1e-9)


def test_borrowed_blocks_reload_over_nvlink():
    # the master's prefix sits in blocks borrowed on gpu1 (preload fills the top tier)
    gpu_only = get_design("gpu-only")
    lend = 2 * HIT_BYTES
    master = _instance("m", "gpu0", gpu_only, role="master")
    worker = _instance("w", "gpu1", gpu_only, role="worker", lend=lend)
    worker.requests, worker.preload = [], []
    nvl = run_instances(PROFILE, [master, worker])["m"]
    ops = nvl.ops.to_pandas()
    copies = ops[ops["kind"] == "copy"]
    assert set(copies["src"]) == {"gpu1"} and set(copies["dst"]) == {"gpu0"}
    assert copies["bytes"].sum() == HIT_BYTES
    pcie = run_instances(PROFILE, [_instance("a", "gpu0", CPU)])["a"]
    t_nvl = _ttft(nvl) - _compute_s(nvl)
    t_pcie = _ttft(pcie) - _compute_s(pcie)
    # links.py's arithmetic from the profile alone: 3.54 ms vs 21.70 ms
    assert t_nvl == pytest.approx(reload_seconds(PROFILE, HIT_BYTES, "gpu1", "gpu0"), rel=1e-9)
    assert t_nvl == pytest.approx(HIT_BYTES / NVLINK, rel=1e-9)
    assert t_pcie == pytest.approx(reload_seconds(PROFILE, HIT_BYTES, "dram0", "gpu0"), rel=1e-9)
    assert t_pcie / t_nvl == pytest.approx(NVLINK / PCIE)


def test_two_lenders_are_bound_by_the_masters_own_nvlink_port():
    # layers split evenly over gpu1 and gpu2; both streams enter gpu0.nvlink, which
    # carries 170 GB/s in all: the reload takes as long as from one lender
    gpu_only = get_design("gpu-only")
    master = _instance("m", "gpu0", gpu_only, role="master")
    workers = [
        _instance(f"w{i}", f"gpu{i}", gpu_only, role="worker", lend=HIT_BYTES) for i in (1, 2)
    ]
    for w in workers:
        w.requests, w.preload = [], []
    rec = run_instances(PROFILE, [master, *workers])["m"]
    ops = rec.ops.to_pandas()
    copies = ops[ops["kind"] == "copy"]
    by_src = copies.groupby("src")["bytes"].sum().to_dict()
    assert by_src == {"gpu1": HIT_BYTES // 2, "gpu2": HIT_BYTES // 2}  # 36 layers: 18 + 18
    assert _ttft(rec) - _compute_s(rec) == pytest.approx(HIT_BYTES / NVLINK, rel=1e-9)


def test_instances_are_checked():
    with pytest.raises(ValueError, match="both on gpu0"):
        build_instances(PROFILE, [_instance("a", "gpu0", CPU), _instance("b", "gpu0", CPU)])
    with pytest.raises(ValueError, match="two instances named"):
        build_instances(PROFILE, [_instance("a", "gpu0", CPU), _instance("a", "gpu1", CPU)])


def test_split_by_model():
    rows = [{"request_id": i, "arrival_s": float(i), "session_id": -1, "turn": 0,
             "input_tokens": 10 + i, "output_tokens": 1} for i in range(5)]  # fmt: skip
    table = request_table(rows, 16)
    table = table.append_column("model", pa.array(["A", "B", "A", "A", "B"]))
    parts = split_by_model(table, ["A", "B"])
    assert parts["A"].column("request_id").to_pylist() == [0, 2, 3]
    assert parts["B"].column("request_id").to_pylist() == [1, 4]
    assert "model" not in parts["A"].schema.names
    assert parts["A"].schema.metadata == table.schema.metadata
    with pytest.raises(ValueError, match=r"\['B'\]"):
        split_by_model(table, ["A"])
