"""The raw io_uring ring (real/_rawring.py) and the batched replay rounds on it.

Each read is compared with ``os.pread`` of the same offset (an independent path
to the same bytes); errors are injected where the kernel itself reports them.
"""

from __future__ import annotations

import errno
import mmap
import os

import numpy as np
import pytest

from kvtier.contracts.plan import PlanBuilder
from real import _rawring
from real._iobatch import water_fill
from real.datafile import prepare_targets
from real.errors import RealError
from real.replay import replay

RAW_OK, RAW_WHY = _rawring.available()
needs_raw = pytest.mark.skipif(not RAW_OK, reason=f"raw ring unavailable: {RAW_WHY}")
BLOCK = 4096


def scattered_plan(blocks: np.ndarray, qd: int = 32):
    b = PlanBuilder()
    ext = np.stack([blocks * BLOCK, np.full(len(blocks), BLOCK)], axis=1)
    b.read("ssd0", "dram0", extents=ext, queue_depth=qd)
    return b.table()


@needs_raw
def test_raw_ring_reads_exactly_what_pread_reads(direct_dir):
    """100 random 4 KiB reads, 3 batches through a ring smaller than the batch count
    (the SQ wraps): each buffer equals pread of its offset, tags come back once each."""
    path = direct_dir / "data"
    data = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    path.write_bytes(data.tobytes())
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    plain = os.open(path, os.O_RDONLY)  # pread through the page cache: the reference
    ring = _rawring.RawRing(64)
    arena = mmap.mmap(-1, 40 * BLOCK)
    buf = np.frombuffer(arena, np.uint8).reshape(40, BLOCK)
    try:
        blocks = np.random.default_rng(2).integers(0, 256, 100)
        for lo in range(0, 100, 40):
            part = blocks[lo : lo + 40]
            n = len(part)
            addrs = buf.ctypes.data + np.arange(n, dtype=np.uint64) * BLOCK
            tags = np.arange(lo, lo + n, dtype=np.uint64) + 1
            ring.push(_rawring.OP_READ, 0, fd, part * BLOCK, addrs, BLOCK, tags)
            got_tags, res = [], []
            while sum(map(len, got_tags)) < n:
                ring.enter(1, 5.0)
                t, r = ring.reap()
                got_tags.append(t)
                res.append(r)
            assert sorted(np.concatenate(got_tags).tolist()) == tags.tolist()
            assert (np.concatenate(res) == BLOCK).all()
            for i, blk in enumerate(part.tolist()):
                assert buf[i].tobytes() == os.pread(plain, BLOCK, blk * BLOCK)
    finally:
        del buf
        ring.close()
        os.close(fd)
        os.close(plain)


@needs_raw
def test_raw_ring_reports_the_kernels_error_codes(direct_dir):
    """A bad descriptor gives -EBADF, an unaligned O_DIRECT read -EINVAL, in the CQE."""
    path = direct_dir / "data"
    path.write_bytes(bytes(64 * BLOCK))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    ring = _rawring.RawRing(8)
    arena = mmap.mmap(-1, 2 * BLOCK)
    addr = np.frombuffer(arena, np.uint8).ctypes.data
    try:
        fds, offs = np.array([fd, 10**6]), np.array([1, 0])
        ring.push(_rawring.OP_READ, 0, fds, offs, addr, BLOCK, np.array([1, 2], np.uint64))
        seen: dict[int, int] = {}
        while len(seen) < 2:
            ring.enter(1, 5.0)
            for tag, r in zip(*ring.reap(), strict=True):
                seen[int(tag)] = int(r)
        assert seen == {1: -errno.EINVAL, 2: -errno.EBADF}
    finally:
        ring.close()
        os.close(fd)


def test_water_fill_is_one_at_a_time_round_robin():
    """Handing ``room`` I/Os out one at a time in turn, by hand."""
    assert water_fill([5, 5, 5], 7) == [3, 2, 2]
    assert water_fill([1, 9, 9], 10) == [1, 5, 4]
    assert water_fill([2, 0, 3], 100) == [2, 0, 3]
    assert water_fill([4, 4], 0) == [0, 0]


def slow_round_robin(avail, room):
    take = [0] * len(avail)
    while room and any(t < a for t, a in zip(take, avail, strict=True)):
        for k, a in enumerate(avail):
            if room and take[k] < a:
                take[k] += 1
                room -= 1
    return take


def test_water_fill_equals_the_loop_on_random_cases():
    rng = np.random.default_rng(3)
    for _ in range(300):
        avail = rng.integers(0, 12, rng.integers(1, 8)).tolist()
        room = int(rng.integers(0, 60))
        assert water_fill(avail, room) == slow_round_robin(avail, room)


@needs_raw
@pytest.mark.parametrize("qd", [1, 7, 64])
def test_batched_replay_moves_every_extent_and_verifies(direct_dir, qd):
    """2,000 scattered 4 KiB reads over two ops: I/O and byte counts exact, every read
    verified (a wrong offset would fail verification), ring engine chosen."""
    blocks = np.random.default_rng(4).integers(0, 4096, 2000)
    b = PlanBuilder()
    for part in np.array_split(blocks, 2):
        ext = np.stack([part * BLOCK, np.full(len(part), BLOCK)], axis=1)
        b.read("ssd0", "dram0", extents=ext, queue_depth=qd)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="uring", qd=qd)
    assert "raw io_uring" in rec.stats["engine_note"]
    row = rec.devices.to_pylist()[0]
    assert (row["n_ios"], row["bytes_read"]) == (2000, 2000 * BLOCK)
    assert rec.stats["inflight_peak"]["ssd0"] <= 1.0


