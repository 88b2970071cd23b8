"""An offload tier's LRU order and its one victim rule.

**Order** (:class:`LruOrder`).  An entry joins its tier's order as the most
recently used (when placed) and moves to the end of it when touched (a load
from it, vLLM's ``touch`` of a request's blocks); nothing else reorders
entries.  This is vLLM's offloading LRU (``vllm/v1/kv_offload/lru_manager.py``:
``LRUOffloadingManager`` keeps its blocks in one ``OrderedDict``; ``touch``
moves each to the end; eviction walks from the oldest, skipping blocks whose
``ref_cnt`` is not 0, until enough are found).  A tier keeps one order,
whatever devices its entries are on.

**Victims** (:meth:`Walk.victims`), given the bytes ``short`` the tier as a
whole lacks for a block (its free bytes summed over its devices, against
the block's bytes) and the bytes ``over[d]`` each device ``d`` holds beyond
its capacity: walk from the least recently used; take an entry when it is
evictable (ready, in use by nobody: ``ref_cnt == READY``) and either the
tier is still short (any entry, whatever devices it is on) or it has bytes
on a device still over its capacity; subtract its bytes; stop when the
tier is not short and no device is over, or the walk ends.

On a one-device tier that is vLLM's walk.  On a tier of several devices (a
pool) it evicts the pool as one LRU cache: Mooncake's store evicts its
least recently used objects pool-wide when space runs short, whatever
segment holds them, and vLLM keeps one order per tier.  The seed of the
pool (Unified KV Pooling, Algorithm 1, §IV-A3) splits a block over the
devices by bandwidth and gives no rule for a full pool; the block is placed
after its victims as :mod:`sim.serving.tiers.tierplace` says (as laid out,
else spilled to the devices with room).  A device goes over its capacity
only when a lender takes memory back (a peer tier); only its own entries
can bring it back, hence ``over``.

Every path that needs victims (one device or a pool; victims dropped or
demoted; a placement of many keys or of one;
:meth:`~sim.serving.tiers.blocks.OffloadTier.make_room`; the block
manager's room check, which takes nothing) asks a :class:`Walk`.

**One walk per placement.**  While one offload set is placed
(:mod:`sim.serving.tiers.tierplace`) nothing but victims leaves the tier and
nothing in it is pinned, unpinned or touched; new entries join the order
only when the placement ends (victims leave it then too).  So the keys of
the set share one walk: each call continues where the last one stopped, an
entry passed as not evictable is not read again, and the evictable entries
a call passed by (none on a device over capacity while the tier was not
short) are looked at first by the next call, in order.  Keys that each take
the walk's next entry (no device over, the tier short by at most one
block's bytes) and go where it was while it is laid out alike take such
entries as one run (:meth:`Walk.alike`), the same entries in the same order.

**The evictable entries, indexed.**  Beside the order, each entry has a place
(``Entry.at``) in an append-only row of places, given as it joins or is
touched (so places ascend in LRU order), and a byte per place says whether the
entry there is evictable (the tier sets it as an entry's ``ref_cnt`` reaches
or leaves ``READY``: :meth:`LruOrder.flag`).  A walk finds the next evictable
entry with ``bytearray.find`` (C's ``memchr``) over those bytes, so the entries
in use it passes cost nothing each: on the whole conversation trace LMCache's
write-through keeps most of a DRAM tier pinned while its SSD copies queue, and the
walks passed 18.0 M of them one by one (3.45 CPU s of the fleet run's victim walks,
0.20 s indexed; measured 2026-12-03).  The row is compacted (places
given again, in order) when at least half of it is dead.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterator, Sequence
from itertools import chain

from sim.serving.tiers.entry import READY, Entry, Runs

_COMPACT_MIN = 1024  # places below which the row is never compacted


class LruOrder:
    """A tier's entries in LRU order, and which are evictable (module docstring)."""

    __slots__ = ("entries", "clock", "_at", "_ok")

    def __init__(self) -> None:
        self.entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self.clock = 0  # entries joined or touched so far (equal: no move since)
        self._at: list[Entry | None] = []  # place -> its entry (None: dead)
        self._ok = bytearray()  # place -> 1 if its entry is evictable

    def add(self, made: Sequence[Entry]) -> None:
        """``made`` (new to the tier) join the order as the most recently
        used, in this order."""
        od, at, ok = self.entries, self._at, self._ok
        for e in made:
            od[e.key] = e
            e.at = len(at)
            at.append(e)
            ok.append(e.ref_cnt == READY)
        self.clock += len(made)
        self._compact()

    def touch(self, entries: Sequence[Entry]) -> None:
        """``entries`` become the most recently used, in this order."""
        to_end, at, ok = self.entries.move_to_end, self._at, self._ok
        for e in entries:
            to_end(e.key)
            i = e.at
            at[i], ok[i] = None, 0
            e.at = len(at)
            at.append(e)
            ok.append(e.ref_cnt == READY)
        self.clock += len(entries)
        self._compact()

    def remove(self, e: Entry) -> None:
        del self.entries[e.key]
        i = e.at
        self._at[i], self._ok[i] = None, 0
        e.at = -1

    def flag(self, e: Entry) -> None:
        """``e``'s ``ref_cnt`` reached or left ``READY``: its evictable byte follows."""
        i = e.at
        if i >= 0:
            self._ok[i] = e.ref_cnt == READY

    def order(self) -> Iterator[Entry]:
        """Every entry, least recently used first."""
        return iter(self.entries.values())

    def walk(self) -> Walk:
        """A walk from the least recently used (valid while the order is unchanged)."""
        return Walk(self)

    def evictable(self) -> Iterator[Entry]:
        """The evictable entries, least recently used first, each found when the
        iteration reaches it (as a filter over :meth:`order` would)."""
        at, ok, i = self._at, self._ok, 0
        find = ok.find
        while (i := find(1, i)) >= 0:
            yield at[i]  # type: ignore[misc]
            i += 1

    def _compact(self) -> None:
        """Give the entries places again, in order, when half the row is dead."""
        n = len(self.entries)
        if len(self._at) < max(2 * n, _COMPACT_MIN):
            return
        at = list(self.entries.values())
        for i, e in enumerate(at):
            e.at = i
        self._at = at  # type: ignore[assignment]
        self._ok = bytearray(e.ref_cnt == READY for e in at)


