"""LMCache's per-object CPU work runs on the host's cores (``OnlineOps.cpu_work``):
it shares them by max-min with other CPU work and with the I/O paths' CPU flows,
on at most the design's ``object_threads`` (1: LMCache's one retrieval loop).

By hand on the tiny machine:

* 1 core, two pieces of work of 0.5 and 1.0 core-seconds from t = 0: each runs at
  half a core, the first ends at 1.0 s; the second has 0.5 left, alone on the
  core, and ends at 1.5 s.
* 4 cores: 1.0 core-second on 2 threads takes 0.5 s, on 1 thread 1.0 s.
* 1 core, a kernel_fs read of 1,000 4 KiB I/Os (CPU 1,000 x (5 + 2) us = 7 ms,
  its data ~1 ms) beside 7 ms of object work: the two CPU flows share the core
  and both end at 14 ms, so the object work slows the read twofold.
"""

from __future__ import annotations

import pytest

from sim.hw.machine import Machine
from sim.serving.designs import DesignParams, ParamError
from sim.serving.execute.online import OnlineOps


def _ends(profile, works, read: bool = False) -> tuple[list[float], float]:
    m = Machine(profile)
    ops = OnlineOps(m, keep_plan=False)
    ends: list[float] = []
    read_end: list[float] = []

    def one(core_s: float, threads: int):
        yield ops.cpu_work(core_s, threads)
        ends.append(m.env.now)

    def io():
        _, ev = ops.submit(
            "read", "ssd0", "dram0", nbytes=1000 * 4096, n_ios=1000, io_path="kernel_fs"
        )
        yield ev
        read_end.append(m.env.now)

    for core_s, threads in works:
        m.env.process(one(core_s, threads))
    if read:
        m.env.process(io())
    m.env.run()
    return ends, read_end[0] if read_end else 0.0


def test_two_pieces_of_work_share_one_core_by_hand(make_profile) -> None:
    ends, _ = _ends(make_profile(cores=1), [(0.5, 1), (1.0, 1)])
    assert ends == pytest.approx([1.0, 1.5], rel=1e-12)


def test_its_threads_cap_its_cores_by_hand(make_profile) -> None:
    assert _ends(make_profile(cores=4), [(1.0, 2)])[0] == pytest.approx([0.5], rel=1e-12)
    assert _ends(make_profile(cores=4), [(1.0, 1)])[0] == pytest.approx([1.0], rel=1e-12)
    # never more threads than the profile has cores
    assert _ends(make_profile(cores=2), [(1.0, 8)])[0] == pytest.approx([0.5], rel=1e-12)


def test_object_work_slows_the_kernel_path_on_the_same_core(make_profile) -> None:
    alone, read_alone = _ends(make_profile(cores=1), [], read=True)
    assert read_alone == pytest.approx(0.007, rel=1e-9)  # CPU-bound: 1,000 x 7 us
    ends, read_end = _ends(make_profile(cores=1), [(0.007, 1)], read=True)
    assert ends == pytest.approx([0.014], rel=1e-9) and read_end == pytest.approx(0.014, rel=1e-9)


def test_object_threads_must_be_positive() -> None:
    with pytest.raises(ParamError):
        DesignParams(object_threads=0)
