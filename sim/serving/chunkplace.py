"""A waiting store placed in chunks, stopping where every later key would wait.

At each drain of the first tier's demotions the store at the head of the
waiting line (:class:`sim.serving.stores.Offloader`) is placed again; on a
long request most of its keys wait once more, and placing it whole goes
over every one of them (its sources, its key list, the tier's filter, the
waiting list and its comparison), for the one or two keys that a drain lets
in.  Here its keys are placed in chunks of 2, 4, 8, ... keys, each by
:meth:`OffloadTier.place`, until the tier is *blocked*
(:func:`sim.serving.tierplace.room_blocked`: one more key does not fit, no
evictable entry is left and demotions drain), where
:func:`sim.serving.tierplace.place_single` would let the next key and every
later one wait with nothing evicted; those keys are the rest, a slice of
the store's groups, never gone over.

It decides exactly what placing the store whole decides, when (the
preconditions, :func:`chunkable` and the caller's ``fresh``):

* the tier is one device whose victims are demoted, with demotions draining
  and room for a block in principle: no key is let go (``full`` needs
  nothing draining), and ``place_single`` carries nothing from one key to
  the next but the tier itself, so chunks placed one after the other make
  the same verdicts, victims, slots, stamps and float sums in the same order;
* none of the store's keys is in the tier and none repeats (a waiting
  store whose keys nobody added since it last looked: the tier's filter of
  present keys removes nothing, in chunks as whole).

``CHUNKED = False`` places every store whole (the reference;
``tests/sim/test_serving_chunkplace.py`` compares the records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serving.jobs import StoreRequest
from sim.serving.placement import layer_runs
from sim.serving.tierplace import room_blocked

if TYPE_CHECKING:
    from sim.serving.blocks import Entry, EvictFn, GpuBlock, OffloadTier

CHUNKED = True  # False: a waiting store is placed whole (the reference)
FIRST = 2  # keys in the first chunk; each next chunk twice as many


def chunkable(tier: OffloadTier, demotes: bool) -> bool:
    """Whether a fresh store may be placed in chunks in ``tier`` now: one
    device, victims demoted (``demotes``), demotions draining, a block no
    larger than the device (module docstring)."""
    if len(tier.devices) != 1 or not demotes or not tier.draining:
        return False
    return tier.bytes_on(layer_runs(tier.ratios, 1, tier.layers)[0])[0] <= tier.capacity[0]


def place_chunks(
    tier: OffloadTier, req: StoreRequest, evict: EvictFn
) -> tuple[list[Entry], StoreRequest | None, dict[int, tuple[GpuBlock, ...]]]:
    """Place ``req``'s groups in ``tier`` chunk by chunk (module docstring):
    (entries placed, the groups that wait or None, the sources of the groups
    gone over: key -> GPU blocks)."""
    groups = req.groups
    n, lo, m = len(groups), 0, FIRST
    placed: list[Entry] = []
    waiting: list[int] = []  # keys of the chunks gone over that wait
    while lo < n:
        hi = min(n, lo + m)
        got, wait = tier.place([key for key, _blocks in groups[lo:hi]], evict)
        if len(got) + len(wait) != hi - lo:  # pragma: no cover - the preconditions
            raise RuntimeError(f"{tier.name}: a key let go while placing in chunks")
        placed += got
        waiting += wait
        lo, m = hi, 2 * m
        if lo < n and room_blocked(tier, True):
            break
    sources = dict(groups[:lo])
    if not waiting and lo == n:
        return placed, None, sources
    first = lo - len(waiting)  # the rest is a suffix of the groups (usual) when
    if all(groups[first + j][0] == key for j, key in enumerate(waiting)):
        return placed, StoreRequest(req.rid, groups[first:]), sources
    picked = [(key, sources[key]) for key in waiting]
    return placed, StoreRequest(req.rid, picked + groups[lo:]), sources
