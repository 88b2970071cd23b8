"""fio iolog export: exact text of a hand-made plan, and fio replaying it on temporary files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvtier.contracts.plan import PlanBuilder
from real.errors import RealError
from real.iolog import export_iologs, fio_replay_throughput, iolog_lines, job_file
from real.targets import Limits, Target

MIB = 1 << 20


def three_ops() -> pa.Table:
    """Two reads from ssd0 (contiguous, then strided) and one write to ssd1, plus compute."""
    b = PlanBuilder()
    b.read("ssd0", "dram0", 8192, 2, io_path="io_uring", offset=0)  # I/Os at 0 and 4096
    b.write("dram0", "ssd1", 4096, 1, io_path="io_uring", offset=8192, release_s=0.00025)
    b.read("ssd0", "dram0", 8192, 2, io_path="io_uring", offset=65536, stride=16384, release_s=1e-4)
    b.compute("gpu0", 1e9, 1e6, depends_on=[0, 2])
    return b.table()


def targets(tmp_path: Path, size: int = MIB) -> list[Target]:
    out = []
    for node in ("ssd0", "ssd1"):
        path = tmp_path / f"{node}.dat"
        path.write_bytes(bytes(size))
        out.append(Target(node=node, path=str(path), size=size, queue_depth=4))
    return out


def test_export_is_one_log_per_device_line_by_line(tmp_path: Path) -> None:
    t0, t1 = targets(tmp_path)
    logs = export_iologs(three_ops(), [t0, t1], tmp_path / "logs")
    assert list(logs) == ["ssd0", "ssd1"]
    assert logs["ssd0"].read_text().splitlines() == [
        "fio version 3 iolog",
        f"0 {t0.path} add",
        f"0 {t0.path} open",
        f"0 {t0.path} read 0 4096",
        f"0 {t0.path} read 4096 4096",
        f"100 {t0.path} read 65536 4096",
        f"100 {t0.path} read 81920 4096",
        f"100 {t0.path} close",
    ]
    assert logs["ssd1"].read_text() == (
        "fio version 3 iolog\n"
        f"0 {t1.path} add\n"
        f"0 {t1.path} open\n"
        f"250 {t1.path} write 8192 4096\n"
        f"250 {t1.path} close\n"
    )


def test_timestamps_come_from_records_when_given(tmp_path: Path) -> None:
    t0, t1 = targets(tmp_path)
    records = pa.table({"op_id": [0, 1, 2, 3], "start_s": [0.002, 0.0015, 0.001, 0.003]})
    logs = export_iologs(three_ops(), [t0, t1], tmp_path, records=records)
    lines = logs["ssd0"].read_text().splitlines()[3:]
    assert lines == [
        f"1000 {t0.path} read 65536 4096",  # op 2 started first in the records
        f"1000 {t0.path} read 81920 4096",
        f"2000 {t0.path} read 0 4096",
        f"2000 {t0.path} read 4096 4096",
        f"2000 {t0.path} close",
    ]
    assert f"1500 {t1.path} write 8192 4096" in logs["ssd1"].read_text()


def test_job_file_has_one_job_per_device_and_no_redirect(tmp_path: Path) -> None:
    t0, t1 = targets(tmp_path)
    paced = Target("ssd1", t1.path, t1.size, pacing=True, limits=Limits(100, 200, 3, 4))
    logs = export_iologs(three_ops(), [t0, paced], tmp_path)
    text = job_file(logs, [t0, paced], three_ops())
    assert "replay_redirect" not in text and "replay_no_stall=1" in text
    assert text.count("read_iolog=") == 2 and "[ssd0]" in text and "[ssd1]" in text
    assert "iodepth=4" in text  # the target's queue depth
    # paced targets carry their limits; fio refuses rate with rate_iops, so each
    # direction gets the tighter of bytes/s and IOPS x the plan's I/O size there
    assert "rate=100,200\n" in text and "rate_iops" not in text
    iops_bound = Target("ssd1", t1.path, t1.size, pacing=True, limits=Limits(10**9, 10**9, 3, 4))
    text = job_file(logs, [t0, iops_bound], three_ops())
    assert "rate=1000000000,16384\n" in text  # no reads; 4 IOPS x one 4 KiB write
    assert "replay_no_stall=0" in job_file(logs, [t0, paced], three_ops(), no_stall=False)


def test_refusals(tmp_path: Path) -> None:
    t0, t1 = targets(tmp_path)
    with pytest.raises(RealError, match="no target for plan SSD node"):
        export_iologs(three_ops(), [t0], tmp_path)
    with pytest.raises(RealError, match="beyond"):
        export_iologs(three_ops(), [Target("ssd0", t0.path, 65536), t1], tmp_path)
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4096 + 100, 1, io_path="io_uring")
    with pytest.raises(RealError, match="4196 bytes is not a multiple of 512"):
        export_iologs(b.table(), [t0], tmp_path)
    b = PlanBuilder()  # 4097 bytes in 2 I/Os: 2049 + 2048, neither sector-aligned
    b.read("ssd0", "dram0", 4097, 2, io_path="io_uring")
    with pytest.raises(RealError, match="2049 bytes is not a multiple of 512"):
        export_iologs(b.table(), [t0], tmp_path)
    users = [
        Target("ssd0", t0.path, MIB, created=False),
        Target("ssd1", t1.path, MIB, created=False),
    ]
    with pytest.raises(RealError, match="was not created by kvtier; refusing to write it"):
        fio_replay_throughput(three_ops(), users, tmp_path)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_fio_replays_the_logs_on_temporary_files(tmp_path: Path) -> None:
    ts = targets(tmp_path)
    got = fio_replay_throughput(three_ops(), ts, tmp_path / "out")
    assert (got["read_bytes"], got["write_bytes"], got["bytes"]) == (16384, 4096, 20480)
    assert got["per_device"]["ssd0"]["bytes"] == 16384
    assert got["per_device"]["ssd1"]["bytes"] == 4096
    assert got["elapsed_s"] >= 0 and Path(got["fio_json"]).exists()
    assert (tmp_path / "ssd1.dat").stat().st_size == MIB  # written in place, not extended


def test_scattered_extents_are_logged_exactly(tmp_path: Path) -> None:
    """A scattered op's I/Os are its extents cut at io_bytes, in submission order."""
    t0, _ = targets(tmp_path)
    b = PlanBuilder()
    # 8 KiB at 64 KiB, then 12 KiB at 0 cut into 8 KiB I/Os: 3 lines
    ext = np.array([[65536, 8192], [0, 12288]])
    b.read("ssd0", "dram0", extents=ext, io_bytes=8192, io_path="io_uring")
    lines = iolog_lines(b.table(), t0, np.zeros(1))
    io = [line.split()[2:] for line in lines if " read " in line]
    assert io == [["read", "65536", "8192"], ["read", "0", "8192"], ["read", "8192", "4096"]]
