""":meth:`sim.serving.execute.online.OnlineOps.compute` is ``submit("compute", ...)``.

Three GPU compute ops in a chain, once by ``compute`` and once by ``submit``
on fresh machines: the same plan rows (dependencies sorted and distinct) and
the same start and end times, bit for bit; each op lasts the machine's
roofline time for its FLOPs and HBM bytes (``gpu_seconds``), one after another.
"""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.hw.machine import Machine
from sim.serving.execute.online import OnlineOps

SPECS = [(2e12, 1e9, [], 0, -1), (5e11, 4e10, [0, 0], 1, 3), (1e12, 0.0, [1, 0], 1, 4)]


def _chain(lean: bool) -> tuple[OnlineOps, Machine]:
    profile = load_profile("h100-2dimm-2ssd")
    m = Machine(profile)
    ops = OnlineOps(m)
    gpu = profile.gpu_names[0]

    def proc():
        for flops, hbm, deps, step, layer in SPECS:
            if lean:
                _, ev = ops.compute(gpu, flops, hbm, deps, step, layer, "iteration")
            else:
                _, ev = ops.submit(
                    "compute", "", gpu, flops=flops, hbm_bytes=hbm,
                    depends_on=deps, step=step, layer=layer, tag="iteration",
                )  # fmt: skip
            yield ev

    m.env.process(proc())
    m.env.run()
    return ops, m


def test_compute_equals_submit() -> None:
    (lean, m), (ref, _) = _chain(True), _chain(False)
    assert lean.plan().equals(ref.plan())
    assert list(lean.start_s) == list(ref.start_s) and list(lean.end_s) == list(ref.end_s)
    assert lean.plan().column("depends_on").to_pylist() == [[], [0], [0, 1]]
    gpu = lean.plan().column("dst").to_pylist()[0]
    for k, (flops, hbm, *_) in enumerate(SPECS):
        assert lean.end_s[k] - lean.start_s[k] == pytest.approx(m.gpu_seconds(gpu, flops, hbm))
        if k:
            assert lean.start_s[k] == lean.end_s[k - 1]  # each after the one it waited for
