"""SwiftCache's master cache sizing (seed 002 §3.2, Eq. 1-5) against hand arithmetic."""

from hypothesis import given
from hypothesis import strategies as st

from sim.models import get_model
from sim.serving.swift.lsc import (
    layer_block_bytes,
    max_context_tokens,
    size_from_blocks,
    size_stream_cache,
)

GIB = 2**30


def test_paper_worked_example():
    # §3.2: L = 10, K_master = 100, K_1 = 9, K_2 = 8 -> N_LSC = 17,
    # RC = floor((100 - 17) / 10) = 8, 25 blocks of context against floor(100 / 10) = 10
    s = size_from_blocks(100, [9, 8], layers=10)
    assert (s.n_lsc, s.n_rc, s.max_blocks, s.baseline_blocks) == (17, 8, 25, 10)
    assert s.local_slots_used == 17 + 80


def test_workers_fill_the_master_no_regular_cache():
    # sum K_i = 25 >= K_master = 20: the LSC takes all 20 slots, no RC (Eq. 4-5)
    s = size_from_blocks(20, [15, 10], layers=10)
    assert (s.n_lsc, s.n_rc, s.max_blocks, s.baseline_blocks) == (20, 0, 20, 2)


def test_lwm_master_from_bytes():
    # LWM: 32 layers, 32 KV heads x 128, fp16; B = 16:
    # Eq. 1: M_block = 2 x 16 x 32 x 128 x 2 = 262,144 B; full-layer block 32 x that = 8 MiB
    lwm = get_model("LWM-Text-1M")
    assert layer_block_bytes(lwm, 16) == 262_144
    s = size_stream_cache(lwm, 40 * GIB, [20 * GIB, 10 * GIB], block_tokens=16)
    # Eq. 2: 20 GiB / 8 MiB = 2560, 10 GiB / 8 MiB = 1280; Eq. 3: 40 GiB / 256 KiB = 163,840
    assert s.k_workers == (2560, 1280) and s.k_master == 163_840
    # Eq. 4: 3840; Eq. 5: (163,840 - 3840) / 32 = 5000
    assert (s.n_lsc, s.n_rc) == (3840, 5000)
    assert s.max_tokens == (3840 + 5000) * 16 == 141_440
    assert s.baseline_tokens == 5120 * 16 == 81_920
    assert max_context_tokens(lwm, 40 * GIB, [20 * GIB, 10 * GIB], 16) == 141_440


@given(
    k_master=st.integers(0, 10_000),
    k_workers=st.lists(st.integers(0, 5_000), max_size=4),
    layers=st.integers(1, 96),
)
def test_never_over_memory_never_below_baseline(k_master, k_workers, layers):
    s = size_from_blocks(k_master, k_workers, layers)
    assert s.local_slots_used <= k_master  # LSC + RC fit in the master's KV memory
    # streaming one layer never holds fewer blocks than keeping every layer local
    assert s.max_blocks >= s.baseline_blocks
    # the leftover after LSC and RC is less than one full-layer block
    assert k_master - s.local_slots_used < layers
