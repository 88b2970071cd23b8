"""One ownership check on every write path: never a write to a filesystem or partition
table, and nothing kvtier did not create without the explicit flag."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.contracts.plan import PlanBuilder, write_plan
from real.errors import RealError
from real.ownership import HEAD, check_write, magic_signature

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def image(where: Path, put: dict[int, bytes]) -> bytes:
    head = bytearray(HEAD + 4096)
    for off, magic in put.items():
        head[off : off + len(magic)] = magic
    return bytes(head)


@pytest.mark.parametrize(
    ("put", "what"),
    [
        ({1080: b"\x53\xef"}, "ext2/3/4"),
        ({0: b"XFSB"}, "XFS"),
        ({65536 + 64: b"_BHRfS_M"}, "btrfs"),
        ({4086: b"SWAPSPACE2"}, "swap"),
        ({512: b"EFI PART"}, "GPT"),
        ({0: b"LUKS\xba\xbe"}, "LUKS"),
        ({510: b"\x55\xaa", 446 + 4: b"\x83"}, "MBR"),
    ],
)
def test_each_signature_is_recognised_at_its_offset(tmp_path, put, what):
    assert what in magic_signature(image(tmp_path, put))
    shifted = {off + 1: m for off, m in put.items()}  # one byte off: not that signature
    assert magic_signature(image(tmp_path, shifted)) is None


def test_a_boot_signature_without_partitions_is_not_a_partition_table(tmp_path):
    assert magic_signature(image(tmp_path, {510: b"\x55\xaa"})) is None


def test_check_write_needs_the_flag_and_refuses_a_filesystem_even_with_it(tmp_path):
    fs = tmp_path / "fs.img"
    fs.write_bytes(image(tmp_path, {1080: b"\x53\xef"}))
    plain = tmp_path / "plain.img"
    plain.write_bytes(bytes(HEAD))
    check_write("ssd0", fs, True, False, "--x")  # kvtier's own: always
    with pytest.raises(RealError, match="not created by kvtier; refusing.*pass --x"):
        check_write("ssd0", plain, False, False, "--x")
    check_write("ssd0", plain, False, True, "--x")
    with pytest.raises(RealError, match=r"fs.img holds .*; refusing to overwrite it"):
        check_write("ssd0", fs, False, True, "--x")


def ext4_image(path: Path) -> Path:
    path.write_bytes(bytes(16 * MiB))
    if shutil.which("mkfs.ext4"):
        subprocess.run(["mkfs.ext4", "-q", "-F", str(path)], check=True, capture_output=True)
    else:  # the superblock magic alone is what the check reads
        with open(path, "r+b") as fh:
            fh.seek(1080)
            fh.write(b"\x53\xef")
    return path


def writing_plan(path: Path) -> Path:
    b = PlanBuilder()
    b.write("dram0", "ssd0", MiB, 4, io_path="io_uring")
    write_plan(b.table(), path)
    return path


def kvtier(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "kvtier.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def digest(path: Path | str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(16 * MiB)).hexdigest()


def refused(done: subprocess.CompletedProcess, target: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("kvtier: error: ssd0: ") and target in lines[0]
    assert "refusing to overwrite it" in lines[0]


def write_paths(plan: Path, target: str, tmp: Path) -> list[list[str]]:
    """Every command that would write ``target``, each with its explicit flag."""
    return [
        ["real", "iolog", "--plan", str(plan), "--target", f"ssd0={target}",
         "--out", str(tmp / "iolog"), "--run", "--allow-write"],
        ["real", "replay", "--plan", str(plan), "--target", target,
         "--out", str(tmp / "replay"), "--i-own-this-device"],
    ]  # fmt: skip


def test_an_ext4_image_file_is_never_written(tmp_path):
    img = ext4_image(tmp_path / "fs.img")
    before = digest(img)
    plan = writing_plan(tmp_path / "plan.parquet")
    for args in write_paths(plan, str(img), tmp_path):
        refused(kvtier(*args), str(img))
        assert digest(img) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices)")
@pytest.mark.skipif(not shutil.which("losetup"), reason="losetup is not installed")
def test_ext4_on_a_loop_device_is_never_written(tmp_path):
    """The issue's case: `real iolog --run --allow-write` wiped ext4 on /dev/loopN."""
    img = ext4_image(tmp_path / "fs.img")
    made = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no loop device: {made.stderr.strip()}")
    dev = made.stdout.strip()
    try:
        before = digest(dev)
        plan = writing_plan(tmp_path / "plan.parquet")
        for args in write_paths(plan, dev, tmp_path):
            refused(kvtier(*args), dev)
            assert digest(dev) == before
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
