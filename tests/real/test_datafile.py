"""Data files of the replayer: block format, plan footprint, preparation and refusals."""

from __future__ import annotations

import mmap
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from kvtier.contracts.plan import PlanBuilder
from real._blocks import BLOCK, BlockFormat
from real.datafile import (
    _magic_signature,
    block_signature,
    fill_targets,
    io_layout,
    prepare_targets,
)
from real.errors import RealError
from real.targets import Target

MiB = 1 << 20


def aligned(n: int) -> memoryview:
    return memoryview(mmap.mmap(-1, n))


# ---- block format -----------------------------------------------------------------------------
def test_blocks_render_and_verify_with_header_crc():
    fmt = BlockFormat("ssd0", seed=7)
    buf = aligned(300 * BLOCK)  # longer than the 256-block template: two runs
    fmt.render(1000, buf)
    assert fmt.first_mismatch(buf, 1000) == -1
    for i in (0, 255, 256, 299):
        block = bytes(buf[i * BLOCK : (i + 1) * BLOCK])
        assert block[:8] == b"KVTIERB1"
        assert int.from_bytes(block[16:24], "little") == 1000 + i
        assert int.from_bytes(block[12:16], "little") == zlib.crc32(block[32:])
        assert block == fmt.expected(1000 + i)
        assert fmt.first_mismatch(buf[i * BLOCK : (i + 1) * BLOCK], 1000 + i) == -1


def test_payload_is_kv_shaped_float16():
    buf = aligned(64 * BLOCK)
    BlockFormat("ssd1", seed=0).render(0, buf)
    words = np.frombuffer(buf, dtype=np.uint8).reshape(64, BLOCK)[:, 32:]
    values = words.copy().view(np.float16).astype(np.float64)
    assert abs(values.mean()) < 0.05
    assert 0.95 < values.std() < 1.05


@pytest.mark.parametrize("n_blocks", [1, 3, 40])
def test_every_kind_of_bad_block_is_found(n_blocks):
    fmt = BlockFormat("ssd0", seed=1)
    buf = aligned(n_blocks * BLOCK)
    fmt.render(50, buf)
    bad = n_blocks - 1
    flip = bad * BLOCK + 2000
    buf[flip] ^= 0x10  # one bit of the payload
    assert fmt.first_mismatch(buf, 50) == bad
    assert "payload crc32" in fmt.describe(bytes(buf[bad * BLOCK :][:BLOCK]), 50 + bad)
    buf[flip] ^= 0x10
    assert fmt.first_mismatch(buf, 51) == 0  # read from the wrong offset
    assert BlockFormat("ssd1", seed=1).first_mismatch(buf, 50) == 0  # another device
    assert BlockFormat("ssd0", seed=2).first_mismatch(buf, 50) == 0  # another data set
    buf[bad * BLOCK : (bad + 1) * BLOCK] = bytes(BLOCK)
    assert fmt.first_mismatch(buf, 50) == bad
    assert fmt.describe(bytes(BLOCK), 50 + bad).endswith("found all zeros")