@needs_raw
def test_batched_replay_names_the_corrupted_block(direct_dir):
    blocks = np.arange(0, 3000, 3)
    plan = scattered_plan(blocks)
    victim = int(blocks[555])
    with prepare_targets(plan, direct_dir / "t") as files:
        fd = os.open(files.targets["ssd0"].path, os.O_RDWR)
        try:
            os.pwrite(fd, b"\x01", victim * BLOCK + 100)
        finally:
            os.close(fd)
        with pytest.raises(RealError, match=rf"ssd0: data mismatch .* at offset {victim * BLOCK}:"):
            replay(plan, files, engine="uring")


@needs_raw
def test_batched_replay_turns_a_failed_cqe_into_one_clean_error(direct_dir, monkeypatch):
    """The kernel's -EINVAL for the I/O in slot 10 (the raw ring's CQE) names device and
    offset."""
    from real import engine as eng

    prime = eng.RawEngine.prime

    def prime_one_bad(self, dev, fds, spans, addrs, flags):
        addrs = np.array(addrs, dtype=np.uint64)
        addrs[9] += 1  # slot of tag 10: O_DIRECT needs an aligned buffer, the kernel says EINVAL
        return prime(self, dev, fds, spans, addrs, flags)

    monkeypatch.setattr(eng.RawEngine, "prime", prime_one_bad)
    blocks = np.arange(100)
    plan = scattered_plan(blocks)
    with prepare_targets(plan, direct_dir / "t") as files:
        path = files.targets["ssd0"].path
        with pytest.raises(RealError) as err:
            replay(plan, files, engine="uring")
    assert str(err.value).startswith(f"ssd0: Invalid argument (EINVAL) reading 4.00 KiB of {path}")
    assert "\n" not in str(err.value)


def mixed_plan():
    """Two devices; ssd0 is written (16 x 64 KiB) then read back; ssd1 read by two ops
    of which one is capped at queue depth 2 (the general path beside the laid-out one)."""
    b = PlanBuilder()
    w = b.write("dram0", "ssd0", 1 << 20, 16, offset=1 << 20)
    b.read("ssd0", "dram0", 1 << 20, 16, offset=1 << 20, depends_on=[w])
    b.read("ssd1", "dram0", extents=np.stack([np.arange(300) * BLOCK, np.full(300, BLOCK)], 1))
    b.read("ssd1", "dram0", 256 * 1024, 8, queue_depth=2)
    return b.table()


@needs_raw
@pytest.mark.parametrize("register", [True, False])
def test_registered_or_not_the_same_exact_replay(direct_dir, monkeypatch, register):
    """With registered files and buffers (READ_FIXED/WRITE_FIXED) and with the kernel
    refusing them (plain SQEs): bytes and I/Os per device as the plan states, every read
    verified -- the written blocks are read back and checked."""
    from real import _rawring as rr

    if not register:

        def refuse(self, *args):
            raise OSError(errno.ENOMEM, "refused")

        monkeypatch.setattr(rr.RawRing, "register_buffers", refuse)
        monkeypatch.setattr(rr.RawRing, "register_files", refuse)
    plan = mixed_plan()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="uring", qd=8)
    rows = {r["device"]: r for r in rec.devices.to_pylist()}
    assert (rows["ssd0"]["bytes_written"], rows["ssd0"]["bytes_read"]) == (1 << 20, 1 << 20)
    assert rows["ssd0"]["n_ios"] == 32
    assert rows["ssd1"]["bytes_read"] == 300 * BLOCK + (1 << 18)
    assert rows["ssd1"]["n_ios"] == 308


def round_check_fixture(n_slots=16):
    """A device of 4 KiB slots; slot s holds block 100 + 7 s, as slot_off says."""
    from types import SimpleNamespace

    from real._blocks import BlockFormat

    fmt = BlockFormat("ssd0", 0)
    arena = np.zeros((n_slots, BLOCK // 8), np.uint64)
    slots = [memoryview(arena[s]).cast("B") for s in range(n_slots)]
    offs = (100 + 7 * np.arange(n_slots)) * BLOCK
    for s in range(n_slots):
        fmt.render(int(offs[s]) // BLOCK, slots[s])
    d = SimpleNamespace(fmt=fmt, arena=arena, slots=slots, name="ssd0")
    d.target = SimpleNamespace(path="/x")
    return SimpleNamespace(slot_off=offs.astype(np.uint64)), d, offs


@pytest.mark.parametrize("g", [[3, 5, 6, 8], [5, 6, 7], [0, 6, 15]])
def test_round_check_counts_only_the_reaped_rows(g):
    """Rows in the checked range that were not reaped hold garbage (an I/O in flight):
    no error; a reaped row corrupted: the error names its block's offset -- whether
    the range is one run, has holes, or is sparse (gathered)."""
    from real._iobatch import BatchIO

    io, d, offs = round_check_fixture()
    for s in range(16):
        if s not in g:
            d.arena[s] = 0xDEAD  # not reaped: anything
    BatchIO._check_round(io, d, np.array(g))
    d.arena[6, 100] ^= 1
    with pytest.raises(RealError, match=rf"ssd0: data mismatch in /x at offset {offs[6]}:"):
        BatchIO._check_round(io, d, np.array(g))
