"""A store's demotion job: its victims' pieces between the same two devices as one piece."""

from __future__ import annotations

import numpy as np

from sim.serving.policy.demotions import demotion_transfers
from sim.serving.policy.piece import Piece


def _piece(src: str, dst: str, offsets: list[int], length: int = 4096, layer: int = -1) -> Piece:
    ext = np.array([[o, length] for o in offsets], dtype=np.int64)
    return Piece(src, dst, float(length * len(offsets)), layer, ext, length)


def test_victims_of_one_route_are_one_piece_ranges_in_victim_order() -> None:
    cpu, ssd, other = object(), object(), object()  # tiers: only their identity matters
    a, b, c = object(), object(), object()  # the victims' new entries below
    decided = [
        (cpu, ssd, [a], [_piece("cpu0", "ssd0", [0, 8192])]),
        (cpu, ssd, [b], [_piece("cpu0", "ssd0", [16384]), _piece("cpu0", "ssd1", [0])]),
        (cpu, other, [c], [_piece("cpu0", "ssd2", [4096])]),
    ]
    jobs = demotion_transfers(decided)  # type: ignore[arg-type]
    assert [(j.src, j.dst) for j in jobs] == [(cpu, ssd), (cpu, other)]
    first = jobs[0]
    assert first.tag == "demote" and first.rid == -1 and first.entries == [a, b]
    # ssd0: 2 + 1 ranges of 4 KiB = 12,288 B, in victim order; ssd1: a's one range
    assert [(p.src, p.dst, p.ranges, p.nbytes) for p in first.pieces] == [
        ("cpu0", "ssd0", 3, 12288.0),
        ("cpu0", "ssd1", 1, 4096.0),
    ]
    assert first.pieces[0].extents[:, 0].tolist() == [0, 8192, 16384]
    assert first.pieces[0].length == 4096
    assert first.nbytes == sum(p.nbytes for _t, _b, _e, ps in decided[:2] for p in ps)
    assert [len(j.pieces) for j in jobs] == [2, 1]


def test_layers_stay_apart() -> None:
    cpu, ssd = object(), object()
    decided = [
        (
            cpu,
            ssd,
            [object()],
            [_piece("cpu0", "ssd0", [0], layer=0), _piece("cpu0", "ssd0", [64], layer=1)],
        ),
        (cpu, ssd, [object()], [_piece("cpu0", "ssd0", [128], layer=0)]),
    ]
    (job,) = demotion_transfers(decided)  # type: ignore[arg-type]
    assert [(p.layer, p.extents[:, 0].tolist()) for p in job.pieces] == [(0, [0, 128]), (1, [64])]
