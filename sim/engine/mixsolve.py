"""Re-solving a flow mix the network has not seen: components and rates memoised by path.

:class:`sim.engine.flownet.FlowNetwork` memoises allocations per mix of flow
signatures, a signature being a (path, cap) pair.  Offloading workloads give
nearly every op its own cap (the queue-depth bound of its I/O sizes), so a mix
of the same paths in the same order comes back under new signatures and misses
that memo.  This module keeps what depends on the paths alone:

* a component's max-min rates with every cap taken as infinite, per tuple of
  its *path signatures* (a path interned as a small integer; a flow with no
  resource has none, ``-1``).  Such rates are those of the real caps, bit for bit,
  whenever each flow's cap exceeds ``rate x (1 + _REL)``: progressive filling
  compares a flow's cap only with levels up to the one it freezes at (its rate)
  and with that level times ``1 + _REL``, and it takes ``min(level, cap)``; a
  cap above all of them wins no comparison, so every round runs the same float
  operations as without it.  When some cap is not above, the component is solved
  with its caps (:func:`sim.engine.maxmin.maxmin_rates`), as are components
  holding a flow with no resource (its cap is its only bound).  A component
  solved with caps that all lie above its rates so is remembered as cap-free
  (no cap won a comparison: the same rounds), so a miss costs one solve.

What is solved is the network's incremental rule
(:meth:`sim.engine.flownet.FlowNetwork._solve`, stated plainly in
tests/sim/test_maxmin.py): the components that a started or ended flow
touches (each alone, flows in mix order), or the whole mix when the changes
touch every resource.  tests/sim/test_mixsolve.py holds every answer to a
fresh :func:`sim.engine.maxmin.maxmin_rates` of the same flows, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine.maxmin import _REL, Path, maxmin_rates

__all__ = ["MixSolver"]

# distinct path mixes remembered before a memo is cleared
_MEMO_MAX = 65536


class MixSolver:
    """Max-min rates of a network's flow mixes, memoised by path where exact."""

    def __init__(self, capacity: Sequence[float]):
        self.capacity = capacity
        self._psigs: dict[tuple, int] = {}  # path -> path signature
        self._rates: dict[tuple[int, ...], list[float]] = {}

    def path_sig(self, path: Path) -> int:
        """The path signature of ``path`` (``-1`` for a flow with no resource)."""
        if not path:
            return -1
        p = tuple(path)
        got = self._psigs.get(p)
        if got is None:
            got = self._psigs[p] = len(self._psigs)
        return got

    def component(self, pkey: tuple[int, ...], paths: list[Path], caps: list[float]) -> list[float]:
        """:func:`maxmin_rates` of one set of flows (in order), from the cap-free
        memo when every cap is above its flow's cap-free rate x (1 + _REL).  A
        solve whose caps all are above its rates so is the cap-free solve (no cap
        won a comparison), hence remembered as such."""
        if -1 in pkey:
            return maxmin_rates(paths, caps, self.capacity)
        free = self._rates.get(pkey)
        if free is not None and _caps_above(caps, free):
            return free[:]
        rates = maxmin_rates(paths, caps, self.capacity)
        if free is None and _caps_above(caps, rates):
            if len(self._rates) >= _MEMO_MAX:
                self._rates.clear()
            self._rates[pkey] = rates[:]
        return rates


def _caps_above(caps: list[float], rates: list[float]) -> bool:
    """Whether every cap is above its flow's rate x (1 + _REL): then no cap
    wins a comparison of progressive filling at these rates."""
    return all(cap > rate * (1 + _REL) for cap, rate in zip(caps, rates, strict=True))
