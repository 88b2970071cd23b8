"""A pool tier's room checks as positions among exact float thresholds.

Every room check of pool placement (:mod:`sim.serving.tiers.poolplace`,
:mod:`sim.serving.tiers.pooldrop`, :func:`sim.serving.tiers.tierplace.spill_layout`)
compares, per device, the used bytes ``u`` through one of two float
expressions:

* *fits* ``x`` more bytes: ``(u + x) - c <= SLACK`` (``c`` the capacity);
* *has a layer of room*: ``c - u >= layer_bytes``.

Rounding is monotone, so ``(u + x) - c`` never decreases and ``c - u``
never increases as ``u`` grows: each check holds exactly for ``u`` up to
a threshold ``T`` (the largest float for which the expression, evaluated
as written, holds), found once by bisection over the floats' order with the
very expression.  For the finitely many ``x`` a tier meets (each layout's
bytes on the device, Algorithm 1's layouts over every mask of devices), a
device's thresholds sorted give its *state* ``p = bisect_left(T, u)``;
``u <= T_j`` exactly when ``j >= p``.  So a check is a comparison of two
small integers, and a spill decision (:func:`spill_layout`'s tries, every
comparison one of these) is a function of the devices' states: computed
once per state tuple, by the plain per-key code itself, and remembered.

A layout not seen before adds its thresholds (the memo is rebuilt), and
so does a change of the tier's capacities (a peer tier lent more or less).
``tests/sim/test_serving_pooldrop.py`` checks the thresholds against the
expressions on random used bytes, and every placement against the per-key
reference.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import product
from operator import ge
from typing import Any
from weakref import WeakKeyDictionary, proxy

from sim.serving.tiers.tier import Tier

Runs = tuple[tuple[int, int, int], ...]
HI = 1e300  # bisection range [-HI, HI]: beyond any byte count
SIGN = 1 << 63


def _key(x: float) -> int:
    """An integer in the order of the floats (-0.0 and 0.0 alike)."""
    i = struct.unpack("<q", struct.pack("<d", x))[0]
    return i if i >= 0 else -(i & (SIGN - 1))


def _float(k: int) -> float:
    """The float of :func:`_key` ``k``."""
    bits = k if k >= 0 else (-k) | SIGN
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def last_true(pred: Callable[[float], bool]) -> float:
    """The largest float ``u`` in ``[-HI, HI]`` with ``pred(u)``, for ``pred``
    true up to some ``u`` and false above it; ``-inf`` when false throughout."""
    lo, hi = _key(-HI), _key(HI)
    if not pred(-HI):
        return float("-inf")
    if pred(HI):
        return HI
    while hi - lo > 1:  # pred(lo) true, pred(hi) false
        mid = (lo + hi) // 2
        if pred(_float(mid)):
            lo = mid
        else:
            hi = mid
    return _float(lo)


class RoomIndex:
    """Per device of a pool tier, the sorted thresholds of its room checks."""

    def __init__(self, tier: Tier, slack: float):
        # a proxy: the index is the value of a weak map keyed by the tier, so it
        # must not keep the tier alive (a sweep builds many)
        self.tier, self.slack = proxy(tier), slack
        self.caps = list(tier.capacity)  # the thresholds' capacities (a peer tier resizes)
        self.xs: list[set[float]] = [set() for _ in tier.capacity]  # bytes checked, per device
        for room in product((False, True), repeat=len(tier.capacity)):
            if True in room:
                self.xs_add(tier.runs_over(room)[1])
        self._build()

    def xs_add(self, need: Sequence[float]) -> bool:
        """Add a layout's bytes; whether any was new."""
        new = False
        for d, x in enumerate(need):
            if x not in self.xs[d]:
                self.xs[d].add(x)
                new = True
        return new

    def _build(self) -> None:
        t, s, lb = self.tier, self.slack, self.tier.layer_bytes
        self.th: list[list[float]] = []
        self.fit: list[dict[float, int]] = []  # per device: x -> index of its fit threshold
        self.room: list[int] = []  # per device: index of the room threshold
        for d, c in enumerate(t.capacity):
            fit = {x: last_true(lambda u, x=x, c=c: u + x - c <= s) for x in self.xs[d]}
            room = last_true(lambda u, c=c: c - u >= lb)
            th = sorted(set(fit.values()) | {room})
            self.th.append(th)
            self.fit.append({x: bisect_left(th, v) for x, v in fit.items()})
            self.room.append(bisect_left(th, room))
        self.idx: dict[Runs, tuple[int, ...]] = {}
        self.spills: dict[tuple[int, ...], Runs | None] = {}

    def state(self, used: Sequence[float]) -> tuple[int, ...]:
        """Each device's position among its thresholds at ``used``."""
        return tuple(map(bisect_left, self.th, used))

    def fit_index(self, runs: Runs) -> tuple[int, ...]:
        """Per device, the index of the threshold of ``runs``' bytes there."""
        out = self.idx.get(runs)
        if out is None:
            need = self.tier.bytes_on(runs)
            if self.xs_add(need):
                self._build()
            out = self.idx[runs] = tuple([f[x] for f, x in zip(self.fit, need, strict=True)])
        return out

    def fits(self, runs: Runs, used: Sequence[float]) -> bool:
        """``(u + x) - c <= SLACK`` on every device, ``x``: ``runs``' bytes
        (the state taken after indexing ``runs``: a new layout rebuilds)."""
        idx = self.fit_index(runs)
        return all(map(ge, idx, map(bisect_left, self.th, used)))

    def spill(self, used: list[float]) -> Runs | None:
        """:func:`plain_spill` at ``used``: remembered per state."""
        p = self.state(used)
        try:
            return self.spills[p]
        except KeyError:
            out = self.spills[p] = plain_spill(self.tier, used, self.slack)
            return out


def plain_spill(tier: Tier, used: list[float], slack: float) -> Runs | None:
    """The spill of a key that does not fit as laid out, the tier holding
    ``used`` bytes per device: Algorithm 1 over the devices with a layer of
    room, narrowed to those not short while it does not fit; None when no
    such layout fits (room must be made)."""
    caps, lb, alts = tier.capacity, tier.layer_bytes, tier._alt
    room = tuple([c - u >= lb for u, c in zip(used, caps, strict=True)])
    fits = slack.__ge__  # s <= slack
    while True in room:
        got = alts.get(room)  # tier.runs_over(room), memoised there
        alt, need = got if got is not None else tier.runs_over(room)
        short = [u + x - c for u, x, c in zip(used, need, caps, strict=True)]
        if all(map(fits, short)):
            return alt
        room = tuple([ok and s <= slack for ok, s in zip(room, short, strict=True)])
    return None


_INDEX: WeakKeyDictionary[Any, RoomIndex] = WeakKeyDictionary()


def room_index(tier: Tier, slack: float) -> RoomIndex:
    """The tier's :class:`RoomIndex` (made on first use, and anew when the
    tier's capacities changed: an elastic peer tier is resized)."""
    out = _INDEX.get(tier)
    if out is None or out.caps != tier.capacity:
        out = _INDEX[tier] = RoomIndex(tier, slack)
    return out
