"""An offload tier's LRU order and its one victim rule.

**Order.**  An entry joins its tier's order as the most recently used (when
placed) and moves to the end of it when touched (a load from it, vLLM's
``touch`` of a request's blocks); nothing else reorders entries.  This is
vLLM's offloading LRU (``vllm/v1/kv_offload/lru_manager.py``:
``LRUOffloadingManager`` keeps its blocks in an ``OrderedDict``; ``touch``
moves each to the end; eviction walks from the oldest, skipping blocks whose
``ref_cnt`` is not 0, until enough are found).

**Victims** (:meth:`Walk.victims`), given the bytes ``short[d]`` each device
``d`` of the tier is short: walk from the least recently used; take an
entry when it is evictable (ready, in use by nobody: ``ref_cnt == READY``)
and has bytes on a device still short; subtract its bytes from ``short``;
stop when no device is short or the walk ends.  Every path that needs
victims (one device or a pool; victims dropped or demoted; a placement of
many keys or of one; :meth:`~sim.serving.tiers.blocks.OffloadTier.make_room`;
the block manager's room check, which takes nothing) asks a :class:`Walk`.

**Kept per device set** (:class:`LruOrder`).  In a pool (a tier of several
devices) a block spilled away from a full device has no bytes there, and a
walk short of that device alone passes it by.  Such entries pile up at the
front of a pool's order, and a walk from the front stepped over all of them
at every placement: on the serving benchmark's ``pool`` design (16-token
blocks, 1000 requests, load 0.8) 3.6 million entries passed for 30
thousand victims, eight times the placement's time.  So the order is kept
per *device set* (the devices an entry has bytes on: one set on a
one-device tier, a few in a pool), each an ``OrderedDict`` in LRU order,
and every entry carries its ``stamp``, a counter of the tier taken when it
joins or is touched: the tier's order is ascending stamp, each set's order
is the same order restricted to it, and a walk merges the heads of the sets
that have bytes on a device still short, least stamp first.  That is the
walk above, without stepping over the entries of the other sets.

**One walk per placement.**  While one offload set is placed
(:mod:`sim.serving.tiers.tierplace`) nothing but victims leaves the tier and
nothing in it is pinned, unpinned or touched; new entries join the order
only when the placement ends (victims leave it then too).  So the keys of
the set share one walk: each set's cursor continues where the last key's
walk left it, and an entry passed as not evictable is not read again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from functools import partial
from heapq import merge
from itertools import filterfalse
from operator import attrgetter

from sim.serving.tiers.entry import READY, Entry

_ENDED = Entry(-1, (), (), (), 0)  # a set walked to its end
_STAMP = attrgetter("stamp")
_NO_BOUND = float("inf")  # no other set has an evictable head
# the evictable entries of an iterator of entries: READY is 0, every other count is not
_ready = partial(filterfalse, attrgetter("ref_cnt"))
assert READY == 0


class LruOrder:
    """A tier's entries in LRU order, per device set (module docstring)."""

    __slots__ = ("sets", "clock")

    def __init__(self) -> None:
        self.sets: dict[int, OrderedDict[int, Entry]] = {}  # device set -> its entries
        self.clock = 0  # the last stamp taken

    def add(self, made: Sequence[Entry]) -> None:
        """``made`` (new to the tier) join the order as the most recently
        used, in this order."""
        sets, c = self.sets, self.clock
        for e in made:
            c += 1
            e.stamp = c
            s = sets.get(e.devs)
            if s is None:
                s = sets[e.devs] = OrderedDict()
            s[e.key] = e
        self.clock = c

    def touch(self, entries: Sequence[Entry]) -> None:
        """``entries`` become the most recently used, in this order."""
        sets, c = self.sets, self.clock
        for e in entries:
            c += 1
            e.stamp = c
            sets[e.devs].move_to_end(e.key)
        self.clock = c

    def remove(self, e: Entry) -> None:
        del self.sets[e.devs][e.key]

    def order(self) -> Iterator[Entry]:
        """Every entry, least recently used first."""
        return merge(*(s.values() for s in self.sets.values()), key=_STAMP)

    def walk(self) -> Walk:
        """A walk from the least recently used (valid while the order is unchanged)."""
        return Walk(self.sets)


class Walk:
    """The LRU walk over one tier's order for one placement (module docstring)."""

    __slots__ = ("_sets",)

    def __init__(self, sets: dict[int, OrderedDict[int, Entry]]):
        # per device set holding entries: [its devices, its entries not reached yet
        # (in LRU order), its next evictable entry not taken (None: not looked for)]
        self._sets: list[list] = [[devs, iter(s.values()), None] for devs, s in sets.items() if s]

    def victims(self, short: list[int]) -> list[Entry]:
        """The victims that cover ``short`` (bytes per device; > 0: short), in
        LRU order (module docstring); fewer when the walk ends first.  They
        are not dropped: the caller evicts them.

        Each victim is the least-stamped evictable head of the sets with
        bytes on a device still short.  The heads of the other sets do not
        move while one set gives victims, so that set keeps giving them, in
        its order, while their stamps stay below the least of those heads and
        no device stops being short (a run of victims from one set: one
        device's tier is one set, a run to the end)."""
        out: list[Entry] = []
        short = list(short)
        want = _short_mask(short)  # the devices still short
        sets = self._sets
        while want:
            best: list | None = None
            bound = _NO_BOUND  # the least head stamp of the other sets
            for s in sets:
                if s[0] & want:  # bytes on a device short
                    e = s[2]
                    if e is None:  # the set's first evictable entry not taken
                        e = s[2] = next(_ready(s[1]), _ENDED)
                    if e is _ENDED:
                        continue
                    if best is None or e.stamp < best[2].stamp:
                        if best is not None:
                            bound = best[2].stamp
                        best = s
                    elif e.stamp < bound:
                        bound = e.stamp
            if best is None:
                break  # the walk ended
            on = want & best[0]  # the devices short that its entries have bytes on
            devs = [d for d in range(len(short)) if on >> d & 1]
            e, best[2] = best[2], None
            ready = _ready(best[1])
            while True:  # e: the next victim, from ``best``
                out.append(e)
                nb, covered = e.nbytes, False
                for d in devs:
                    x = short[d] = short[d] - nb[d]
                    covered = covered or x <= 0
                if covered:
                    want &= _short_mask(short)
                    break
                e = next(ready, _ENDED)
                if e is _ENDED or e.stamp > bound:
                    best[2] = e  # the set's next evictable entry (or its end), not taken
                    break
        return out


def _short_mask(xs: Sequence[int]) -> int:
    """The devices ``d`` with ``xs[d] > 0``, as a bit mask."""
    mask = 0
    for d, x in enumerate(xs):
        if x > 0:
            mask |= 1 << d
    return mask


def device_set(nbytes: Sequence[int]) -> int:
    """The devices a block of ``nbytes`` per device has bytes on, as a bit mask."""
    return _short_mask(nbytes)
