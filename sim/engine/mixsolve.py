"""Re-solving a flow mix the network has not seen: components and rates memoised by path.

:class:`sim.engine.flownet.FlowNetwork` memoises allocations per mix of flow
signatures, a signature being a (path, cap) pair.  Offloading workloads give
nearly every op its own cap (the queue-depth bound of its I/O sizes), so a mix
of the same paths in the same order comes back under new signatures and misses
that memo.  This module keeps what depends on the paths alone:

* a mix's connected components (:func:`sim.engine.maxmin.components` reads
  only the paths), per tuple of *path signatures* (a path interned as a small
  integer; a flow with no resource has none, ``-1``);
* a component's max-min rates with every cap taken as infinite, per tuple of
  its path signatures.  Such rates are those of the real caps, bit for bit,
  whenever each flow's cap exceeds ``rate x (1 + _REL)``: progressive filling
  compares a flow's cap only with levels up to the one it freezes at (its rate)
  and with that level times ``1 + _REL``, and it takes ``min(level, cap)``; a
  cap above all of them wins no comparison, so every round runs the same float
  operations as without it.  When some cap is not above, the component is solved
  with its caps (:func:`sim.engine.maxmin.maxmin_rates`), as are components
  holding a flow with no resource (its cap is its only bound).  A component
  solved with caps that all lie above its rates so is remembered as cap-free
  (no cap won a comparison: the same rounds), so a miss costs one solve.

What is solved, and how, is the incremental rule (stated plainly in
tests/sim/test_maxmin.py): the components that a started or ended flow touches (each alone,
flows in mix order), or the whole mix when the changes touch every resource.
tests/sim/test_mixsolve.py holds every answer to a fresh
:func:`sim.engine.maxmin.maxmin_rates` of the same flows, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine.maxmin import _REL, Path, components, maxmin_rates

__all__ = ["MixSolver"]

# distinct path mixes remembered before a memo is cleared
_MEMO_MAX = 65536


class MixSolver:
    """Max-min rates of a network's flow mixes, memoised by path where exact."""

    def __init__(self, capacity: Sequence[float]):
        self.capacity = capacity
        self._psigs: dict[tuple, int] = {}  # path -> path signature
        self._comps: dict[tuple[int, ...], list[list[int]]] = {}
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

    def solve(
        self,
        pkey: tuple[int, ...],
        fpaths: list[Path],
        fcaps: list[float],
        old: Sequence[float],
        touched: set[int],
    ) -> list[float]:
        """Rates of flows ``fpaths``/``fcaps`` (path signatures ``pkey``) after
        flows over the ``touched`` resources started or ended; ``old`` holds the
        rates before (kept by components nothing touched)."""
        if len(touched) >= len(self.capacity):
            return self._component(pkey, fpaths, fcaps)
        comps = self._comps.get(pkey)
        if comps is None:
            comps = components(fpaths)
            if len(self._comps) >= _MEMO_MAX:
                self._comps.clear()
            self._comps[pkey] = comps
        if len(comps) == 1:  # one component, re-solved if a change touches it
            if any(not p or any(r in touched for r, _ in p) for p in fpaths):
                return self._component(pkey, fpaths, fcaps)
            return list(old)
        out = list(old)
        for comp in comps:
            if any(not fpaths[i] or any(r in touched for r, _ in fpaths[i]) for i in comp):
                sub = self._component(
                    tuple(pkey[i] for i in comp),
                    [fpaths[i] for i in comp],
                    [fcaps[i] for i in comp],
                )
                for i, rate in zip(comp, sub, strict=True):
                    out[i] = rate
        return out

    def _component(
        self, pkey: tuple[int, ...], paths: list[Path], caps: list[float]
    ) -> list[float]:
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