class Walk:
    """The LRU walk over one tier's order for one placement (module docstring)."""

    __slots__ = ("_ready", "_passed")

    def __init__(self, order: LruOrder):
        self._ready = order.evictable()  # the evictable entries not reached yet
        self._passed: list[Entry] = []  # evictable entries passed by, not taken (LRU order)

    def victims(self, short: int, over: Sequence[int] = ()) -> list[Entry]:
        """The victims that cover ``short`` (bytes the tier lacks; > 0: short)
        and ``over`` (bytes per device beyond its capacity; > 0: over), in
        LRU order (module docstring); fewer when the walk ends first.  They
        are not dropped: the caller evicts them."""
        out: list[Entry] = []
        over = list(over)
        want = _short_mask(over)  # the devices still over their capacity
        if short <= 0 and not want:
            return out
        passed, kept = self._passed, []
        self._passed = kept
        seen = 0
        for e in chain(passed, self._ready):
            seen += 1
            nb = e.nbytes
            if short > 0 or e.devs & want:
                out.append(e)
                short -= sum(nb)
                if want:
                    for d, x in enumerate(nb):
                        over[d] -= x
                    want = _short_mask(over)
                if short <= 0 and not want:
                    break
            else:
                kept.append(e)
        if seen < len(passed):  # stopped among the entries passed before: keep the rest
            kept += passed[seen:]
        return out

    def alike(self, runs: Container[Runs], most: int) -> list[Entry]:
        """The walk's next evictable entries while each is laid out as one of
        ``runs``, at most ``most``, in LRU order: what as many calls of
        :meth:`victims` give, each asked for at most one entry's bytes with
        no device over (each takes the next evictable entry), up to the
        first entry not so laid out, which stays the walk's next."""
        out: list[Entry] = []
        passed = self._passed
        seen, stop = 0, None
        for e in chain(passed, self._ready):
            seen += 1
            if e.runs not in runs:
                stop = e
                break
            out.append(e)
            if len(out) == most:
                break
        rest = passed[seen:] if seen < len(passed) else []
        self._passed = [stop, *rest] if stop is not None else rest
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
