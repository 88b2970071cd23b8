"""A request's blocked I/O: its load time that no GPU computation overlaps
(``sim.serving.metrics.blocked_io``), worked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from sim.serving.metrics import blocked_io, blocked_io_by_instance, uncovered


def test_uncovered_time_by_hand() -> None:
    # loads [0, 4) and [3, 6): their union [0, 6), 6 s; computations [1, 2), [5, 7) and
    # [5.5, 6.5): their union [1, 2) and [5, 7), covering 1 + 1 s of [0, 6)
    ls, le = np.array([0.0, 3.0]), np.array([4.0, 6.0])
    cs, ce = np.array([5.5, 1.0, 5.0]), np.array([6.5, 2.0, 7.0])
    assert uncovered(ls, le, cs, ce) == 4.0
    assert uncovered(ls, le, cs[:0], ce[:0]) == 6.0  # nothing computes: all of it blocks
    assert uncovered(np.array([1.2]), np.array([1.8]), cs, ce) == 0.0  # inside a computation


def test_blocked_io_per_request_by_hand() -> None:
    """Two requests' loads (``step``: the request id, as the engine writes them)
    against one run's computations: request 7 loads over [0, 3) while [1, 2)
    computes (2 s blocked); request 9 over [2.5, 4) and [4, 5) while [3, 4.5)
    computes (1 s blocked: [2.5, 3) and [4.5, 5))."""
    ops = pa.table({
        "kind": ["compute", "h2d", "compute", "h2d", "h2d"],
        "tag": ["iteration", "load", "iteration", "load", "load"],
        "step": [0, 7, 1, 9, 9],
        "start_s": [1.0, 0.0, 3.0, 2.5, 4.0],
        "end_s": [2.0, 3.0, 4.5, 4.0, 5.0],
    })  # fmt: skip
    assert blocked_io(ops) == {7: 2.0, 9: 1.0}


def test_a_runs_blocked_io_is_each_instances_own_by_hand() -> None:
    """Two instances' ops, joined instance after instance (``parts``: 3 and 2
    ops).  Instance 0 loads over [0, 3) while it computes [1, 2): 2 s blocked;
    instance 1 computes [0, 4) and loads over [2, 5): 1 s blocked.  Counted as
    one instance, instance 1's computation would cover instance 0's load (0.5 s:
    [0, 5) less [0, 4) and [1, 2))."""
    ops = pd.DataFrame({
        "kind": ["compute", "h2d", "compute", "compute", "h2d"],
        "tag": ["iteration", "load", "iteration", "iteration", "load"],
        "start_s": [1.0, 0.0, 3.5, 0.0, 2.0],
        "end_s": [2.0, 3.0, 3.6, 4.0, 5.0],
    })  # fmt: skip
    assert blocked_io_by_instance(ops, (3, 2)) == 3.0
    assert blocked_io_by_instance(ops, ()) == 1.0  # one instance: [4, 5)
    assert blocked_io_by_instance(ops.iloc[:3], ()) == 2.0
    assert blocked_io_by_instance(ops.iloc[3:], ()) == 1.0


def test_blocked_io_is_never_below_zero() -> None:
    """Two loads inside one computation, at the instants a fleet run had them (a
    computation from 46.66 s to 650.54 s, 46.61 s computed before it): no time is
    blocked.  The covered time is read off running sums of hundreds of seconds, and
    their round-off put the uncovered time at -1.1e-13 s (the whole conversation
    trace's summary, -1.6e-12 s)."""
    cs, ce = np.array([0.0, 46.66309481065157]), np.array([46.60621170679278, 650.5396638254279])
    ls = np.array([264.9486645671918, 355.58705125552206])
    le = np.array([264.95955886329574, 355.69296802319883])
    assert uncovered(ls, le, cs, ce) == 0.0
