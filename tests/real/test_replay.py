"""The real replayer on temporary files: exact bytes, order, verification, pacing, safety.

Timing assertions are physics lower bounds only (pacing, release times, modelled
waits); nothing asserts how fast this machine is.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess

import numpy as np
import pytest

from kvtier.cli.main import main
from kvtier.compare.durations import modelled_durations
from kvtier.contracts.plan import PlanBuilder, write_plan
from kvtier.contracts.records import ssd_totals
from real import _gds, _uring
from real.datafile import prepare_targets
from real.engine import make_engine
from real.errors import RealError
from real.replay import replay, sigterm_as_interrupt, validate_for_replay
from real.targets import Limits

MiB = 1 << 20
KiB = 1 << 10
URING_OK, URING_WHY = _uring.probe()
needs_uring = pytest.mark.skipif(not URING_OK, reason=f"io_uring unavailable: {URING_WHY}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def mixed_plan():
    """Two SSDs, contiguous, strided and uneven I/Os, a write then a read of it, a compute."""
    b, io = PlanBuilder(), {"io_path": "io_uring"}
    r0 = b.read("ssd0", "dram0", 4 * MiB, 8, queue_depth=4, **io)
    r1 = b.read("ssd1", "dram0", 3 * MiB, 5, offset=MiB, **io)  # 768 KiB I/Os, uneven split
    r2 = b.read("ssd1", "dram0", 16 * 4 * KiB, 16, stride=64 * KiB, **io)  # strided 4 KiB
    w = b.write("dram0", "ssd0", MiB, 4, offset=6 * MiB, depends_on=[r0], step=1, **io)
    c = b.compute("gpu0", 1e9, 1e6, depends_on=[r1, r2], step=1)
    b.read("ssd0", "dram0", MiB, 2, offset=6 * MiB, depends_on=[w, c], step=2, **io)
    b.read("ssd1", "dram0", 256 * KiB, 1, release_s=0.03, step=2, **io)
    return b.table(), c


def check_records(plan, rec, nonio=None):
    ops = rec.ops.to_pandas()
    assert (ops["backend"] == "real").all()
    assert (ops["ready_s"] <= ops["start_s"]).all() and (ops["start_s"] <= ops["end_s"]).all()
    assert (ops["start_s"] >= plan.column("release_s").to_numpy()).all()
    for j, deps in enumerate(plan.column("depends_on").to_pylist()):
        for k in deps:
            assert ops["start_s"][j] >= ops["end_s"][k], f"op {j} started before op {k} ended"
    for j, secs in (nonio or {}).items():  # on their own clock (real.scheduler)
        assert ops["end_s"][j] - ops["start_s"][j] == pytest.approx(secs, rel=1e-9)
    devices = {r["device"]: r for r in rec.devices.to_pylist()}
    expected = ssd_totals(plan)
    assert set(devices) == set(expected)
    for name, (b_read, b_written, n_ios) in expected.items():
        row = devices[name]
        assert (row["bytes_read"], row["bytes_written"], row["n_ios"]) == (
            b_read,
            b_written,
            n_ios,
        )
        assert 0 < row["busy_s"] <= rec.makespan_s
        assert row["util_mean"] == pytest.approx(row["busy_s"] / rec.makespan_s)
        inflight = rec.stats["inflight_mean"][name], rec.stats["inflight_peak"][name]
        assert 0 < inflight[0] <= inflight[1] <= 1
    assert rec.makespan_s == pytest.approx(ops["end_s"].max())
    return devices


@needs_uring
def test_io_uring_replay_moves_the_plans_bytes_in_order(direct_dir):
    plan, c = mixed_plan()
    with prepare_targets(plan, direct_dir / "t", seed=11) as files:
        rec = replay(plan, files, engine="uring", nonio_s={c: 0.02})
    assert rec.stats["engine"] == "io_uring"
    check_records(plan, rec, {c: 0.02})
    assert not (direct_dir / "t").exists()


def test_thread_engine_gives_the_same_bytes(direct_dir):
    plan, c = mixed_plan()
    with prepare_targets(plan, direct_dir / "t", seed=11) as files:
        rec = replay(plan, files, engine="threads", nonio_s={c: 0.02})
        assert rec.stats["engine"] == "threads"
        by_threads = check_records(plan, rec, {c: 0.02})
        if URING_OK:
            by_uring = check_records(plan, replay(plan, files, engine="uring"))
            for name, row in by_threads.items():
                for col in ("bytes_read", "bytes_written", "n_ios"):
                    assert by_uring[name][col] == row[col]


def test_auto_engine_says_what_it_chose():
    engine, note = make_engine("auto", 8)
    try:
        assert note
        if URING_OK:
            assert engine.name == "io_uring"
        else:
            assert engine.name == "threads" and "io_uring unavailable" in note
    finally:
        engine.close()
    if not URING_OK:
        with pytest.raises(RealError, match="io_uring is not usable here"):
            make_engine("uring", 8)


def test_queue_depths_bound_what_is_in_flight(direct_dir):
    b = PlanBuilder()
    b.read("ssd0", "dram0", MiB, 64, queue_depth=2)
    b.read("ssd1", "dram0", MiB, 64)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="threads", qd=8)
    peaks = rec.stats["inflight_peak"]
    assert peaks["ssd0"] <= 2 / 8
    assert peaks["ssd1"] <= 1.0
    assert rec.stats["queue_depth"] == {"ssd0": 8, "ssd1": 8}


@pytest.mark.parametrize("engine", ["threads", pytest.param("uring", marks=needs_uring)])
def test_a_corrupted_block_stops_the_run_naming_its_offset(direct_dir, engine):
    b = PlanBuilder()
    b.read("ssd0", "dram0", 2 * MiB, 2)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        path = files.targets["ssd0"].path
        fd = os.open(path, os.O_RDWR)
        try:
            bad = 1234 * 1024  # inside block 308
            os.pwrite(fd, b"\xff", bad)
            os.fsync(fd)
        finally:
            os.close(fd)
        with pytest.raises(RealError, match=rf"ssd0: data mismatch in .* at offset {308 * 4096}"):
            replay(plan, files, engine=engine)


def test_an_io_error_names_device_path_and_offset(direct_dir, monkeypatch):
    from real import scheduler

    real_make = scheduler.make_engine

    class FailingSecondIO:
        """The thread engine, but the I/O tagged 2 reports EIO."""

        def __init__(self, inner):
            self.inner, self.name, self.async_flag = inner, inner.name, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def wait(self, timeout):
            return [(t, -errno.EIO if t == 2 else r) for t, r in self.inner.wait(timeout)]

    def make(name, slots, gds=None):
        engine, note = real_make("threads", slots, gds)
        return FailingSecondIO(engine), note

    monkeypatch.setattr(scheduler, "make_engine", make)
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4 * MiB, 4, offset=MiB)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        path = files.targets["ssd0"].path
        with pytest.raises(RealError) as err:
            replay(plan, files)
    assert str(err.value) == (
        f"ssd0: Input/output error (EIO) reading 1.00 MiB of {path} at offset {2 * MiB}; "
        "the device reported an I/O error"
    )


def test_writes_to_a_file_the_user_owns_need_the_flag(direct_dir):
    theirs = direct_dir / "theirs.img"
    theirs.write_bytes(bytes(MiB))
    b = PlanBuilder()
    b.write("dram0", "ssd0", MiB, 1)
    plan = b.table()
    with prepare_targets(plan, [theirs], allow_write_existing=True) as files:
        with pytest.raises(RealError, match="was not created by kvtier; refusing to write"):
            replay(plan, files.targets)
        rec = replay(plan, files)  # the choice made when preparing travels with the files
    assert rec.devices.to_pylist()[0]["bytes_written"] == MiB
    assert theirs.exists()


def test_writes_store_blocks_that_later_reads_verify(direct_dir):
    b = PlanBuilder()
    w = b.write("dram0", "ssd0", MiB, 16, offset=MiB)
    b.read("ssd0", "dram0", 2 * MiB, 4, depends_on=[w])
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t", seed=3) as files:
        path = files.targets["ssd0"].path
        with open(path, "r+b") as fh:  # damage the region the plan writes first
            fh.seek(MiB + 100)
            fh.write(b"\0" * 5000)
        rec = replay(plan, files, engine="threads")
    row = rec.devices.to_pylist()[0]
    assert (row["bytes_written"], row["bytes_read"], row["n_ios"]) == (MiB, 2 * MiB, 20)


def test_a_truncated_file_gives_a_short_read_error(direct_dir):
    b = PlanBuilder()
    b.read("ssd0", "dram0", MiB, 1, offset=MiB)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        os.truncate(files.targets["ssd0"].path, MiB + 4096)
        with pytest.raises(RealError, match=r"short read of .* at offset 1048576: 4096 of"):
            replay(plan, files, engine="threads")


def test_pacing_holds_a_device_to_its_limits(direct_dir):
    b = PlanBuilder()
    b.read("ssd0", "dram0", 10 * MiB, 40)  # 256 KiB I/Os
    b.read("ssd1", "dram0", 20 * 4 * KiB, 20)
    plan = b.table()
    rate, iops = 50e6, 200
    limits = {"ssd0": Limits(read_bps=int(rate)), "ssd1": Limits(read_iops=iops)}
    with prepare_targets(plan, direct_dir / "t", limits=limits, pacing=True) as files:
        rec = replay(plan, files, engine="threads")
    ops = rec.ops.to_pandas()
    # an op ends no earlier than its device time (real._pacing: it has the device alone)
    assert ops["end_s"][0] >= 10 * MiB / rate  # >= 0.210 s
    assert ops["end_s"][1] >= 20 / iops  # >= 0.1 s
    assert rec.stats["paced"] == ["ssd0", "ssd1"]


def test_interrupt_drains_and_cleans_up(direct_dir):
    b = PlanBuilder()
    for _ in range(50):
        b.read("ssd0", "dram0", 256 * KiB, 4)
    plan = b.table()

    def interrupt(done: int, total: int) -> None:
        if done >= 10:
            raise KeyboardInterrupt

    root = direct_dir / "t"
    with pytest.raises(KeyboardInterrupt), prepare_targets(plan, root) as files:
        replay(plan, files, engine="threads", progress=interrupt)
    assert not root.exists()


@pytest.mark.parametrize("engine", ["threads", pytest.param("uring", marks=needs_uring)])
def test_interrupt_mid_round_drains_every_io(direct_dir, monkeypatch, engine):
    from real import scheduler

    queue, calls = scheduler.Replayer._queue, []

    def queue_then_interrupt(self, *args):
        queue(self, *args)  # queued, not yet submitted
        calls.append(1)
        if len(calls) == 10:
            raise KeyboardInterrupt

    monkeypatch.setattr(scheduler.Replayer, "_queue", queue_then_interrupt)
    monkeypatch.setattr(scheduler, "DRAIN_S", 5.0)
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4 * MiB, 1024)
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        runner = scheduler.Replayer(plan, files.targets, engine=engine)
        with pytest.raises(KeyboardInterrupt):
            runner.run()
    assert runner.inflight == 0 and len(calls) == 10


def test_sigterm_becomes_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.5)  # let the handler run
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@needs_root
@pytest.mark.skipif(not shutil.which("losetup"), reason="losetup is not installed")
@pytest.mark.skipif(not shutil.which("mkfs.ext4"), reason="mkfs.ext4 is not installed")
def test_block_device_holding_a_filesystem_is_refused(tmp_path):
    img = tmp_path / "fs.img"
    img.write_bytes(bytes(8 * MiB))
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    made = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no loop device: {made.stderr.strip()}")
    dev = made.stdout.strip()
    try:
        b = PlanBuilder()
        b.read("ssd0", "dram0", MiB, 1)
        plan = b.table()
        with pytest.raises(RealError, match="block device kvtier did not set up"):
            prepare_targets(plan, [dev])
        with pytest.raises(RealError, match=rf"{dev} holds an? ext4 filesystem; refusing"):
            prepare_targets(plan, [dev], allow_write_existing=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
    assert img.read_bytes()[1080:1082] == b"\x53\xef"  # untouched


@needs_root
def test_no_space_is_a_clear_error_and_leaves_nothing(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr.decode().strip()}")
    try:
        b = PlanBuilder()
        b.read("ssd0", "dram0", MiB, 1)
        b.read("ssd1", "dram0", 4 * MiB, 4)  # does not fit after ssd0's file
        with pytest.raises(RealError) as err:
            prepare_targets(b.table(), small / "t")
        msg = str(err.value)
        if "O_DIRECT" in msg:
            pytest.skip("tmpfs here does not support O_DIRECT")
        assert "ssd1: No space left on device (ENOSPC) preallocating 4.00 MiB" in msg
        assert f"{small}/t/ssd1/kvtier-ssd1.dat at offset 0" in msg
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=False)


@pytest.mark.skipif(not _gds.gds_status()[0], reason=_gds.gds_status()[1])
def test_gds_reads_land_in_gpu_memory_and_verify(direct_dir):  # pragma: no cover - needs a GPU
    b = PlanBuilder()
    b.read("ssd0", "gpu0", 4 * MiB, 4, io_path="gds")
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, gds="require")
    assert rec.devices.to_pylist()[0]["bytes_read"] == 4 * MiB
    assert any("GPUDirect" in n for n in rec.stats["notes"])


def test_gds_ops_without_a_gpu_go_through_host_memory_and_say_so(direct_dir):
    ok, why = _gds.gds_status()
    if ok:
        pytest.skip("a GPU with kvikio is present: the GDS path itself is tested")
    b = PlanBuilder()
    b.read("ssd0", "gpu0", MiB, 2, io_path="gds")
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="threads")
        with pytest.raises(RealError, match="GPUDirect Storage reads but"):
            replay(plan, files, gds="require")
    assert rec.stats["notes"] == [f"io_path 'gds' reads went through host memory: {why}"]


def test_modelled_durations_come_from_the_simulator():
    from hwprofiles import load_profile

    plan, c = mixed_plan()
    secs = modelled_durations(plan, load_profile("h20-8ssd"))
    assert secs[c] > 0 and np.all(np.delete(secs, c) == 0)
    validate_for_replay(plan)


def test_cli_replay_writes_records_and_cleans_up(direct_dir, tmp_path, capsys):
    plan, _ = mixed_plan()
    plan_file = tmp_path / "plan.parquet"
    write_plan(plan, plan_file)
    out, root = tmp_path / "out", direct_dir / "targets"
    argv = ["real", "replay", "--plan", str(plan_file), "--targets-dir", str(root)]
    assert main([*argv, "--out", str(out), "--engine", "threads", "--hw", "h20-8ssd"]) == 0
    assert {p.name for p in out.iterdir()} >= {"ops.parquet", "devices.parquet", "run.json"}
    meta = json.loads((out / "run.json").read_text())
    assert meta["backend"] == "real" and meta["stats"]["engine"] == "threads"
    assert meta["git"]["sha"] and set(meta["targets"]) == {"ssd0", "ssd1"}
    assert not root.exists()
    assert "Replay: 7 ops" in capsys.readouterr().out
    bad = ["real", "replay", "--plan", str(plan_file), "--target", str(direct_dir)]
    assert main([*bad, "--out", str(out), "--force"]) == 2
    assert "2 SSD node(s) (ssd0, ssd1) but 1 target(s)" in capsys.readouterr().err


def test_cli_interrupt_removes_the_files(direct_dir, tmp_path, monkeypatch):
    from real import scheduler

    plan, _ = mixed_plan()
    plan_file = tmp_path / "plan.parquet"
    write_plan(plan, plan_file)
    root = direct_dir / "targets"

    def interrupted(self):
        assert (root / "ssd0" / "kvtier-ssd0.dat").exists()
        raise KeyboardInterrupt

    monkeypatch.setattr(scheduler.Replayer, "run", interrupted)
    argv = ["real", "replay", "--plan", str(plan_file), "--targets-dir", str(root)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 130
    assert not root.exists()


@pytest.mark.parametrize("engine", ["threads", pytest.param("uring", marks=needs_uring)])
def test_a_corrupted_block_among_batch_verified_4k_reads_stops_the_run(direct_dir, engine):
    """4 KiB reads are verified a round at a time in one comparison: a flipped byte in
    one block among 64 single-block reads in flight together still names that block."""
    b = PlanBuilder()
    blocks = np.array([7, 300, 3, 150, 42, 200, 99, 1] * 8, dtype=np.int64) + np.repeat(
        np.arange(8) * 301, 8
    )
    ext = np.stack([blocks * 4096, np.full(len(blocks), 4096)], axis=1)
    b.read("ssd0", "dram0", extents=ext, queue_depth=64)
    plan = b.table()
    victim = int(blocks[37])
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine=engine, qd=64)  # intact: every read verified
        row = rec.devices.to_pylist()[0]
        assert (row["bytes_read"], row["n_ios"]) == (64 * 4096, 64)
        fd = os.open(files.targets["ssd0"].path, os.O_RDWR)
        try:
            os.pwrite(fd, b"\x00", victim * 4096 + 2000)  # inside the payload
            os.fsync(fd)
        finally:
            os.close(fd)
        with pytest.raises(RealError, match=rf"ssd0: data mismatch .* at offset {victim * 4096}:"):
            replay(plan, files, engine=engine, qd=64)
