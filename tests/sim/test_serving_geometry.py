"""Where serving designs put KV on their devices: slots, extents, and the issued plan.

Two independent views are compared: the tier's allocator (which slot each
entry holds) and the plan rows the engine wrote (which ranges its ops touch);
then the plan is replayed on the real backend, which must read back and
verify exactly the bytes and I/Os the plan's extents name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hwprofiles import load_profile
from kvtier.contracts.plan import io_extents, validate_plan
from kvtier.contracts.plan import split_extents as split_ios
from sim.models import get_model
from sim.serving.build import build_engine
from sim.serving.designs import get_design
from sim.serving.execute.engine import Engine, EngineConfig
from sim.serving.requests import load_requests, request_table
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.layout import SlotAllocator, layer_stride

B = 16
KiB, MiB = 1024, 1024 * 1024
PROFILE = load_profile("h100-2dimm-2ssd")
LLAMA = get_model("Llama-3.1-8B")  # 32 layers, 4 KiB of K and V per token and layer


def row(rid: int, t: float, tokens: int, hashes: list[int], out: int = 1) -> dict:
    return {
        "request_id": rid,
        "arrival_s": t,
        "session_id": -1,
        "turn": 0,
        "input_tokens": tokens,
        "output_tokens": out,
        "block_hashes": hashes,
    }


def engine(rows, design: str, params: dict, profile=PROFILE) -> Engine:
    reqs = load_requests(request_table(rows, B), B)
    cfg = EngineConfig(gpu_blocks=4096, block_tokens=B, prefix_cache=False)
    return build_engine(profile, LLAMA, get_design(design, params), cfg, reqs)


def ios_of(plan, kind: str, tag: str, ssd: str) -> list[tuple[int, int]]:
    """(offset, length) of every I/O of the plan's ``kind`` ops on ``ssd`` tagged ``tag``."""
    df = plan.to_pandas()
    end = "src" if kind == "read" else "dst"
    ids = df.index[(df["kind"] == kind) & (df["tag"] == tag) & (df[end] == ssd)].to_numpy()
    io = io_extents(plan, ids)
    return list(zip(io.offset.tolist(), io.length.tolist(), strict=True))


# ---- the allocator and the I/O split, by hand -------------------------------------------
def test_slots_are_handed_out_in_order_and_freed_ones_reused() -> None:
    a = SlotAllocator(256 * KiB)
    assert [a.alloc(32), a.alloc(32)] == [0, 8 * MiB]  # 32 layers of 256 KiB each
    assert a.alloc(3) == 16 * MiB  # another size class: a fresh slot at the end
    a.free(0, 32)
    assert a.alloc(32) == 0  # the freed slot of that class, not the end
    assert a.alloc(32) == 16 * MiB + 768 * KiB
    assert (a.end, a.live) == (24 * MiB + 768 * KiB, 4)
    assert layer_stride(64 * KiB) == 64 * KiB and layer_stride(6000) == 8 * KiB


def test_each_layer_is_split_into_ios_of_the_design_size() -> None:
    ranges = np.array([[0, 300 * KiB], [1 * MiB, 128 * KiB]])
    ios = split_ios(ranges, 128 * KiB)  # 300 KiB = 128 + 128 + 44; an I/O never crosses ranges
    assert ios.tolist() == [
        [0, 128 * KiB],
        [128 * KiB, 128 * KiB],
        [256 * KiB, 44 * KiB],
        [MiB, 128 * KiB],
    ]
    same = split_ios(np.array([[0, 300 * KiB], [MiB, 300 * KiB]]), 128 * KiB)
    assert same[:, 0].tolist() == [0, 128 * KiB, 256 * KiB, MiB, MiB + 128 * KiB, MiB + 256 * KiB]
    assert same[:, 1].tolist() == [128 * KiB, 128 * KiB, 44 * KiB] * 2


