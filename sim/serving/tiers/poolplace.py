"""Placing an offload set in a pool tier (several devices) by runs of keys.

:meth:`sim.serving.tiers.blocks.OffloadTier.place` decides the keys of one set in
order, each seeing the room its predecessors took or made.  A key of a pool
is, in this order: placed as Algorithm 1 laid it out if that fits; else
*spilled*: laid out over the devices with room (a layer of room left) if
that fits (narrowing the devices while it does not); else room is made by
evicting LRU victims (:func:`sim.serving.tiers.tierplace.evict_key`; when they
are dropped, a run of such keys in one loop: :mod:`sim.serving.tiers.pooldrop`).

Most keys come in runs that one array computation decides:

* a **fit run**: keys that each fit as laid out.  Key ``k`` sees the used
  bytes ``U_k = U_i + P_i + ... + P_{k-1}`` (``P``: bytes per device of each
  key's layout), the very additions placing them one by one makes, in the
  same order: ``np.cumsum`` along the keys is that sequential sum, so every
  ``U_k`` is the same float.  The run ends at the first key with
  ``U_k + P_k - C > SLACK`` on some device.
* a **spill run**: keys that each do not fit as laid out while the devices
  with room, ``C - U_k >= layer``, stay the same set ``M`` and the spilled
  layout over ``M`` (bytes ``A``, the same for every key) fits at the first
  try: ``U_k = U_i + (k - i) A``, again one sequential ``cumsum``.  Each such
  key is exactly the per-key spill's first attempt; the run ends at the first
  key for which one of the three conditions fails, which goes on by itself.

A run is placed with one :meth:`OffloadTier.add` per layout (slots taken in
one call, stamps consecutive): what adding its keys one by one gives.
Keys that must evict (victims dropped) go to :func:`sim.serving.tiers.pooldrop.drop_run`
(demoted victims: :func:`~sim.serving.tiers.tierplace.evict_key` key by key), which
also places the spills between them; every spill check is remembered per
room state (:mod:`sim.serving.tiers.poolroom`).  The
arrays are looked at in windows that grow fourfold, so a set costs time in
proportion to its keys however its runs alternate.
``tests/sim/test_serving_tierplace.py`` checks the keys placed, victims, used
bytes, slots and LRU order against a per-key reference on random workloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import numpy as np

from sim.serving.tiers.entry import Entry
from sim.serving.tiers.placement import Runs
from sim.serving.tiers.pooldrop import drop_run
from sim.serving.tiers.tier import EvictFn, Tier
from sim.serving.tiers.tierplace import SLACK, evict_key, spill_layout

WINDOW = 16  # first window of keys looked at; each next one is four times larger


def place_pool(
    tier: Tier, new: Sequence[int], plans: Sequence[Runs], evict: EvictFn | None
) -> list[Entry]:
    """:meth:`OffloadTier.place` on a tier of several devices; ``plans`` are
    Algorithm 1's runs of each key (module docstring: fit runs, spill runs,
    and the per-key path for the others)."""
    placed: list[Entry] = []
    caps = np.asarray(tier.capacity, dtype=np.float64)
    need: np.ndarray | None = None  # (keys, devices) bytes, made once a run is long
    i, n = 0, len(new)
    known = (-1, None)  # (key index, its spill layout) found while looking ahead
    while i < n:
        if known[0] == i:  # key i does not fit as laid out: seen by the look-ahead
            j, alt = i, known[1]
        else:
            j, used = _fit_head(tier, plans, i)
            if j == i + WINDOW and j < n:
                need = _need_rows(tier, plans) if need is None else need
                j, u = _fit_run(np.asarray(used), need, j, caps)
                used = u.tolist()
            if j > i:  # keys i..j-1 fit as laid out: runs of equal layouts
                _add_fitting(tier, new, plans, i, j, placed)
                tier.used[:] = used
                i = j
                continue
            alt = spill_layout(tier, tier.used)
        if alt is None:  # room must be made
            if evict is None:  # victims dropped: this key and the next, fused
                i, spill = drop_run(tier, new, plans, i, placed)
                known = (i, spill) if spill is not None else (-1, None)
                continue
            evict_key(tier, new[i], plans[i], evict, placed)
            i += 1
            continue
        j, used, known = _spill_head(tier, plans, i, alt)
        if j == i + WINDOW and j < n:
            need = _need_rows(tier, plans) if need is None else need
            j, u = _spill_run(tier, np.asarray(used), need, j, caps, alt)
            used = u.tolist()
        placed += tier.add(new[i:j], alt, tier.bytes_on(alt))
        tier.used[:] = used
        i = j
    return placed


def _add_fitting(
    tier: Tier, new: Sequence[int], plans: Sequence[Runs], i: int, j: int, out: list[Entry]
) -> None:
    """Add keys ``i..j-1``, each as laid out: one ``add`` per run of equal layouts."""
    for runs, group in groupby(plans[i:j]):
        m = len(list(group))
        out += tier.add(new[i : i + m], runs, tier.bytes_on(runs))
        i += m


def _fit_head(tier: Tier, plans: Sequence[Runs], i: int) -> tuple[int, list[float]]:
    """Up to ``WINDOW`` keys from ``i`` on that fit as laid out, one by one
    (the first that does not; the used bytes after them)."""
    used, caps = list(tier.used), tier.capacity
    j, stop = i, min(len(plans), i + WINDOW)
    while j < stop:
        nxt = [u + x for u, x in zip(used, tier.bytes_on(plans[j]), strict=True)]
        if any(v - c > SLACK for v, c in zip(nxt, caps, strict=True)):
            break
        used, j = nxt, j + 1
    return j, used


def _spill_head(
    tier: Tier, plans: Sequence[Runs], i: int, alt: Runs
) -> tuple[int, list[float], tuple[int, Runs | None]]:
    """Key ``i`` spills as ``alt``: it and up to ``WINDOW - 1`` more keys that
    do not fit as laid out and spill as ``alt`` too, one by one.  Returns
    the first that does not, the used bytes after them, and (that key, its
    spill layout) when it stopped the run by spilling otherwise (else -1)."""
    used, caps = list(tier.used), tier.capacity
    a = tier.bytes_on(alt)
    j, stop = i, min(len(plans), i + WINDOW)
    while j < stop:
        if j > i:
            nxt = [u + x for u, x in zip(used, tier.bytes_on(plans[j]), strict=True)]
            if not any(v - c > SLACK for v, c in zip(nxt, caps, strict=True)):
                break  # fits as laid out
            other = spill_layout(tier, used)
            if other != alt:
                return j, used, (j, other)
        for d, x in enumerate(a):
            used[d] += x
        j += 1
    return j, used, (-1, None)


def _need_rows(tier: Tier, plans: Sequence[Runs]) -> np.ndarray:
    """(n, devices) bytes of each key's layout (few distinct layouts: one row each)."""
    index: dict[Runs, int] = {}
    rows = [index.setdefault(p, len(index)) for p in plans]
    table = np.array([tier.bytes_on(p) for p in index], dtype=np.float64)
    return table[np.asarray(rows, dtype=np.int64)]


