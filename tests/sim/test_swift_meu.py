"""Minimum elastic unit (seed 002 §3.4, Eq. 6-9) of model pairs worked out by hand."""

import pytest

from sim.models import get_model
from sim.serving.swift.meu import block_elems, elastic_unit, model_elastic_unit


def test_block_elems_from_the_model_cards():
    # layers x kv_heads x head_dim x block tokens x 2, B = 16 (catalog: seed 002 Table 2)
    assert block_elems(get_model("Qwen3-32B"), 16) == 64 * 8 * 128 * 16 * 2 == 2**21
    assert block_elems(get_model("Qwen3-8B"), 16) == 36 * 8 * 128 * 16 * 2 == 9 * 2**17
    assert block_elems(get_model("Qwen3-14B"), 16) == 40 * 8 * 128 * 16 * 2 == 5 * 2**18


@pytest.mark.parametrize(
    "worker, lcm_elems, meu_m, meu_w",
    [
        # lcm(2^21, 9 x 2^17) = 9 x 2^21: 9 master blocks = 16 Qwen3-8B blocks
        ("Qwen3-8B", 9 * 2**21, 9, 16),
        # lcm(2^21, 5 x 2^18) = 5 x 2^21: 5 master blocks = 8 Qwen3-14B blocks
        ("Qwen3-14B", 5 * 2**21, 5, 8),
    ],
)
def test_qwen3_32b_master(worker, lcm_elems, meu_m, meu_w):
    u = model_elastic_unit(get_model("Qwen3-32B"), get_model(worker), 16, 16)
    assert (u.meu_master, u.meu_worker) == (meu_m, meu_w)
    assert u.lcm_bytes == lcm_elems * 2  # fp16: the element LCM times 2 bytes
    # the two spans are the same bytes
    assert u.meu_master * u.master_block_bytes == u.meu_worker * u.worker_block_bytes


def test_lwm_master_with_qwen3_8b():
    # LWM block: 32 x 32 x 128 x 16 x 2 = 2^22 elems; lcm(2^22, 9 x 2^17) = 9 x 2^22
    u = model_elastic_unit(get_model("LWM-Text-1M"), get_model("Qwen3-8B"), 16, 16)
    assert (u.meu_master, u.meu_worker) == (9, 32)


def test_common_factor_changes_no_meu():
    # Eq. 6 without the factor 2 of K and V, or in bytes: the same MEUs
    a, b = 64 * 8 * 128 * 16, 36 * 8 * 128 * 16
    for k in (1, 2, 4):
        u = elastic_unit(k * a, k * b)
        assert (u.meu_master, u.meu_worker) == (9, 16)


def test_different_block_sizes():
    # Qwen3-32B with B = 32 (2^22 elems) and Qwen3-8B with B = 16 (9 x 2^17): 9 and 32
    u = model_elastic_unit(get_model("Qwen3-32B"), get_model("Qwen3-8B"), 32, 16)
    assert (u.meu_master, u.meu_worker) == (9, 32)