# ---- a tier's entries never overlap; evicted slots are reused ------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=120), st.integers(1, 3))
def test_live_entries_never_overlap_on_any_device(keys: list[int], devices: int) -> None:
    ratios = [0.5, 0.3, 0.2][:devices]
    ratios = [p / sum(ratios) for p in ratios]
    lb = 12 * KiB  # one layer of one offload block
    cap = 9 * 8 * lb  # room for 9 whole blocks per device
    t = OffloadTier("pool", [f"d{i}" for i in range(devices)], ratios, [cap] * devices, 8, lb)
    for k in keys:
        if k in t.entries:
            t.touch(k)
        for e in t.place([k], None):
            t.complete(e)
        for d in range(devices):
            spans = sorted(
                (slot, slot + (l1 - l0) * lb)
                for e in t.entries.values()
                for (dev, l0, l1), slot in zip(e.runs, e.slots, strict=True)
                if dev == d
            )
            assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:], strict=False))
            assert t.allocators[d].live == len(spans)
    if devices == 1:  # one size class: freed slots are reused, the footprint is the capacity
        assert t.allocators[0].end <= cap


def test_an_evicted_entrys_slot_goes_to_the_next_entry() -> None:
    t = OffloadTier("ssd", ["ssd0"], [1.0], [2 * 4 * 8192.0], 4, 8192.0)
    for k in (1, 2):
        t.complete(t.place([k], None)[0])
    assert [t.entries[k].slots for k in (1, 2)] == [(0,), (4 * 8192,)]
    (e3,) = t.place([3], None)  # LRU 1 is evicted
    assert set(t.entries) == {2, 3} and e3.slots == (0,)


def test_lmcache_keeps_kv_in_256_token_chunks_whatever_the_gpu_block() -> None:
    # 600 tokens: 37 full 16-token blocks, so 2 full 256-token chunks (blocks 0-15, 16-31)
    # and a partial one, not stored (a later turn could never hit it)
    hashes = list(range(1, 38))
    assert get_design("lmcache").offload_factor(B) == 256 // B == 16
    assert get_design("pool").offload_factor(256) == 1
    assert get_design("paged-ssd").offload_factor(B) == 4  # seed 001: 4 GPU blocks
    eng = engine([row(0, 0.0, 600, hashes)], "lmcache", {"cpu_gib": 1.0, "ssd_gib": 1.0})
    rec = eng.run()
    cpu, ssd = eng.mgr.tiers
    space = eng.seqs[0].req.space  # the tiers key the hashes' dense ids
    last = [int(space.intern(np.array([h]))[0]) for h in (hashes[15], hashes[31])]
    assert set(cpu.entries) == set(ssd.entries) == set(last)  # each chunk's last
    chunk = 256 * 32 * 4 * KiB  # 256 tokens x 32 layers x 4 KiB: 32 MiB an object
    assert [sum(cpu.entries[k].nbytes) for k in last] == [chunk, chunk]
    plan = rec.plan.to_pandas()
    written = plan.loc[(plan["kind"] == "write") & (plan["tag"] == "store"), "bytes"].sum()
    assert written == 2 * chunk  # written through to the SSD, chunk by chunk
    # the same two objects when the GPU block is the chunk itself
    hashes256 = [hashes[15], hashes[31]]
    reqs = load_requests(request_table([row(0, 0.0, 600, hashes256)], 256), 256)
    cfg = EngineConfig(gpu_blocks=256, block_tokens=256, prefix_cache=False)
    design = get_design("lmcache", {"cpu_gib": 1.0, "ssd_gib": 1.0})
    big = build_engine(PROFILE, LLAMA, design, cfg, reqs)
    big.run()
    by_hash = lambda tier, sp: {sp.hashes[k]: sum(e.nbytes) for k, e in tier.entries.items()}  # noqa: E731
    assert by_hash(big.mgr.tiers[0], reqs[0].space) == by_hash(cpu, space)


