"""A request's blocked I/O: its load time that no GPU computation overlaps
(``sim.serving.metrics.blocked_io``), worked by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sim.serving.metrics import blocked_io, uncovered


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
