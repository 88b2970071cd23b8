"""Master-worker block-table sync (seed 002 §3.5) as messages."""

import numpy as np
import pytest

from sim.serving.swift.coordinator import (
    CoordinationError,
    Lend,
    MasterBlockTable,
    Reclaim,
    WorkerCoordinator,
)
from sim.serving.swift.elastic import ElasticCache, ElasticParams

WB, MB = 9 * 2**18, 2**22  # Qwen3-8B and Qwen3-32B all-layer blocks (B = 16), bytes


def _pair(total=64):
    cache = ElasticCache(ElasticParams(total, 16, meu_worker=16, meu_master=9, window_s=60.0))
    master = MasterBlockTable()
    master.register("gpu1", total * WB, MB)
    return WorkerCoordinator("gpu1", cache), cache, master


def test_lend_then_reclaim_revokes_the_top_slots():
    w, cache, master = _pair()
    # nothing seen: the worker lends all 4 units = 36 master slots
    (msg,) = w.scale_down(0.0)
    assert msg == Lend("gpu1", 1, 0.0, 64, 36)
    assert master.apply(msg) == range(0, 36)
    # slot 0 is the last master block of the buffer
    assert master.slot_offset("gpu1", 0) == 64 * WB - MB
    # a 500-token request (32 blocks) takes back 2 units = the 18 slots nearest its blocks
    (msg,) = w.on_request(1.0, 500)
    assert msg == Reclaim("gpu1", 2, 1.0, 32, 18)
    assert master.apply(msg) == range(18, 36)
    # the slots left lie behind the worker's 32 own blocks
    assert master.slot_offset("gpu1", 17) == 64 * WB - 18 * MB >= 32 * WB
    with pytest.raises(CoordinationError, match="not lent"):
        master.slot_offset("gpu1", 18)


def test_both_sides_agree_on_lent_bytes_through_a_random_run():
    w, cache, master = _pair(total=160)
    rng = np.random.default_rng(7)
    t = 0.0
    for _ in range(400):
        t += float(rng.exponential(5.0))
        if rng.random() < 0.3:
            msgs = w.scale_down(t)
        else:
            msgs = w.on_request(t, int(rng.integers(1, 3000)))
        for m in msgs:
            master.apply(m)
        lent_worker = (160 - cache.own_blocks) * WB
        assert lent_worker == master.slots("gpu1") * MB
        assert cache.own_blocks >= 0


def test_master_refuses_gaps_and_overdraws():
    master = MasterBlockTable()
    master.register("gpu1", 64 * WB, MB)
    with pytest.raises(CoordinationError, match="message 2 after 0"):
        master.apply(Lend("gpu1", 2, 0.0, 16, 9))
    with pytest.raises(CoordinationError, match="reclaims 9 slots, 0 lent"):
        master.apply(Reclaim("gpu1", 1, 0.0, 16, 9))
    with pytest.raises(CoordinationError, match="unknown worker"):
        master.apply(Lend("gpu2", 1, 0.0, 16, 9))


def test_initial_message_and_withdraw():
    """The worker's first message states what it lends at the start; a withdrawn
    message gives the units back and reuses its sequence number."""
    from sim.serving.swift.coordinator import Lend, MasterBlockTable, WorkerCoordinator
    from sim.serving.swift.elastic import ElasticCache, ElasticParams

    cache = ElasticCache(ElasticParams(100, 16, 4, 3, window_s=5.0, check_interval_s=1.0))
    cache.lent_units = 5
    coord = WorkerCoordinator("gpu1", cache)
    first = coord.initial(0.0)
    assert first == Lend("gpu1", 1, 0.0, 20, 15)  # 5 units x (4 worker, 3 master) blocks
    table = MasterBlockTable()
    table.register("gpu1", 100 * 4096, 4096 * 4 // 3)
    table.apply(first)
    assert table.slots("gpu1") == 15
    # nothing in the window: ScaleDown lends floor((80 - 0) / 4) = 20 more units
    (msg,) = coord.scale_down(10.0)
    assert msg.seq == 2 and msg.worker_blocks == 80 and cache.lent_units == 25
    coord.withdraw(msg)
    assert cache.lent_units == 5
    (again,) = coord.scale_down(11.0)
    assert again.seq == 2  # the withdrawn number is reused: the master saw no gap
