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


def test_a_measured_op_lasts_its_gpu_s_online_and_in_the_replayed_plan() -> None:
    """An op given ``gpu_s`` lasts exactly that, not its roofline (here 2e12
    FLOPs would take 2e12 / (756e12 x 0.75) = 3.53 ms); its plan row carries
    the seconds, so the open-loop replay gives it the same end."""
    from sim.executor import simulate

    profile = load_profile("h100-2dimm-2ssd")
    m = Machine(profile)
    ops = OnlineOps(m)
    gpu = profile.gpu_names[0]

    def proc():
        _, ev = ops.compute(gpu, 2e12, 1e9, [], 0, -1, "iteration", gpu_s=0.0125)
        yield ev
        _, ev = ops.compute(gpu, 2e12, 1e9, [0], 1, -1, "iteration")  # the roofline
        yield ev

    m.env.process(proc())
    m.env.run()
    roof = 2e12 / (756e12 * 0.75)
    assert list(ops.end_s) == pytest.approx([0.0125, 0.0125 + roof], rel=1e-12)
    plan = ops.plan()
    assert plan.column("gpu_s").to_pylist() == [0.0125, 0.0]
    again = simulate(plan, profile).ops.column("end_s").to_pylist()
    assert again == pytest.approx(list(ops.end_s), rel=1e-12)


def _order_around_the_end(other_at_end: bool) -> tuple[list[str], OnlineOps, Machine]:
    """A process waits on a 25 ms GPU op (its ``gpu_s``); another process's
    timeout falls at the op's end instant (or 1 s later): the log of who ran."""
    profile = load_profile("h100-2dimm-2ssd")
    m = Machine(profile)
    ops = OnlineOps(m)
    gpu = profile.gpu_names[0]
    log: list[str] = []

    def waiter():
        op, ev = ops.compute(gpu, 1e12, 1e9, [], 0, -1, "iteration", gpu_s=0.025)
        got = yield ev
        log.append(f"op {got} ended at {m.env.now}")

    def other():
        yield m.env.timeout(0.025 if other_at_end else 1.0)
        log.append(f"other at {m.env.now}")

    m.env.process(waiter())
    m.env.process(other())
    m.env.run()
    return log, ops, m


def test_a_gpu_op_ending_alone_resumes_its_process_where_its_event_would() -> None:
    """The op runs alone on its GPU: its end is its flow's one event, and the
    waiting process resumes at the op's end time (0 + 0.025), after every event
    already due at that instant (the other process's timeout, scheduled before
    the op's end), as a scheduled end event would; alone, it resumes at once."""
    log, ops, m = _order_around_the_end(True)
    assert log == ["other at 0.025", "op 0 ended at 0.025"]
    assert list(ops.end_s) == [0.025]
    log, ops, m = _order_around_the_end(False)
    assert log == ["op 0 ended at 0.025", "other at 1.0"]
    assert m.gpu_net.reratings == 0 and m.gpu_net.completed == 1
    assert m.gpu_net.busy_s[0] == 0.025
