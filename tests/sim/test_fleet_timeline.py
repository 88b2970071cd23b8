"""The fleet's timeline (``sim.fleet.routed.fleet_timeline``): the instances'
counts summed at every change, worked by hand, and held to each instance's own
timeline."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sim.fleet.routed import fleet_timeline
from sim.serving.metrics import TIMELINE_SCHEMA


def _tl(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(cols, TIMELINE_SCHEMA, strict=True)],
        schema=TIMELINE_SCHEMA,
    )


def test_the_instances_counts_summed_at_every_change_by_hand() -> None:
    """Instance A: 1 waiting and 10 blocks at 0 s; at 2 s it runs what waited (12
    blocks).  Instance B: 2 waiting at 1 s; at 2 s one of them runs (6 blocks); at
    3 s the other (7 blocks), and at 4 s it is as it was (a row of no change in
    the sums: A's is the same too, so none).  The fleet: (1, 0, 0, 10) at 0 s,
    (3, 0, 0, 15) at 1 s, (1, 0, 2, 18) at 2 s (both instances' changes at that
    instant, one row), (0, 0, 3, 19) at 3 s."""
    a = _tl([(0.0, 1, 0, 0, 10), (2.0, 0, 0, 1, 12)])
    b = _tl([(1.0, 2, 0, 0, 5), (2.0, 1, 0, 1, 6), (3.0, 0, 0, 2, 7)])
    got = fleet_timeline([a, b]).to_pylist()
    want = [(0.0, 1, 0, 0, 10), (1.0, 3, 0, 0, 15), (2.0, 1, 0, 2, 18), (3.0, 0, 0, 3, 19)]
    assert [tuple(r.values()) for r in got] == want
    assert fleet_timeline([]) is None
    assert fleet_timeline([a.slice(0, 0), b]).equals(b)  # one instance's: its own


def test_at_every_instant_the_sums_are_the_instances_states() -> None:
    """Random step functions of three instances: at every instant any of them
    changes, the fleet's state (its last row at or before the instant) is each
    count summed over the instances' states (each read off alone), and no two
    consecutive rows of the fleet's are equal."""
    rng = np.random.default_rng(4)
    tls = []
    for _ in range(3):
        t = np.sort(rng.choice(np.arange(100) * 0.5, 60, replace=False))
        tls.append(_tl([(float(x), *map(int, rng.integers(0, 3, 4))) for x in t]))
    names = TIMELINE_SCHEMA.names[1:]
    fleet = fleet_timeline(tls).to_pydict()
    rows = list(zip(*[fleet[n] for n in names], strict=True))
    assert all(x != y for x, y in zip(rows, rows[1:], strict=False))

    def state(d: dict, now: float) -> list[int]:
        i = int(np.searchsorted(d["t_s"], now, side="right")) - 1
        return [d[n][i] if i >= 0 else 0 for n in names]

    alone = [tl.to_pydict() for tl in tls]
    for now in sorted({x for d in alone for x in d["t_s"]}):
        want = np.sum([state(d, now) for d in alone], axis=0).tolist()
        assert state(fleet, now) == want