def _fit_run(
    used: np.ndarray, need: np.ndarray, i: int, caps: np.ndarray
) -> tuple[int, np.ndarray]:
    """The keys from ``i`` on that fit as laid out, one after the other:
    (the first that does not, or ``len(need)``; the used bytes after them)."""
    n, w = len(need), WINDOW
    while i < n:
        k = min(n, i + w)
        cum = np.cumsum(np.vstack([used[None, :], need[i:k]]), axis=0)  # sequential sums
        bad = ((cum[1:] - caps) > SLACK).any(axis=1)
        if bad.any():
            f = int(bad.argmax())
            return i + f, cum[f]
        used, i, w = cum[-1], k, 4 * w
    return n, used


def _spill_run(
    tier: Tier, used: np.ndarray, need: np.ndarray, j: int, caps: np.ndarray, alt: Runs
) -> tuple[int, np.ndarray]:
    """The keys from ``j`` on (the tier holding ``used``, key ``j - 1``
    spilled) that each do not fit as laid out and whose spill makes the
    same attempts as key ``j``'s would now, ending in layout ``alt``
    (module docstring).  Returns (the first key that does not, the used
    bytes after them)."""
    tries = _spill_tries(tier, used, caps)
    if tries is None or tries[-1][1] != alt:
        return j, used
    last = tries[-1][2]
    n, w = len(need), WINDOW
    while j < n:
        k = min(n, j + w)
        steps = np.broadcast_to(last, (k - j, len(last)))
        cum = np.cumsum(np.vstack([used[None, :], steps]), axis=0)  # U_j .. U_k
        ok = _same_spill(cum[:-1], need[j:k], caps, tier.layer_bytes, tries)
        if not ok.all():
            f = int((~ok).argmax())
            return j + f, cum[f]
        used, j, w = cum[-1], k, 4 * w
    return n, used


Try = tuple[np.ndarray, Runs, np.ndarray]  # devices tried, their layout, its bytes per device


def _spill_tries(tier: Tier, used: np.ndarray, caps: np.ndarray) -> list[Try] | None:
    """The attempts of :func:`sim.serving.tiers.tierplace.short_key`'s spill at
    ``used``, in order; the last one fits.  None when none does."""
    room = tuple((caps - used >= tier.layer_bytes).tolist())
    tries: list[Try] = []
    while True in room:
        alt, a = tier.runs_over(room)
        alt_need = np.asarray(a, dtype=np.float64)
        short = (used + alt_need) - caps
        tries.append((np.asarray(room), alt, alt_need))
        if (short <= SLACK).all():
            return tries
        room = tuple((np.asarray(room) & (short <= SLACK)).tolist())
    return None


def _same_spill(
    u: np.ndarray, need: np.ndarray, caps: np.ndarray, lb: float, tries: list[Try]
) -> np.ndarray:
    """Per row of used bytes ``u`` (each key's) and its layout's bytes ``need``:
    whether that key does not fit as laid out and its spill makes exactly
    the attempts ``tries`` (the same devices each time, each but the last
    short somewhere, the last fitting)."""
    ok = (((u + need) - caps) > SLACK).any(axis=1)
    ok &= ((caps - u >= lb) == tries[0][0]).all(axis=1)
    for t, (room, _alt, alt_need) in enumerate(tries):
        fits = ((u + alt_need) - caps) <= SLACK
        if t == len(tries) - 1:
            ok &= fits.all(axis=1)
        else:
            ok &= ~fits.all(axis=1) & ((room & fits) == tries[t + 1][0]).all(axis=1)
    return ok
