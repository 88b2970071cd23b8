"""One elastic region per worker (seed 002 §3.1, §3.4): the peer tier holds
what a worker lends less what the master's running batch streams from it
(``sim/serving/execute/streaming.py`` ``PeerRegion``), and the scenario's
``lsc: shared`` master sizes its LSC from the lent region (Eq. 2)."""

from __future__ import annotations

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.serving import engine_config, trace_tables
from sim.scenarios.serving_instances import make_instances
from sim.serving.execute.multi import build_instances
from sim.serving.execute.streaming import PeerRegion
from sim.serving.requests import KeySpace
from sim.serving.tiers.blocks import OffloadTier


def _tier() -> OffloadTier:
    # one worker GPU, blocks of 2 layers x 100 B = 200 B, room for 10 of them
    tier = OffloadTier("peer", ["gpu1"], [1.0], [2_000], 2, 100)
    tier.complete_all(tier.place(list(range(10)), None))
    return tier


def test_streamed_bytes_leave_the_tier_and_drop_its_lru_blocks():
    tier = _tier()
    region = PeerRegion(tier)
    assert (tier.used[0], len(tier.entries)) == (2_000, 10)
    # the batch streams 600 B from gpu1: the tier keeps 1,400 B, its 3 oldest blocks go
    region.set_streamed({"gpu1": 600})
    assert tier.capacity[0] == 1_400
    assert sorted(tier.entries) == list(range(3, 10)) and tier.used[0] == 1_400
    # the worker reclaims down to 1,000 B lent: 400 B are left beside the stream
    region.set_lent("gpu1", 1_000)
    assert tier.capacity[0] == 400 and sorted(tier.entries) == [8, 9]
    # the stream ends: the tier gets the whole lent region back, and drops nothing
    region.set_streamed({})
    assert tier.capacity[0] == 1_000 and sorted(tier.entries) == [8, 9]


def test_a_stream_larger_than_the_region_leaves_the_tier_nothing():
    tier = _tier()
    region = PeerRegion(tier)
    region.set_streamed({"gpu1": 5_000})
    assert tier.capacity[0] == 0 and tier.used[0] == 0 and not tier.entries


def test_shared_master_sizes_its_lsc_from_the_lent_region():
    """By hand: the master Qwen3-32B (64 layers, a full-layer block of 16 tokens
    4 MiB) beside LWM-Text-1M and Qwen3-14B workers lending half of their KV
    blocks (lend_share 0.5, no stream area).  MEUs (Eq. 6-9): with LWM,
    BE_m = 64 x 16 x 8 x 128 = 2^20 and BE_w = 32 x 16 x 32 x 128 = 2^21, so
    2 master blocks per LWM block; LWM lends floor(0.5 x 9,452) = 4,726 blocks
    = 9,452 master blocks.  With Qwen3-14B, BE_w = 40 x 16 x 8 x 128 = 655,360
    = 2^17 x 5 and lcm = 2^20 x 5: 5 master blocks per 8 worker blocks; it
    lends floor(0.5 x 24,097) = 12,048 blocks = 1,506 units = 7,530 master
    blocks.  Eq. 2: K = 9,452 + 7,530 = 16,982 = N_LSC (Eq. 4); Eq. 5: N_RC =
    floor((6,478 x 64 - 16,982) / 64) = floor(6,212.66) = 6,212."""
    cfg = load_scenario("swiftcache")
    p = cfg.workload
    prof = load_profile("h20-4gpu-nvlink")
    space = KeySpace()  # one run's key space
    insts = [b(space) for b in make_instances(p, prof, cfg.seed, engine_config, trace_tables)]
    master = insts[0]
    assert master.lsc and master.lsc_shared
    assert all(w.stream_bytes == 0 for w in insts[1:])
    e = build_instances(prof, insts)[0]
    assert (e.stream.n_lsc, e.stream.n_rc) == (9_452 + 7_530, 6_212)
    assert e.mgr.gpu.capacity == 6_212 + 16_982
    assert isinstance(e.stream.region, PeerRegion)
    peer = [t for t in e.mgr.tiers if t.name == "peer"][0]
    # the peer tier holds the whole lent region until a batch streams from it
    assert peer.capacity == [9_452 * 4 * 2**20, 7_530 * 4 * 2**20]