# ---- the issued plan: stores write, loads read back the same ranges -------------------------
def test_a_load_reads_exactly_the_ranges_its_store_wrote() -> None:
    first = list(range(1, 13))  # 12 blocks = 3 offload blocks of 4
    second = first[:8] + [100 + i for i in range(4)]  # shares the first 2 offload blocks
    eng = engine([row(0, 0.0, 192, first), row(1, 1.0, 192, second)], "paged-ssd", {})
    rec = eng.run()
    ssd = eng.mgr.tiers[0]
    assert ssd.devices == ("ssd0",)
    # allocator view: one slot of 32 layers x 256 KiB per entry, in order of store
    h0, h1 = (s.req.hashes for s in eng.seqs)
    keys = [h0[3], h0[7], h0[11], h1[11]]  # the last block of each offload block stored
    assert [ssd.entries[k].slots for k in keys] == [(0,), (8 * MiB,), (16 * MiB,), (24 * MiB,)]

    def by_hand(slot: int) -> list[tuple[int, int]]:
        # GDS path: 128 KiB I/Os, two per 256 KiB layer, layers back to back
        return [
            (slot + layer * 256 * KiB + h * 128 * KiB, 128 * KiB)
            for layer in range(32)
            for h in (0, 1)
        ]

    writes = ios_of(rec.plan, "write", "store", "ssd0")
    reads = ios_of(rec.plan, "read", "load", "ssd0")
    stored = [by_hand(slot * 8 * MiB) for slot in range(4)]
    assert sorted(writes) == sorted(stored[0] + stored[1] + stored[2] + stored[3])
    assert sorted(reads) == sorted(stored[0] + stored[1])
    assert set(reads) <= set(writes)
    assert rec.requests.to_pandas().set_index("request_id").loc[1, "hit_blocks_ssd"] == 8


def test_ssd_ops_count_ios_per_layer_as_the_simulator_does() -> None:
    # LMCache on the kernel filesystem with 4 KiB I/Os: a 64 KiB layer (16 tokens) is 16
    rows = [row(0, 0.0, 512, list(range(1, 33))), row(1, 0.5, 512, list(range(1, 33)))]
    # LMCache with chunk_size 16 (one object per GPU block: the arithmetic below)
    one = {"cpu_gib": 1.0, "ssd_gib": 1.0, "chunk_tokens": B}
    rec = engine(rows, "lmcache", {**one, "io_kib": 4}).run()
    plan = rec.plan.to_pandas()
    io = plan[plan["kind"].isin(["read", "write"])]
    assert len(io) and (io["n_ios"] == io["bytes"] // (64 * KiB) * 16).all()
    lengths = io_extents(rec.plan).length
    assert (lengths == 4 * KiB).all()
    assert plan.loc[plan["kind"] == "copy", "extents"].map(len).eq(0).all()  # DRAM: none
    # by default 128 KiB readahead I/Os, capped by one range: one I/O per 64 KiB layer
    rec = engine(rows, "lmcache", one).run()
    io = rec.plan.to_pandas().query("kind in ['read', 'write']")
    assert len(io) and (io["n_ios"] == io["bytes"] // (64 * KiB)).all()
    assert (io_extents(rec.plan).length == 64 * KiB).all()


# ---- validation and real replay ------------------------------------------------------------
def test_the_issued_plan_validates_and_replays_for_real(direct_dir: Path) -> None:
    from real.datafile import prepare_targets
    from real.replay import replay

    # the unified pool: DRAM modules and both SSDs in one tier, layer ranges per device
    first = list(range(1, 17))
    rows = [row(0, 0.0, 256, first), row(1, 0.5, 256, first[:12] + [90, 91, 92, 93])]
    # chunk_size 16: 16 objects a request, spread over the pool's devices
    rec = engine(rows, "pool", {"cpu_gib": 1.0, "ssd_gib": 1.0, "chunk_tokens": B}).run()
    plan = rec.plan
    p = PROFILE
    validate_plan(plan, p.node_names, p.ssd_names, p.gpu_names)
    io = io_extents(plan)
    df = plan.to_pandas()
    kind = df["kind"].to_numpy()[io.op]
    dev = np.where(kind == "read", df["src"].to_numpy()[io.op], df["dst"].to_numpy()[io.op])
    assert {"ssd0", "ssd1"} <= set(dev)  # both pool SSDs are written and read
    with prepare_targets(plan, direct_dir / "t", seed=3) as files:
        real = replay(plan, files, engine="threads")
    got = {r["device"]: r for r in real.devices.to_pylist()}
    for ssd in ("ssd0", "ssd1"):
        on = dev == ssd
        read, written = on & (kind == "read"), on & (kind == "write")
        assert got[ssd]["bytes_read"] == io.length[read].sum() > 0
        assert got[ssd]["bytes_written"] == io.length[written].sum() > 0
        assert got[ssd]["n_ios"] == on.sum()
