"""The replayer issues exactly the plan's ranges; its counts equal the simulator's.

Three independent counts per SSD must agree: what the simulator's flows moved,
what the replay read and verified, and the sums over the plan's I/Os
(:func:`kvtier.contracts.plan.io_extents`).  Data files cover exactly the ranges read.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import BLOCK, PlanBuilder, io_extents
from real.datafile import io_layout, prepare_targets
from real.errors import RealError
from real.replay import replay
from sim.config import SwarmParams
from sim.executor import simulate
from sim.scenarios.swarm import plan_swarm

TINY = SwarmParams(
    context_tokens=2048,
    batch=2,
    steps=2,
    profile_steps=64,
    layers=2,
    local_window=32,
    dram_cache=0.05,
    ssds=4,
)


def per_ssd(table) -> dict[str, tuple[int, int, int]]:
    return {
        r["device"]: (r["bytes_read"], r["bytes_written"], r["n_ios"])
        for r in table.to_pylist()
        if r["type"] == "ssd" and r["n_ios"]
    }


def plan_sums(plan) -> dict[str, tuple[int, int, int]]:
    """Per SSD: (bytes read, bytes written, I/Os) summed over the plan's I/Os."""
    ios = io_extents(plan)
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)[ios.op]
    dev = np.where(
        kind == "read",
        np.asarray(plan.column("src").to_pylist(), dtype=object)[ios.op],
        np.asarray(plan.column("dst").to_pylist(), dtype=object)[ios.op],
    )
    out = {}
    for d in sorted(set(dev.tolist())):
        mine = dev == d
        r = int(ios.length[mine & (kind == "read")].sum())
        w = int(ios.length[mine & (kind == "write")].sum())
        out[d] = (r, w, int(mine.sum()))
    return out


@pytest.mark.parametrize("design", ["swarm", "nocluster", "infllm", "pqcache"])
def test_replayed_design_plan_moves_what_the_simulator_moved(direct_dir, design):
    p = dataclasses.replace(TINY, design=design)
    profile = load_profile("h20-8ssd")
    plan = plan_swarm(p, profile, seed=0).plan
    simulated = per_ssd(simulate(plan, profile).devices)
    with prepare_targets(plan, direct_dir / "t", seed=3) as files:
        rec = replay(plan, files, engine="threads")
        sizes = {n: os.path.getsize(t.path) for n, t in files.targets.items()}
    replayed = per_ssd(rec.devices)
    assert rec.stats["verified"] is True
    assert replayed == simulated == plan_sums(plan)
    # the files cover exactly the furthest byte read on each SSD
    ios = io_extents(plan)
    src = np.asarray(plan.column("src").to_pylist(), dtype=object)[ios.op]
    for node, size in sizes.items():
        assert size == int((ios.offset + ios.length)[src == node].max())


def test_scattered_extents_are_issued_as_given(direct_dir):
    b = PlanBuilder()
    ext = np.array([[40 * BLOCK, 2 * BLOCK], [0, BLOCK], [7 * BLOCK, 3 * BLOCK]], np.int64)
    b.read("ssd0", "dram0", extents=ext, io_path="io_uring")
    plan = b.table()
    layout = io_layout(plan)
    assert layout.offset.tolist() == ext[:, 0].tolist()  # submission order, not sorted
    assert layout.length.tolist() == ext[:, 1].tolist()  # never merged or re-split
    assert layout.extents() == {"ssd0": 42 * BLOCK}
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="threads")
    assert per_ssd(rec.devices) == {"ssd0": (6 * BLOCK, 0, 3)}


def test_an_unaligned_extent_is_refused_naming_the_op_and_the_extent():
    b = PlanBuilder()
    b.read("ssd0", "dram0", BLOCK, 1, io_path="io_uring")
    b.read("ssd1", "dram0", extents=np.array([[0, BLOCK], [BLOCK, 3000]]), io_path="io_uring")
    want = r"^op 1: read extent 1 of ssd1 \(offset 4096, length 3000\) is not made of whole"
    with pytest.raises(RealError, match=want):
        io_layout(b.table())


def test_an_op_after_a_zero_second_root_starts_once(direct_dir):
    # the compute root takes 0 s (no modelled durations) and readies the read at once;
    # the read must still be issued once: 2 I/Os, 2 blocks
    b = PlanBuilder()
    c = b.compute("gpu0", 1e9, 0.0)
    b.read("ssd0", "dram0", 2 * BLOCK, 2, depends_on=[c], io_path="io_uring")
    plan = b.table()
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine="threads")
    assert per_ssd(rec.devices) == {"ssd0": (2 * BLOCK, 0, 2)}


@pytest.mark.parametrize("engine", ["python", "uring"])
@pytest.mark.parametrize("victim_block", [0, 1, 2])
def test_a_bad_block_anywhere_in_a_few_block_read_is_named(direct_dir, engine, victim_block):
    """Reads of 1, 2, 3 and 4 blocks side by side (checked as one batch of rows, the
    few-block reads expanded block by block): one flipped payload byte in block
    ``victim_block`` of the 3-block read at block 40 fails the run naming exactly that
    block's offset, (40 + victim_block) x 4 KiB; undamaged, every read verifies."""
    ext = np.array([[0, BLOCK], [8 * BLOCK, 2 * BLOCK], [40 * BLOCK, 3 * BLOCK]], np.int64)
    ext = np.concatenate([ext, [[64 * BLOCK, 4 * BLOCK], [80 * BLOCK, 2 * BLOCK]]])
    b = PlanBuilder()
    b.read("ssd0", "dram0", extents=ext, queue_depth=8)
    plan = b.table()
    victim = (40 + victim_block) * BLOCK
    with prepare_targets(plan, direct_dir / "t") as files:
        rec = replay(plan, files, engine=engine)
        assert rec.devices.to_pylist()[0]["n_ios"] == 5
        fd = os.open(files.targets["ssd0"].path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([os.pread(fd, 1, victim + 2000)[0] ^ 0x10]), victim + 2000)
        finally:
            os.close(fd)
        with pytest.raises(RealError, match=rf"ssd0: data mismatch .* at offset {victim}:"):
            replay(plan, files, engine=engine)
