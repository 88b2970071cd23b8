"""The fio engine replays exactly the plan's I/Os and fails on any bad block.

Skipped where fio is not installed.  Data files live in a directory that takes
O_DIRECT (the ``direct_dir`` fixture).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
import pytest

from kvtier.contracts.plan import BLOCK, PlanBuilder
from kvtier.contracts.records import DEVICE_RECORD_SCHEMA, OP_RECORD_SCHEMA
from real import _fiolog, _fioprobe, fioreplay
from real.datafile import io_layout, prepare_targets
from real.errors import RealError
from real.fio import fio_binary
from real.replay import replay
from real.targets import Limits, Target

pytestmark = pytest.mark.skipif(fio_binary() is None, reason="fio is not installed")
KIB = 1024


def scattered_plan():
    """ssd0: two reads of 3 + 2 ranges of 4/8/64 KiB; ssd1: one write of 2 ranges."""
    b = PlanBuilder()
    b.read(
        "ssd0", "dram0", extents=np.array([[0, 4 * KIB], [64 * KIB, 8 * KIB], [8 * KIB, 64 * KIB]])
    )
    b.read("ssd0", "dram0", extents=np.array([[256 * KIB, 4 * KIB], [128 * KIB, 64 * KIB]]))
    b.write("dram0", "ssd1", extents=np.array([[0, 8 * KIB], [32 * KIB, 4 * KIB]]))
    return b.table()


def test_turn_order_interleaves_the_ops_of_a_device_one_io_each():
    # op 0 issues I/Os 0, 1, 2 and op 1 I/Os 3, 4: turns 0, 3 | 1, 4 | 2
    b = PlanBuilder()
    b.read("ssd0", "dram0", 3 * BLOCK, 3)
    b.read("ssd0", "dram0", 2 * BLOCK, 2, offset=8 * BLOCK)
    assert fioreplay.turn_order(io_layout(b.table()), 0).tolist() == [0, 3, 1, 4, 2]


def test_fio_moves_exactly_the_plans_ios_and_records_have_the_same_columns(direct_dir):
    plan = scattered_plan()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="fio", qd=4)
        py = replay(plan, files, engine="python", qd=4)  # kvtier's format is back
    dev = {r["device"]: r for r in rec.devices.to_pylist()}
    # by hand: ssd0 reads 4+8+64 + 4+64 KiB in 5 I/Os; ssd1 writes 8+4 KiB in 2
    assert (dev["ssd0"]["bytes_read"], dev["ssd0"]["n_ios"]) == (144 * KIB, 5)
    assert (dev["ssd1"]["bytes_written"], dev["ssd1"]["n_ios"]) == (12 * KIB, 2)
    assert rec.stats["engine"] == "fio" and rec.stats["verified"]
    assert rec.ops.schema.equals(py.ops.schema) and rec.ops.schema.names == OP_RECORD_SCHEMA.names
    assert rec.devices.schema.equals(py.devices.schema)
    assert rec.devices.schema.names == DEVICE_RECORD_SCHEMA.names
    ops = rec.ops.to_pandas()
    assert (ops["start_s"] == 0).all() and (ops["end_s"] <= rec.stats["makespan_s"] + 1e-3).all()


def test_match_refuses_a_completion_list_that_is_not_the_plans():
    plan = scattered_plan()
    lay = io_layout(plan)
    mine = lay.io_node == 0
    done = pd.DataFrame(
        {"offset": lay.offset[mine], "length": lay.length[mine], "time_s": np.zeros(mine.sum())}
    )
    end = np.zeros(plan.num_rows)
    fioreplay._match(lay, 0, done, end, "ssd0")  # the plan's own list passes
    moved = done.assign(offset=done["offset"].where(done.index != 2, 512 * KIB))
    with pytest.raises(RealError, match="not the plan's"):
        fioreplay._match(lay, 0, moved, end, "ssd0")
    with pytest.raises(RealError, match="fio completed 4 I/Os, not the plan's 5"):
        fioreplay._match(lay, 0, done.iloc[1:], end, "ssd0")


@pytest.mark.parametrize("damage", ["misplaced", "bitflip"])
def test_a_bad_block_fails_the_fio_replay(direct_dir, monkeypatch, damage):
    """The block at 256 KiB is op 1's 4 KiB read; after fio fills the file it is replaced
    by the block from 4 KiB (right crc, wrong offset) or gets one bit flipped."""
    plan = scattered_plan()
    fill = fioreplay.fill_fio

    def fill_then_damage(target, size, work):
        fill(target, size, work)
        if target.node != "ssd0":
            return
        fd = os.open(target.path, os.O_RDWR)
        try:
            blk = bytearray(os.pread(fd, BLOCK, 4 * KIB if damage == "misplaced" else 256 * KIB))
            if damage == "bitflip":
                blk[1000] ^= 1
            os.pwrite(fd, bytes(blk), 256 * KIB)
            # clean page cache: a dirty page would slow fio's O_DIRECT read of it into
            # fio's unverified last completions (then the log check fails the run instead)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    monkeypatch.setattr(fioreplay, "fill_fio", fill_then_damage)
    with (
        prepare_targets(plan, direct_dir / "t") as files,
        # fio fails the read (verify), or, now and then here, drops the bad read from its
        # completion log with exit 0: the completion check then fails on the same offset
        pytest.raises(RealError, match="verif") as err,
    ):
        replay(plan, files, engine="fio", qd=4)
    assert "262144" in str(err.value)  # fio names the offset of the bad block


def test_auto_takes_python_for_a_plan_with_steps_and_fio_refuses_it(direct_dir):
    b = PlanBuilder()
    first = b.read("ssd0", "dram0", 4 * BLOCK, 4)
    b.read("ssd0", "dram0", 4 * BLOCK, 4, offset=16 * BLOCK, depends_on=[first])
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="auto")
        assert rec.stats["engine"] != "fio"
        assert "not fio: ops depend on other ops" in rec.stats["engine_note"]
        with pytest.raises(RealError, match="--engine fio cannot replay this plan"):
            replay(plan, files, engine="fio")


def _reads(blocks, node="ssd0"):
    b = PlanBuilder()
    ext = np.array([[k * BLOCK, BLOCK] for k in blocks], dtype=np.int64)
    b.read(node, "dram0", extents=ext)
    return b.table()


def test_pads_go_past_the_extent_else_in_the_first_block_no_io_touches():
    lay = io_layout(_reads([0, 1, 3]))  # the plan needs 16 KiB; block 2 is never read
    roomy = {"ssd0": Target("ssd0", "/x", 20 * KIB)}
    tight = {"ssd0": Target("ssd0", "/x", 16 * KIB, "loop")}  # a device cannot grow
    assert fioreplay.pad_offsets(lay, roomy) == {"ssd0": 16 * KIB}
    assert fioreplay.pad_offsets(lay, tight) == {"ssd0": 8 * KIB}
    file = {"ssd0": Target("ssd0", "/x", 16 * KIB, "file")}  # a file grows past the plan
    assert fioreplay.pad_offsets(io_layout(_reads([3, 0, 2, 1])), file) == {"ssd0": 16 * KIB}
    full = io_layout(_reads([3, 0, 2, 1]))
    assert "untouched" in fioreplay.pad_offsets(full, tight)
    assert "untouched" in fioreplay.fio_expressible(_reads([3, 0, 2, 1]), tight)
    six = {"ssd0": Target("ssd0", "/x", 24 * KIB, "loop")}  # blocks 0-5
    holes = io_layout(_reads([0, 2, 3, 5]))  # free: 1 and 4, no two in a row
    assert fioreplay.pad_offsets(holes, six, {"ssd0": BLOCK}) == {"ssd0": 4 * KIB}
    assert "no 2 blocks" in fioreplay.pad_offsets(holes, six, {"ssd0": 2 * BLOCK})
    run = io_layout(_reads([0, 3, 4, 5]))  # free: 1 and 2
    assert fioreplay.pad_offsets(run, six, {"ssd0": 2 * BLOCK}) == {"ssd0": 4 * KIB}


def test_fio_replays_a_plan_that_ends_where_the_device_ends(direct_dir):
    plan = _reads([0, 1, 3])
    with prepare_targets(plan, direct_dir / "t") as files:
        t = files.targets["ssd0"]
        assert t.size == 16 * KIB  # no room past the plan's extent
        dev = {"ssd0": dataclasses.replace(t, kind="block")}  # held to its size: pads inside
        rec = replay(plan, dev, engine="fio", qd=2)
        assert os.path.getsize(t.path) == 16 * KIB
        py = replay(plan, files, engine="python", qd=2)  # kvtier's format is back everywhere
    for r in (rec, py):
        dev = r.devices.to_pylist()[0]
        assert (dev["bytes_read"], dev["n_ios"]) == (12 * KIB, 3)


def test_kernel_throttled_targets_go_to_fio_paced_ones_do_not():
    plan = _reads([0, 1])
    limits = Limits(read_iops=1000, read_bps=10 << 20)
    throttled = {"ssd0": Target("ssd0", "/x", 1 << 20, "loop", limits=limits)}
    paced = {"ssd0": Target("ssd0", "/x", 1 << 20, limits=limits, pacing=True)}
    assert fioreplay.fio_expressible(plan, throttled) == ""
    assert "paced in user space" in fioreplay.fio_expressible(plan, paced)


def test_fio_cpu_holds_at_least_what_fio_reports_of_itself(direct_dir):
    """cpu_s is fio's whole process (io-wq workers too), a superset of its job's own
    usr_cpu + sys_cpu; fio rounds those to 1/100 % of a ms-resolution runtime."""
    plan = _reads(np.random.default_rng(0).permutation(4096)[:3000])
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="fio", qd=16)
    s = rec.stats
    assert s["cpu_s"] > 0 and s["cpu_s"] >= 0.99 * s["fio_reported_cpu_s"] - 1e-3
    assert rec.ops.to_pandas()["cpu_s"].sum() == pytest.approx(s["cpu_s"])


def _chain(dep_of_third=(0, 1), third_step=1):
    """Two reads of ssd0/ssd1 in step 0, then a write of ssd0 depending on ``dep_of_third``."""
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4 * BLOCK, 4, step=0, queue_depth=2)
    b.read("ssd1", "dram0", 2 * BLOCK, 2, step=0, queue_depth=3)
    b.write("dram0", "ssd0", 2 * BLOCK, 2, step=third_step, depends_on=list(dep_of_third))
    return b.table()


def test_waves_are_steps_each_depending_on_the_whole_step_before():
    assert [w.tolist() for w in fioreplay.fio_waves(_chain())] == [[0, 1], [2]]
    assert "beyond the whole previous step" in fioreplay.fio_waves(_chain((0,)))  # half a step
    assert "beyond" in fioreplay.fio_waves(_chain((0, 0)))  # op 0 twice is not ops 0 and 1
    assert "beyond" in fioreplay.fio_waves(_chain((0, 1), third_step=0))  # a dep in its own step
    b = PlanBuilder()
    a = b.read("ssd0", "dram0", BLOCK, 1, step=0)
    c = b.read("ssd0", "dram0", BLOCK, 1, step=1, depends_on=[a])
    b.read("ssd0", "dram0", BLOCK, 1, step=2, depends_on=[a])  # skips step 1
    assert "beyond" in fioreplay.fio_waves(b.table())
    assert c == 1


def test_each_node_in_a_wave_keeps_its_ops_queue_depths():
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4 * BLOCK, 4, queue_depth=2)
    b.read("ssd0", "dram0", 4 * BLOCK, 4, offset=4 * BLOCK, queue_depth=3)
    b.read("ssd1", "dram0", 4 * BLOCK, 4, queue_depth=1)
    plan = b.table()
    t = {n: Target(n, "/x", 1 << 20) for n in ("ssd0", "ssd1")}
    (wave,) = fioreplay.FioReplayer(plan, t, qd=32).waves
    assert wave.qd == {"ssd0": 2 + 3, "ssd1": 1}
    (wave,) = fioreplay.FioReplayer(plan, t, qd=4).waves  # 4 slots cap ssd0's 2 + 3
    assert wave.qd == {"ssd0": 4, "ssd1": 1}


def test_fio_runs_one_step_after_another_and_a_node_may_change_direction(direct_dir):
    plan = _chain()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="fio")
        replay(plan, files, engine="python")  # kvtier's format is back
    assert rec.stats["fio_runs"] == 2 and "2 runs" in rec.stats["engine_note"]
    ops = rec.ops.to_pandas()
    # back to back, as the Python engine runs them: the write starts as the reads end
    assert ops.loc[2, "start_s"] == pytest.approx(ops.loc[[0, 1], "end_s"].max())
    assert ops["start_s"].min() == 0
    assert rec.stats["makespan_s"] == pytest.approx(ops["end_s"].max())
    busy = {r["device"]: r["busy_s"] for r in rec.devices.to_pylist()}
    assert busy["ssd0"] <= rec.stats["makespan_s"] + 1e-9  # on the same clock
    dev = {r["device"]: r for r in rec.devices.to_pylist()}
    # by hand: ssd0 reads 4 blocks and writes 2 in 6 I/Os; ssd1 reads 2 blocks in 2
    assert (dev["ssd0"]["bytes_read"], dev["ssd0"]["bytes_written"]) == (4 * BLOCK, 2 * BLOCK)
    assert (dev["ssd0"]["n_ios"], dev["ssd1"]["bytes_read"], dev["ssd1"]["n_ios"]) == (
        6,
        2 * BLOCK,
        2,
    )


def test_lead_in_spends_one_throttle_slice_of_the_binding_limit():
    lim = Limits(read_iops=63_290, read_bps=397_000_000, write_iops=11_507, write_bps=0)
    t = Target("ssd0", "/dev/loop9", 1 << 30, "loop", limits=lim)
    # 4 KiB reads: IOPS bind (63,290 < 397e6 / 4096 = 96,924): 0.1 s of them
    assert _fiolog.lead_in(t, False, BLOCK) == (6329, BLOCK)
    # 1 MiB reads: bytes bind: 397e6 / 2**20 = 378.6 per s, 37.86 in a slice: 37 fit
    assert _fiolog.lead_in(t, False, 1 << 20) == (37, 1 << 20)
    assert _fiolog.lead_in(t, True, BLOCK) == (1150, BLOCK)  # writes: 11,507 IOPS only
    assert _fiolog.lead_in(dataclasses.replace(t, limits=Limits()), False, BLOCK) == (0, 0)
    assert _fiolog.lead_in(dataclasses.replace(t, pacing=True), False, BLOCK) == (0, 0)


def test_lead_in_pads_are_not_the_plans_and_the_clock_starts_after_them(direct_dir):
    plan = _reads(range(64))
    with prepare_targets(plan, direct_dir / "t") as files:
        t = files.targets["ssd0"]
        limited = {"ssd0": dataclasses.replace(t, limits=Limits(read_iops=2000))}  # 200 pads
        replayer = fioreplay.FioReplayer(plan, limited, qd=8)
        assert replayer.waves[0].lead == {"ssd0": (200, BLOCK)}
        rec = replayer.run()
    dev = rec.devices.to_pylist()[0]
    assert (dev["bytes_read"], dev["n_ios"], rec.stats["ios"]) == (64 * BLOCK, 64, 64)
    op = rec.ops.to_pylist()[0]
    assert 0 <= op["start_s"] == op["ready_s"] <= op["end_s"] <= rec.stats["makespan_s"] + 1e-3


def test_lead_in_is_kept_unless_fios_ceiling_falls_short_of_the_limit_by_the_margin():
    # scale 1 of h20-8ssd: 1.1M IOPS per device against fio's ~250K: never throttled
    assert not _fioprobe.lead_needed(1_100_000, 250_000)
    # a limit below fio's ceiling binds: the credit would shorten the run
    assert _fioprobe.lead_needed(63_290, 250_000)
    # within the 1.25 margin (250K x 1.25 = 312.5K >= 300K): kept, it might bind
    assert _fioprobe.lead_needed(300_000, 250_000)
    assert not _fioprobe.lead_needed(312_501, 250_000)
    # the limit a lead-in was sized from: 6,329 pads are 0.1 s of 63,290 IOPS
    assert _fioprobe.limit_rate(6329) == pytest.approx(63_290)


def test_a_limit_fio_never_reaches_gets_no_lead_in_pads(direct_dir):
    plan = _reads(range(64))
    with prepare_targets(plan, direct_dir / "t") as files:
        t = files.targets["ssd0"]
        # 20M IOPS: a 2M-pad lead-in, far beyond what one fio job verifies per second
        fast = {"ssd0": dataclasses.replace(t, limits=Limits(read_iops=20_000_000))}
        replayer = fioreplay.FioReplayer(plan, fast, qd=8)
        assert replayer.waves[0].lead == {"ssd0": (2_000_000, BLOCK)}
        rec = replayer.run()
    ceiling = rec.stats["fio_ceiling_iops"]["ssd0"]
    assert 0 < ceiling * _fioprobe.MARGIN < 20_000_000  # measured, and short of the limit
    assert rec.stats["lead_in_pads"] == {"ssd0": 0}
    assert (rec.stats["ios"], rec.devices.to_pylist()[0]["n_ios"]) == (64, 64)


def test_a_small_lead_in_is_not_probed(direct_dir):
    plan = _reads(range(64))
    with prepare_targets(plan, direct_dir / "t") as files:
        t = files.targets["ssd0"]
        slow = {"ssd0": dataclasses.replace(t, limits=Limits(read_iops=2000))}  # 200 pads
        rec = fioreplay.FioReplayer(plan, slow, qd=8).run()
    assert rec.stats["fio_ceiling_iops"] == {} and rec.stats["lead_in_pads"] == {"ssd0": 200}
