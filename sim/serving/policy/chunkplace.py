"""A waiting store placed in chunks, stopping where every later key would wait.

At each drain of the first tier's demotions the store at the head of the
waiting line (:class:`sim.serving.execute.stores.Offloader`) is placed again; on a
long request most of its keys wait once more, and placing it whole goes
over every one of them (its sources, its key list, the tier's filter, the
waiting list and its comparison), for the one or two keys that a drain lets
in.  Here its keys are placed in chunks of 2, 4, 8, ... keys, each by
:meth:`OffloadTier.place`, until the tier is *blocked*
(:meth:`FirstTier.blocked`: one more key does not fit, no evictable entry
is left and demotions drain), where
:func:`sim.serving.tiers.tierplace.place_single` would let the next key and every
later one wait with nothing evicted; those keys are the rest, a suffix of
the store's groups, never gone over (nor copied: the caller is told where
it starts, :func:`place_chunks`).

It decides exactly what placing the store whole decides, when (the
preconditions, :meth:`FirstTier.chunkable` and the caller's ``fresh``):

* the tier is one device whose victims are demoted, with demotions draining
  and room for a block in principle: no key is let go (``full`` needs
  nothing draining), and ``place_single`` carries nothing from one key to
  the next but the tier itself, so chunks placed one after the other make
  the same verdicts, victims, slots, stamps and float sums in the same order;
* none of the store's keys is in the tier and none repeats (a waiting
  store whose keys nobody added since it last looked: the tier's filter of
  present keys removes nothing, in chunks as whole).

**The first tier's constants.**  A drain asks three questions of the first
tier before it places anything (is it blocked, does only a prefix of the
head store fit, may it be placed in chunks); each needs the bytes ``b`` one
block takes on the tier's device and its capacity ``c``, which never change.
:class:`FirstTier` keeps them, so each question is a float comparison and at
most one look at the LRU's top: the answers of
:func:`sim.serving.tiers.tierplace.room_blocked` and
:func:`~sim.serving.tiers.tierplace.fitting_prefix`, the same float expressions
(``tests/sim/test_serving_chunkplace.py`` compares them on random tiers).

A store that is not fresh, or a tier that cannot be placed in chunks
(:meth:`FirstTier.chunkable`), is placed whole; an eviction-heavy run gives
the same records either way (``tests/sim/test_serving_chunkplace.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.serving.policy.jobs import StoreRequest
from sim.serving.tiers.placement import layer_runs
from sim.serving.tiers.tierplace import SLACK, fitting_count

if TYPE_CHECKING:
    from sim.serving.tiers.blocks import Entry, EvictFn, GpuBlock, OffloadTier

FIRST = 2  # keys in the first chunk; each next chunk twice as many
_NONE: frozenset[int] = frozenset()  # no key skipped at the LRU's top

Groups = Sequence[tuple[int, tuple["GpuBlock", ...]]]  # (offload key, its GPU blocks)


class FirstTier:
    """The first offload tier with its constants: ``demotes`` (its victims
    are demoted), ``one`` (one device, victims demoted), ``b`` (bytes of one
    block there) and ``c`` (its capacity); the drain's questions about it
    (module docstring)."""

    __slots__ = ("tier", "demotes", "one", "b", "c")

    def __init__(self, tier: OffloadTier, demotes: bool):
        self.tier = tier
        self.demotes = demotes
        self.one = len(tier.devices) == 1 and demotes
        self.b = tier.bytes_on(layer_runs(tier.ratios, 1, tier.layers)[0])[0]
        self.c = tier.capacity[0]

    def chunkable(self) -> bool:
        """Whether a fresh store may be placed in chunks now: one device,
        victims demoted, demotions draining, a block no larger than the device."""
        return self.one and self.tier.draining > 0 and self.b <= self.c

    def blocked(self) -> bool:
        """:func:`sim.serving.tiers.tierplace.room_blocked`: every key placed now
        must wait with nothing evicted (one more block does not fit, no
        evictable entry is left, demotions drain)."""
        tier = self.tier
        if not self.one or not tier.draining:
            return False
        b, c = self.b, self.c
        if b > c or tier.used[0] + b - c <= SLACK:
            return False
        return tier.lru.top(0, tier.entries, _NONE) is None

    def fitting(self, n: int) -> int:
        """:func:`sim.serving.tiers.tierplace.fitting_prefix`: how many keys of a
        waiting store of ``n`` keys, none in the tier, to place alone when
        that is all placing it would do; 0: place it whole."""
        tier = self.tier
        if not self.one or not tier.draining:
            return 0
        return fitting_count(tier, self.b, self.c, n)


def chunkable(tier: OffloadTier, demotes: bool) -> bool:
    """Whether a fresh store may be placed in chunks in ``tier`` now
    (:meth:`FirstTier.chunkable`)."""
    return FirstTier(tier, demotes).chunkable()


def place_chunks(
    first: FirstTier, groups: Groups, lo: int, evict: EvictFn
) -> tuple[list[Entry], list[int], int]:
    """Place the keys of ``groups[lo:]`` in ``first``'s tier chunk by chunk
    (module docstring): (entries placed, the keys of the chunks gone over
    that wait, in order, and where the groups not gone over start: they all
    wait)."""
    tier = first.tier
    n, m = len(groups), FIRST
    placed: list[Entry] = []
    waiting: list[int] = []
    while lo < n:
        hi = min(n, lo + m)
        got, wait = tier.place([key for key, _blocks in groups[lo:hi]], evict)
        if len(got) + len(wait) != hi - lo:  # pragma: no cover - the preconditions
            raise RuntimeError(f"{tier.name}: a key let go while placing in chunks")
        placed += got
        waiting += wait
        lo, m = hi, 2 * m
        if lo < n and first.blocked():
            break
    return placed, waiting, lo


def rest(
    rid: int, groups: Groups, hi: int, waiting: list[int], sources: dict
) -> tuple[int, StoreRequest | None]:
    """What of request ``rid``'s ``groups`` waits once those before ``hi``
    were gone over and ``waiting`` (their keys that wait, in order) found no
    room, the groups from ``hi`` on waiting too: ``(k, None)`` when that is
    the suffix ``groups[k:]`` (the usual case: from the first key that waits
    on), else ``(-1, the groups picked)`` (``sources``: key -> GPU blocks of
    those gone over); ``(-1, None)`` when nothing waits."""
    if not waiting and hi == len(groups):
        return -1, None
    k = hi - len(waiting)
    if [key for key, _blocks in groups[k:hi]] == waiting:
        return k, None
    return -1, StoreRequest(rid, [(key, sources[key]) for key in waiting] + list(groups[hi:]))
