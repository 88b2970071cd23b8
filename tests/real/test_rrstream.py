"""The laid-out round robin (real/_rrstream.py) against the one-at-a-time loop."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from real._rrstream import RoundRobin


def one_at_a_time(first, n_ios, events):
    """The simulator's turn order, I/O by I/O (the replayer's original loop)."""
    active, nxt, out, closed = deque(), [0] * len(n_ios), [], []
    for what, x in events:
        if what == "start":
            active.append(x)
            continue
        issued, count = [], 0
        while count < x and active:
            j = active[0]
            issued.append(first[j] + nxt[j])
            nxt[j] += 1
            count += 1
            if nxt[j] == n_ios[j]:
                active.popleft()
                closed.append(j)
            else:
                active.rotate(-1)
        out.append((issued, sorted(closed)))
    return out


def laid_out(first, n_ios, events, qd=10**6):
    dev = SimpleNamespace(active=deque(), qd=qd)
    got: list[int] = []
    io = SimpleNamespace(
        devs=[dev],
        next_io=[0] * len(n_ios),
        n_ios=list(n_ios),
        first=list(first),
        op_cap=[qd] * len(n_ios),
        io_off=np.arange(first[-1]) * 4096,
        io_len=np.full(first[-1], 4096),
        closing=[[]],
        _queue=lambda k, d, idx, offs, lens: got.extend(idx.tolist()),
    )
    rr, out = RoundRobin(io, 0), []
    for what, x in events:
        if what == "start":
            dev.active.append(x)
            continue
        got.clear()
        n = rr.issue(x)
        assert n == len(got)
        out.append((list(got), sorted(io.closing[0])))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_laid_out_turns_equal_the_one_at_a_time_loop(seed):
    """Random ops (1-30 I/Os), random start times and round sizes: the same I/Os in the
    same order, and each op closing in the round its last I/O was issued."""
    rng = np.random.default_rng(seed)
    n_ops = int(rng.integers(1, 12))
    n_ios = rng.integers(1, 30, n_ops).tolist()
    first = np.concatenate([[0], np.cumsum(n_ios)]).tolist()
    events, pending = [], list(range(n_ops))
    while pending or len(events) < 3 * n_ops:
        if pending and rng.random() < 0.4:
            events.append(("start", pending.pop(0)))
        else:
            events.append(("issue", int(rng.integers(1, 40))))
        if len(events) > 400:
            break
    events += [("issue", 1000)]
    assert laid_out(first, n_ios, events) == one_at_a_time(first, n_ios, events)


def test_by_hand_three_ops_turns_continue_across_rounds():
    """Ops a, b, c of 3, 1 and 2 I/Os (I/Os 0-2, 3, 4-5), rounds of 2: a0 b0 | c0 a1 |
    c1 a2 -- b runs out in round 1, so c is next, and the turn carries over the
    round boundary; b closes in round 1, a and c in round 3."""
    first, n_ios = [0, 3, 4, 6], [3, 1, 2]
    events = [("start", 0), ("start", 1), ("start", 2)] + [("issue", 2)] * 3
    assert laid_out(first, n_ios, events) == [([0, 3], [1]), ([4, 1], [1]), ([5, 2], [0, 1, 2])]


def test_a_capped_op_hands_the_device_to_the_general_path():
    dev_first, n_ios = [0, 5], [5]
    dev = SimpleNamespace(active=deque([0]), qd=8)
    io = SimpleNamespace(
        devs=[dev],
        next_io=[0],
        n_ios=n_ios,
        first=dev_first,
        op_cap=[2],
        io_off=np.zeros(5),
        io_len=np.zeros(5),
        closing=[[]],
        _queue=None,
    )
    assert RoundRobin(io, 0).issue(8) == -1
