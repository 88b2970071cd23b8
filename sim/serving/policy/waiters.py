"""Stores waiting for the first tier's demotions to drain, indexed by key.

A store whose keys wait (:class:`sim.serving.execute.stores.Offloader`) need not be
placed again at a drain while none of its waiting keys was added to the
first tier since it last looked and placing it would decide nothing new
(:meth:`BlockManager.room_blocked`): every key would wait again.  Whether
one of its keys was added is kept here without going over its keys or the
tier's log per store:

* the tier's ``added`` log (keys added while somebody waits) is read once
  and emptied (:meth:`WaitIndex.scan`);
* ``owner`` maps a key to the (waiter, position in its groups) holding it,
  so an added key marks exactly the waiters that hold it still waiting
  (position at or past the waiter's ``lo``: the groups before ``lo`` were
  placed) as ``touched``;
* a waiter that places the groups before some cut and waits with the rest
  (the usual case: from the first key that must wait on) keeps its record
  and index entries, ``lo`` moved on (its groups are never copied: a drain
  costs nothing per key still waiting), ``touched`` cleared after a scan
  (what it looks at from then on); otherwise its entries are removed and
  the rest registered anew.

``touched`` is exactly "one of its keys is in the log after the position
where it last looked", the question :class:`Offloader` used to answer by
intersecting the waiter's key set with the log's tail.  ``marked`` holds
the touched waiters, so that a drain that finds the tier blocked can tell
at once that no later waiter needs a look.
"""

from __future__ import annotations

from sim.serving.policy.jobs import StoreRequest
from sim.serving.tiers.blocks import OffloadTier


class Waiter:
    """A store's groups that wait: request ``rid``'s ``base[lo:]`` (never
    copied: a drain that places some of them moves ``lo`` on)."""

    __slots__ = ("rid", "base", "lo", "touched", "distinct")

    def __init__(self, req: StoreRequest):
        self.rid = req.rid
        self.base = req.groups  # the groups registered in the index
        self.lo = 0  # groups before it were placed (or let go): not waiting
        self.touched = False  # one of its waiting keys was added since it looked
        self.distinct = True  # no key repeats among its groups (set on registering)


class WaitIndex:
    """Key -> waiters holding it; the tier's ``added`` log read once."""

    def __init__(self, tier: OffloadTier):
        self.tier = tier
        self.owner: dict[int, list[tuple[Waiter, int]]] = {}
        self.marked: set[Waiter] = set()  # the waiters now touched

    def scan(self) -> None:
        """Mark the waiters whose waiting keys were added since the last scan;
        the log read is emptied (nobody else reads it), so it holds only the
        keys added since, however long stores keep waiting."""
        added, owner = self.tier.added, self.owner
        if not added:
            return
        for key in filter(owner.__contains__, added):
            for w, pos in owner[key]:
                if pos >= w.lo and not w.touched:
                    w.touched = True
                    self.marked.add(w)
        added.clear()

    def register(self, req: StoreRequest) -> Waiter:
        """A new waiter for ``req``'s groups, looking from now on."""
        tier = self.tier
        if tier.added is None:
            tier.added = []
        self.scan()
        w = Waiter(req)
        owner = self.owner
        for pos, (key, _blocks) in enumerate(req.groups):
            hold = owner.get(key)
            if hold is None:
                owner[key] = [(w, pos)]
            else:
                if hold[-1][0] is w:  # only w appends now: its earlier place of key
                    w.distinct = False
                hold.append((w, pos))
        return w

    def advance(self, w: Waiter, k: int) -> None:
        """``w`` was placed and ``w.base[k:]`` of it waits (``k >= w.lo``):
        what was added until now is behind it."""
        self.scan()
        w.lo, w.touched = k, False
        self.marked.discard(w)

    def moved(self, w: Waiter, rest: StoreRequest) -> Waiter:
        """``w`` was placed and ``rest``, not a suffix of its groups, waits:
        a new waiter (``w`` removed)."""
        self.remove(w)
        return self.register(rest)

    def cut(self, w: Waiter, m: int) -> None:
        """The first ``m`` of ``w``'s groups were placed alone; the rest wait."""
        w.lo += m

    def remove(self, w: Waiter) -> None:
        """``w`` waits no more: its index entries go."""
        owner = self.owner
        for key, _blocks in w.base:
            hold = owner.get(key)
            if hold is None:
                continue
            kept = [x for x in hold if x[0] is not w]
            if kept:
                owner[key] = kept
            else:
                del owner[key]
        w.lo = len(w.base)
        w.touched = False
        self.marked.discard(w)

    def clear(self) -> None:
        """Nobody waits: forget everything (the tier stops keeping its log)."""
        self.owner.clear()
        self.marked.clear()
        self.tier.added = None
