"""The worker's elastic cache (seed 002 §3.4): resize traffic per layout, Algorithm 1."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwprofiles import load_profile
from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate
from sim.serving.swift.elastic import (
    ElasticCache,
    ElasticParams,
    Resize,
    add_resize_ops,
    copied_bytes,
    resize_copies,
    scale_down,
    scale_up,
)


# ---- what a resize moves ---------------------------------------------------------
def test_block_major_resize_moves_nothing():
    for n_new in (3, 5, 40):
        assert resize_copies("block-major", 64, 4, n_new, 2**20) == []


def test_layer_major_figure_5():
    # Fig. 5: 3 layers of 4 blocks.  Growing by one block: layers 2 and 3 shift their
    # 4 blocks (8 blocks); shrinking by one: they shift their 3 surviving blocks (6).
    up = resize_copies("layer-major", 3, 4, 5, 100)
    assert [(c.layer, c.src_offset, c.dst_offset, c.nbytes) for c in up] == [
        (2, 800, 1000, 400),
        (1, 400, 500, 400),
    ]
    down = resize_copies("layer-major", 3, 4, 3, 100)
    assert [(c.layer, c.src_offset, c.dst_offset, c.nbytes) for c in down] == [
        (1, 400, 300, 300),
        (2, 800, 600, 300),
    ]
    assert copied_bytes(up) == 8 * 100 and copied_bytes(down) == 6 * 100


def test_layer_major_qwen3_8b_lending_one_unit():
    # Qwen3-8B worker (36 layers, one layer-block of 16 tokens = 2 x 16 x 8 x 128 x 2 =
    # 65,536 B) lends one MEU (16 blocks) out of 4096: 35 layers x 4080 blocks move
    copies = resize_copies("layer-major", 36, 4096, 4080, 65_536)
    assert len(copies) == 35
    assert all(c.nbytes == 4080 * 65_536 for c in copies)
    assert copied_bytes(copies) == 35 * 4080 * 65_536


@given(layers=st.integers(1, 6), n_old=st.integers(0, 7), n_new=st.integers(0, 7))
def test_layer_major_copies_realise_the_resize(layers, n_old, n_new):
    # run the copies as memmoves on a buffer of block ids: every surviving block ends
    # where the new layer-major layout puts it
    buf = np.full(layers * max(n_old, n_new), -1)
    buf[: layers * n_old] = [ly * 100 + j for ly in range(layers) for j in range(n_old)]
    for c in resize_copies("layer-major", layers, n_old, n_new, 1):
        buf[c.dst_offset : c.dst_offset + c.nbytes] = buf[c.src_offset : c.src_offset + c.nbytes]
    keep = min(n_old, n_new)
    for ly in range(layers):
        assert buf[ly * n_new : ly * n_new + keep].tolist() == [ly * 100 + j for j in range(keep)]


# ---- Algorithm 1 -------------------------------------------------------------------
def test_algorithm_1_functions():
    # ScaleUp: need ceil(1000 / 16) = 63 > 32: diff 31, k = ceil(31 / 16) = 2
    assert scale_up(32, 16, 16, 9, 1000) == (32, 18)
    assert scale_up(63, 16, 16, 9, 1000) == (0, 0)
    # ScaleDown: max_need ceil(300 / 16) = 19 < 64: diff 45, k = floor(45 / 16) = 2
    assert scale_down(64, 16, 16, 9, 300) == (32, 18)
    assert scale_down(64, 16, 16, 9, 1009) == (0, 0)  # 64 blocks needed


def test_hand_trace():
    # a Qwen3-8B worker of 64 blocks (B = 16) lending to a Qwen3-32B master
    # (MEU 16 worker = 9 master blocks), window 60 s
    c = ElasticCache(ElasticParams(64, 16, meu_worker=16, meu_master=9, window_s=60.0))
    assert c.on_request(0.0, 300) is None  # 19 blocks <= 64
    # window [-50, 10]: max 300 tokens = 19 blocks; (64 - 19) // 16 = 2 units lent
    assert c.scale_down(10.0) == Resize(10.0, -32, 18)
    assert (c.own_blocks, c.lent_master_blocks) == (32, 18)
    # 1000 tokens = 63 blocks > 32: ceil(31 / 16) = 2 units reclaimed
    assert c.on_request(20.0, 1000) == Resize(20.0, 32, -18)
    assert c.on_request(30.0, 100) is None
    # window [15, 75] still holds the 1000-token request: 64 - 63 < 16, nothing
    assert c.scale_down(75.0) is None
    # window [25, 85]: only 100 tokens = 7 blocks; (64 - 7) // 16 = 3 units
    assert c.scale_down(85.0) == Resize(85.0, -48, 27)
    # window [40, 100] empty: the last 16 blocks go too
    assert c.scale_down(100.0) == Resize(100.0, -16, 9)
    assert (c.own_blocks, c.lent_units, c.lent_master_blocks) == (0, 4, 36)
    # 2000 tokens = 125 blocks: ceil(125 / 16) = 8 units wanted, only 4 lent
    assert c.on_request(110.0, 2000) == Resize(110.0, 64, -36)
    assert (c.own_blocks, c.lent_units) == (64, 0)


def test_clock_must_not_go_back():
    c = ElasticCache(ElasticParams(64, 16, 16, 9))
    c.on_request(5.0, 10)
    with pytest.raises(ValueError, match="backwards"):
        c.scale_down(4.0)


# ---- a layer-major resize as HBM traffic on the simulated worker -----------------------
def test_layer_major_resize_slows_the_worker_block_major_does_not():
    profile = load_profile("h20-4gpu-nvlink")
    hbm = 4000e9 * 0.90  # H20 HBM3 x efficiency
    kernel_bytes = 1e9  # a worker decode step reading 1 GB: 0.278 ms alone
    ends = {}
    for layout in ("block-major", "layer-major"):
        b = PlanBuilder()
        k = b.compute("gpu1", 0.0, kernel_bytes, tag="decode")
        # Qwen3-8B lends one MEU: 35 copies of 4080 x 64 KiB, 9.36 GB moved, 18.7 GB of HBM
        add_resize_ops(b, "gpu1", resize_copies(layout, 36, 4096, 4080, 65_536))
        ops = simulate(b.table(), profile).ops.to_pandas().set_index("op_id")
        ends[layout] = ops.loc[k, "end_s"]
        resize = ops[ops["tag"] == "kv_resize"]
        if layout == "layer-major":
            # the resize's HBM time: 2 x bytes / HBM bandwidth, plus the kernel's share
            assert resize["end_s"].max() == pytest.approx(
                (2 * 35 * 4080 * 65_536 + kernel_bytes) / hbm
            )
    assert ends["block-major"] == pytest.approx(kernel_bytes / hbm)
    # the resize outlasts the kernel, which gets half the GPU all along: twice as long
    assert ends["layer-major"] == pytest.approx(2 * kernel_bytes / hbm)