# ---- plan footprint ---------------------------------------------------------------------------
def test_layout_extents_contiguous_strided_and_uneven():
    b = PlanBuilder()
    b.read("ssd0", "dram0", 8 * BLOCK, 2, offset=4 * BLOCK)  # blocks 4..11
    b.read("ssd1", "dram0", 5 * BLOCK, 2, offset=0, stride=10 * BLOCK)  # 3 + 2 blocks, strided
    b.write("dram0", "ssd10", BLOCK, 1, offset=MiB)
    b.read("ssd2", "dram0", BLOCK, 1)
    b.compute("gpu0", 1e9, 0.0)
    layout = io_layout(b.table())
    assert layout.nodes == ["ssd0", "ssd1", "ssd2", "ssd10"]  # natural order
    assert layout.extents() == {
        "ssd0": 12 * BLOCK,
        "ssd1": 10 * BLOCK + 2 * BLOCK,  # exactly: the last (shorter) I/O ends at block 12
        "ssd2": BLOCK,
        "ssd10": MiB + BLOCK,
    }
    ios = lambda j: slice(layout.first[j], layout.first[j + 1])  # noqa: E731
    assert (layout.length[ios(0)] // BLOCK).tolist() == [4, 4]
    assert (layout.offset[ios(0)] // BLOCK).tolist() == [4, 8]
    assert (layout.length[ios(1)] // BLOCK).tolist() == [3, 2]
    assert (layout.offset[ios(1)] // BLOCK).tolist() == [0, 10]
    assert layout.node.tolist()[-1] == -1 and layout.first[-1] == layout.first[-2]


@pytest.mark.parametrize(
    "kw",
    [
        {"nbytes": 3000, "n_ios": 1},
        {"nbytes": BLOCK, "n_ios": 1, "offset": 512},
        {"nbytes": 2 * BLOCK, "n_ios": 2, "stride": 6000},
        {"nbytes": BLOCK, "n_ios": 2},
    ],
)
def test_unaligned_io_is_refused_naming_the_op(kw):
    b = PlanBuilder()
    b.read("ssd0", "dram0", BLOCK, 1)
    b.read("ssd0", "dram0", kw.pop("nbytes"), kw.pop("n_ios"), **kw)
    with pytest.raises(RealError, match="^op 1: read .* not made of whole 4 KiB blocks"):
        io_layout(b.table())


# ---- preparation ------------------------------------------------------------------------------
def two_ssd_plan():
    b = PlanBuilder()
    b.read("ssd0", "dram0", 2 * MiB, 2)
    b.read("ssd1", "dram0", MiB, 4, offset=MiB)
    return b.table()


def test_targets_dir_makes_filled_files_and_cleanup_removes_them(direct_dir):
    root = direct_dir / "targets"
    files = prepare_targets(two_ssd_plan(), root, seed=5)
    assert sorted(files.targets) == ["ssd0", "ssd1"]
    for node, t in files.targets.items():
        assert t.created and t.kind == "file" and t.size == 2 * MiB
        assert Path(t.path) == root / node / f"kvtier-{node}.dat"
        data = Path(t.path).read_bytes()
        buf = aligned(len(data))
        buf[:] = data
        assert BlockFormat(node, 5).first_mismatch(buf, 0) == -1
    files.cleanup()
    assert not root.exists()
    files.cleanup()  # idempotent


def test_paths_and_directories_the_user_made_are_kept(direct_dir):
    d0 = direct_dir / "mnt0"
    d0.mkdir()
    f1 = direct_dir / "ssd1.img"
    with prepare_targets(two_ssd_plan(), [d0, f1]) as files:
        assert files.targets["ssd0"].path == str(d0 / "kvtier-ssd0.dat")
        assert files.targets["ssd1"].path == str(f1)
        assert f1.stat().st_size == 2 * MiB
    assert d0.is_dir() and not any(d0.iterdir()) and not f1.exists()


def test_one_target_per_node(direct_dir):
    with pytest.raises(RealError, match=r"2 SSD node\(s\) \(ssd0, ssd1\) but 1 target"):
        prepare_targets(two_ssd_plan(), [direct_dir])
    with pytest.raises(RealError, match="no target given for ssd1"):
        prepare_targets(two_ssd_plan(), {"ssd0": direct_dir})


def test_existing_file_is_refused_unless_allowed(direct_dir):
    mine = direct_dir / "precious.dat"
    mine.write_bytes(b"user data" * 1000)
    with pytest.raises(RealError, match="exists and was not created by this run"):
        prepare_targets(two_ssd_plan(), {"ssd0": mine, "ssd1": direct_dir})
    assert mine.read_bytes() == b"user data" * 1000
    assert list(direct_dir.iterdir()) == [mine]  # nothing half-created
    with prepare_targets(
        two_ssd_plan(), {"ssd0": mine, "ssd1": direct_dir}, allow_write_existing=True
    ) as files:
        assert not files.targets["ssd0"].created
    assert mine.exists()  # not ours to delete


def test_fill_targets_writes_only_what_kvtier_created(direct_dir):
    paths = {n: direct_dir / f"{n}.img" for n in ("ssd0", "ssd1")}
    for p in paths.values():
        p.write_bytes(bytes(2 * MiB))
    plan = two_ssd_plan()
    theirs = {n: Target(n, str(p), 2 * MiB, created=False) for n, p in paths.items()}
    with pytest.raises(RealError, match="was not created by kvtier"):
        fill_targets(theirs, plan)
    fill_targets({n: Target(n, str(p), 2 * MiB) for n, p in paths.items()}, plan, seed=2)
    for node, p in paths.items():
        data = aligned(2 * MiB)
        data[:] = p.read_bytes()
        assert BlockFormat(node, 2).first_mismatch(data, 0) == -1


def test_magic_signature_fallback(tmp_path):
    img = tmp_path / "disk.img"
    img.write_bytes(bytes(1080) + b"\x53\xef" + bytes(70000))
    assert _magic_signature(img) == "an ext2/3/4 filesystem"
    plain = tmp_path / "plain.img"
    plain.write_bytes(bytes(70000))
    assert _magic_signature(plain) is None


@pytest.mark.skipif(not shutil.which("mkfs.ext4"), reason="mkfs.ext4 is not installed")
def test_blkid_names_a_filesystem_image(tmp_path):
    img = tmp_path / "fs.img"
    img.write_bytes(bytes(8 * MiB))
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    assert "ext4" in block_signature(img)


def test_the_batch_check_finds_the_same_first_bad_block_as_the_one_by_one_check():
    """first_bad_block over a batch of single blocks agrees with first_mismatch per block:
    a wrong offset, a flipped payload bit and a wrong header each make their row bad."""
    fmt = BlockFormat("ssd0", seed=4)
    blocks = np.array([5, 261, 0, 1000, 77], dtype=np.uint64)
    words = np.zeros((len(blocks), BLOCK // 8), dtype=np.uint64)
    for row, blk in enumerate(blocks.tolist()):
        fmt.render(blk, memoryview(words[row].view(np.uint8)))
    assert fmt.first_bad_block(words, blocks) == -1
    for row, spoil in ((3, (100, 1)), (1, (2, 0)), (4, (0, 0))):
        bad = words.copy()
        bad[row, spoil[0]] ^= np.uint64(1 << spoil[1])
        one_by_one = [
            fmt.first_mismatch(memoryview(bad[r].view(np.uint8)), int(blocks[r]))
            for r in range(len(blocks))
        ]
        assert one_by_one == [0 if r == row else -1 for r in range(len(blocks))]
        assert fmt.first_bad_block(bad, blocks) == row
    shifted = blocks + np.uint64(1)  # every block read one block off
    assert fmt.first_bad_block(words, shifted) == 0
