"""The block manager: prefix lookups over every tier, loads, stores, demotions.

On every admission (and, with asynchronous loading on arrival, on every
arrival) a request's block hashes are looked up in **every** tier, GPU
first, then the offload tiers in order: the hit is the longest prefix of
blocks found somewhere.  GPU hits are shared (reference counted); lower
hits are loaded upward into fresh GPU blocks that stay not ready until the
load ends, while their source entries are pinned (in use) so they cannot
be evicted mid-flight.  At least one prompt token is always computed (as
in vLLM, the last block is never a hit).

After each iteration the request's newly computed full blocks get their
hash (they become shareable) and every complete offload block (``k`` GPU
blocks) not yet stored anywhere is offloaded to the first offload tier
(write-through from the GPU, seed 001 §2.2 "Store"), the GPU blocks pinned
until the copy ends.  Below that: LMCache writes everything through to the
SSD tier (``cpu_to_ssd: write_through``); seed 001's hierarchy demotes the
CPU tier's LRU victims to the SSD tier (``on_evict``), keeping them until
the SSD copy is complete.  Stores are best effort: a block that finds no
room (everything pinned) is simply not offloaded.

**Decisions without a clock.**  The manager never waits: it returns its
transfers as plain data (:class:`sim.serving.policy.jobs.Transfer`, pieces with
their byte ranges) and is told when they end.  Loads: :meth:`load` then
:meth:`on_loaded`.  Stores: :meth:`computed` returns the blocks to offload
(a :class:`~sim.serving.policy.jobs.StoreRequest`); :meth:`place_store` places
them and returns the demotions it caused, the store itself and what must
wait for a demotion to drain (the executor asks again when one has);
:meth:`on_stored` completes a store or demotion and returns the transfers
that follow it (LMCache's write-through, :mod:`sim.serving.policy.writethrough`:
the entries a copy pins made ready and pinned without being offered).
A load's sources are grouped per tier once, at :meth:`acquire`, and
kept on its :class:`~sim.serving.policy.prefix.Lookup` for :meth:`on_loaded`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter

import numpy as np

from sim.serving.designs import DesignParams
from sim.serving.policy import chunkplace, writethrough
from sim.serving.policy.demotions import Decided, demotion_transfers
from sim.serving.policy.jobs import StoreRequest, Transfer, load_pieces, store_pieces
from sim.serving.policy.prefix import Lookup, gpu_prefix, ints, lower_hits
from sim.serving.policy.seq import Seq
from sim.serving.policy.storegroups import store_groups
from sim.serving.requests import Request
from sim.serving.tiers.blocks import Entry, GpuBlock, GpuCache, OffloadTier
from sim.serving.tiers.tierplace import place_single


@dataclass
class Placement:
    """What :meth:`BlockManager.place_store` decided: demotions to start (first),
    the store, and the groups that wait for a demotion of tier 0 to drain;
    ``blocked``: tier 0 was found blocked once the last key looked at was
    placed (:meth:`BlockManager.room_blocked` is True, nothing changed since);
    ``rest_at`` >= 0: the groups that wait are the ones given from there on
    (:meth:`BlockManager.place_from`; ``waiting`` is then None, not made)."""

    demotions: list[Transfer]
    store: Transfer | None
    waiting: StoreRequest | None
    blocked: bool = False
    rest_at: int = -1


class BlockManager:
    """GPU cache and offload tiers of one engine, and the transfers between them."""

    def __init__(
        self,
        gpu: GpuCache,
        tiers: list[OffloadTier],
        design: DesignParams,
        block_tokens: int,
        gpu_name: str,
    ):
        self.gpu = gpu
        self.tiers = tiers
        self.design = design
        self.B = block_tokens
        self.k = design.offload_factor(block_tokens)
        self.gpu_name = gpu_name
        # demotions decided while placing (tier, below, new entry, victim), handed out after
        self._demotions: list[Decided] = []
        self._one = np.empty(0, dtype=object)  # (slot,) per GPU slot (:meth:`_ones`)
        self._first: chunkplace.FirstTier | None = None  # tier 0's constants, made on first use
        # the tier below each tier whose victims are demoted (:meth:`_evict`)
        self._below = {t: tiers[i + 1] for i, t in enumerate(tiers) if self._demotes(i)}

    # ---- lookup and admission ----------------------------------------------------
    def lookup(self, s: Seq) -> Lookup:
        """The longest prefix of ``s``'s prompt blocks (never the last token's
        block) found on the GPU, then group by group in the offload tiers.

        The dict probes run as C-level ``map`` over the request's keys, not a
        Python loop per block: the GPU prefix is cut at the first missing or
        not-ready block, the lower hits at the first group with a block on the
        GPU or with no ready copy in any tier (:func:`sim.serving.policy.prefix.lower_hits`)."""
        hs, k = s.req.hashes, self.k
        limit = max(min(len(hs), (s.req.input_tokens - 1) // self.B), 0)
        cached = self.gpu.cached if self.gpu.prefix_cache else {}
        gpu = gpu_prefix(cached, self.gpu.ready, hs, limit)
        on_gpu, tiers = self.gpu.cached.__contains__, self.tiers
        return Lookup(gpu, find=lambda: lower_hits(tiers, on_gpu, k, hs, len(gpu), limit))

    def acquire(self, s: Seq, hit: Lookup, new_blocks: int) -> bool:
        """Take the hit and ``new_blocks`` more GPU blocks for ``s``; False
        (and nothing taken) if the GPU cannot make room.  The lower hits are
        worked out only once the room is sure, before eviction changes the
        GPU's cached set (what :meth:`lookup` would have seen)."""
        gpu = self.gpu
        if not gpu.hold(hit.gpu, new_blocks):  # no room: the hit only touched
            return False
        hit.resolve()
        if not gpu.allocate(new_blocks):  # pragma: no cover - checked just above
            raise RuntimeError("GPU room vanished between check and allocation")
        s.blocks = list(hit.gpu)
        s.private = new_blocks
        s.cached_tokens = hit.blocks * self.B
        hits = {"gpu": len(hit.gpu)}
        lower = hit.lower
        by_tier = hit.by_tier = _by_tier(lower, hits)
        for tier, entries in by_tier.items():
            tier.pin_touch_all(entries)  # pinned: touched, not offered for eviction
        if lower:  # the hit blocks are contiguous: [first j, last j + n)
            keys = ints(s.req.hashes, lower[0][2], lower[-1][2] + lower[-1][3])
            blocks, _made = self.gpu.promote_all(keys, False)
            s.blocks += blocks
            s.private -= len(blocks)
        s.req.hits = hits
        s.lookup = hit if hit.lower else None
        return True

    def grow(self, s: Seq, new_blocks: int) -> bool:
        """More private GPU blocks for an admitted (prefetched) request."""
        if not self.gpu.allocate(new_blocks):
            return False
        s.private += new_blocks
        return True

    def release(self, s: Seq) -> None:
        self.gpu.release(s.blocks, s.private)
        s.blocks, s.private = [], 0

    # ---- loads --------------------------------------------------------------------
    def load(self, s: Seq, layerwise: bool) -> Transfer:
        """Load ``s``'s lower hits into its GPU blocks; pieces per layer with
        layer-wise pipelining, per offload block otherwise."""
        hit = s.lookup
        assert hit is not None
        pieces = load_pieces(hit.lower, self.gpu_name, layerwise)
        s.load = Transfer("load", "src", s.req.rid, pieces)
        return s.load

    def on_loaded(self, s: Seq) -> None:
        """``s``'s load ended: its GPU blocks are ready, the sources unpinned."""
        hit = s.lookup
        assert hit is not None
        self.gpu.set_ready(s.blocks[len(hit.gpu) :])
        for tier, entries in (hit.by_tier or _by_tier(hit.lower)).items():
            tier.unpin_all(entries)
        s.lookup = None
        s.load = None

    # ---- stores -------------------------------------------------------------------
    def computed(self, s: Seq, upto: int | None = None, store: bool = True) -> StoreRequest | None:
        """Hash ``s``'s newly computed full blocks; the complete groups to offload
        (their GPU blocks held from now: the request may finish before the copy).
        ``upto``: tokens whose KV exists (default: the prompt computed so far; at
        the end of a request its prompt and reply, the engine's ``cache_replies``);
        ``store=False`` hashes them on the GPU only."""
        hs, k = s.req.hashes, self.k
        done = s.cached_tokens + s.prefilled if upto is None else upto
        frontier = min(len(hs), done // self.B)
        if len(s.blocks) < frontier:
            blocks, made = self.gpu.promote_all(ints(hs, len(s.blocks), frontier), ready=True)
            s.private -= made
            s.blocks += blocks
        g0, g1 = s.stored_groups, frontier // k
        if not (self.tiers and store) or g1 <= g0:
            return None
        s.stored_groups = g1
        groups = self._store_groups(s, g0, g1)
        return StoreRequest(s.req.rid, groups) if groups else None

    def _store_groups(self, s: Seq, g0: int, g1: int) -> list[tuple[int, tuple[GpuBlock, ...]]]:
        """Groups ``g0 .. g1`` of ``s`` held in no tier and whole on the GPU
        (:func:`sim.serving.policy.storegroups.store_groups`), their blocks held."""
        return store_groups(self.tiers, self.gpu, self._ones, self.k, s, g0, g1)

    def _ones(self, slots: np.ndarray) -> list[tuple[GpuBlock]]:
        """``(slot,)`` for each of ``slots``: one tuple per GPU slot, made
        once and shared by every group that slot is ever the block of (a
        group's blocks are read, never changed), so a store's groups cost
        no new tuple or int per block."""
        top = int(slots.max()) + 1
        ones = self._one
        if len(ones) < top:
            grown = np.empty(max(top, len(self.gpu.key), 2 * len(ones)), dtype=object)
            grown[: len(ones)] = ones
            for i in range(len(ones), len(grown)):
                grown[i] = (i,)
            ones = self._one = grown
        return ones[slots].tolist()

    def place_store(self, req: StoreRequest, fresh: bool = False) -> Placement:
        """Place ``req``'s groups in the first tier, evicting (and demoting) as
        needed; groups with no room at all are let go (not offloaded).
        ``fresh``: none of its keys is in the first tier and no key repeats
        (a waiting store, :mod:`sim.serving.policy.waiters`): placed in chunks when
        that is the same (:func:`sim.serving.policy.chunkplace.place_chunks`)."""
        out = self.place_from(req.rid, req.groups, 0, fresh)
        if out.rest_at >= 0:
            out.waiting, out.rest_at = StoreRequest(req.rid, req.groups[out.rest_at :]), -1
        return out

    def place_from(self, rid: int, groups: list, lo: int, fresh: bool = False) -> Placement:
        """:meth:`place_store` of request ``rid``'s ``groups[lo:]``; when the
        groups that wait are ``groups[k:]``, placed in chunks, the answer says
        ``k`` (``Placement.rest_at``) rather than copying them."""
        first = self._first or self._first_tier()
        chunked = fresh and first.chunkable()
        if chunked:
            placed, waiting, hi = chunkplace.place_chunks(first, groups, lo, self._evict)
            sources = dict(groups[lo:hi])
        else:
            sources, hi = dict(groups[lo:]), len(groups)
            pending = [key for key, _ in groups[lo:]]
            placed, waiting = first.tier.place(pending, self._evict if first.demotes else None)
            if len(placed) + len(waiting) < len(pending):  # some were let go
                gone = list(set(pending) - {e.key for e in placed} - set(waiting))
                # no room: not offloaded; one release of the groups in reverse is one each in order
                self.gpu.release(list(chain.from_iterable(map(sources.get, reversed(gone)))), 0)
        out = self._placement(rid, placed, sources)
        out.blocked = chunked and hi < len(groups)  # stopped at a blocked tier
        out.rest_at, out.waiting = chunkplace.rest(rid, groups, hi, waiting, sources)
        return out

    def _placement(
        self, rid: int, placed: list[Entry], sources: dict[int, tuple[GpuBlock, ...]]
    ) -> Placement:
        """The demotions decided and the store of ``placed`` (from the GPU
        blocks ``sources``) into the first tier; what waits is the caller's."""
        demotions = self._demotion_transfers() if self._demotions else []
        store = None
        if placed:
            tier = self.tiers[0]
            pieces = store_pieces(None, tier, placed, self.gpu_name)
            store = Transfer("store", "dst", rid, pieces, None, tier, placed, [], sources)
        return Placement(demotions, store, None)

    def room_blocked(self) -> bool:
        """Whether every key a store places in tier 0 now must wait, with
        nothing evicted (:meth:`sim.serving.policy.chunkplace.FirstTier.blocked`)."""
        return (self._first or self._first_tier()).blocked()

    def fitting_prefix(self, n: int) -> int:
        """How many keys of a waiting store of ``n`` keys, none in tier 0, to
        place alone (:meth:`sim.serving.policy.chunkplace.FirstTier.fitting`); 0: all."""
        return (self._first or self._first_tier()).fitting(n)

    def _first_tier(self) -> chunkplace.FirstTier:
        """Tier 0 with its constants (made once: the tiers never change)."""
        self._first = chunkplace.FirstTier(self.tiers[0], self._demotes(0))
        return self._first

    def on_stored(self, t: Transfer) -> list[Transfer]:
        """Store or demotion ``t`` ended: its entries are ready below, its sources
        let go; returns the transfers that follow (write-through to the next tier,
        :mod:`sim.serving.policy.writethrough`)."""
        assert t.dst is not None
        through = t.src is None and self.design.cpu_to_ssd == "write_through"
        through = through and len(self.tiers) > 1
        if through and t.entries and writethrough.all_not_ready(t.entries):
            keys = self._release_sources(t)  # reads nothing of the tiers
            live = [e.key for e in t.entries] if keys is None else keys[::-1]
            src, dst = self.tiers[0], self.tiers[1]
            return writethrough.complete_through(src, dst, t.entries, live, t.rid, self.gpu_name)
        fresh = t.dst.complete_all(t.entries)  # all were not ready: all still held there
        if t.tag == "demote":
            for old in t.olds:
                t.src.drained(old)  # type: ignore[union-attr]
        elif t.olds:
            t.src.unpin_all(t.olds)  # type: ignore[union-attr]
        keys = self._release_sources(t)
        if through:
            live = None
            if fresh:  # every entry still in tier 0: no probe needed
                live = [e.key for e in t.entries] if keys is None else keys[::-1]
            src, dst = self.tiers[0], self.tiers[1]
            return writethrough.write_through(src, dst, t.entries, t.rid, self.gpu_name, live)
        return []

    def _release_sources(self, t: Transfer) -> list[int] | None:
        """Let go of the GPU blocks a store from the GPU held: one release,
        each entry's blocks in the order of one release each.  Returns the
        entries' keys in reverse (None: no sources)."""
        if not t.sources:
            return None
        keys = [e.key for e in reversed(t.entries)]
        got = filter(None, map(t.sources.get, keys))  # the held ones' blocks (none: ())
        self.gpu.release(list(chain.from_iterable(got)), 0)
        return keys

    def _demotes(self, i: int) -> bool:
        """Whether tier ``i``'s victims are demoted (else :meth:`_evict` always
        drops them, and placement is told so by passing no callback)."""
        return self.design.cpu_to_ssd == "on_evict" and i + 1 < len(self.tiers)

    def _evict(self, tier: OffloadTier, e: Entry) -> bool:
        """An entry leaves ``tier``: demote it (True: its copy placed in the
        tier below, the demotion decided) or drop it (False: it is there
        already, or that tier has no room for it)."""
        below = self._below.get(tier)
        if below is None or e.key in below.entries:
            return False
        if len(below.devices) == 1:  # OffloadTier.place of one key not there
            placed, _ = place_single(below, [e.key], None)
        else:
            placed, _ = below.place([e.key], None)
        if not placed:
            return False
        self._demotions.append((tier, below, placed[0], e))
        return True

    def _demotion_transfers(self) -> list[Transfer]:
        """The demotions :meth:`_evict` decided, a transfer each, in that order
        (:func:`sim.serving.policy.demotions.demotion_transfers`)."""
        decided, self._demotions = self._demotions, []
        return demotion_transfers(decided, self.gpu_name)

    # ---- warm-up ------------------------------------------------------------------
    def preload(self, req: Request) -> None:
        """Store ``req``'s prompt blocks in the offload tiers at no time cost, as
        the design would have after serving it once (seed 004's warm-up pass)."""
        if not self.tiers:
            return
        hs, k = req.hashes, self.k
        keys = [hs[g * k + k - 1] for g in range(len(hs) // k)]
        keys = [key for key in keys if not any(key in t.entries for t in self.tiers)]
        placed, _ = self.tiers[0].place(keys, self._evict_now if self._demotes(0) else None)
        self.tiers[0].complete_all(placed)
        if self.design.cpu_to_ssd == "write_through" and len(self.tiers) > 1:
            below, _ = self.tiers[1].place([e.key for e in placed], None)
            self.tiers[1].complete_all(below)

    def _evict_now(self, tier: OffloadTier, e: Entry) -> bool:
        i = self.tiers.index(tier)
        if self.design.cpu_to_ssd == "on_evict" and i + 1 < len(self.tiers):
            below = self.tiers[i + 1]
            if e.key not in below.entries:
                below.complete_all(below.place([e.key], self._evict_now)[0])
        return False


def _by_tier(
    lower: list[tuple[OffloadTier, Entry, int, int]], hits: dict[str, int] | None = None
) -> dict[OffloadTier, list[Entry]]:
    """The entries of lower hits, per tier, in hit order; ``hits``: each
    tier's blocks added to it by name (first seen, first put).  The hits
    come in runs of one tier (:func:`sim.serving.policy.prefix.lower_hits`): each
    run is taken whole, by C-level maps."""
    out: dict[OffloadTier, list[Entry]] = {}
    for tier, run in groupby(lower, _TIER):
        items = list(run)
        got = out.get(tier)
        if got is None:
            got = out[tier] = []
        got += map(_ENTRY, items)
        if hits is not None:
            hits[tier.name] = hits.get(tier.name, 0) + sum(map(_BLOCKS, items))
    return out


_TIER, _ENTRY, _BLOCKS = itemgetter(0), itemgetter(1), itemgetter(3)


__all__ = ["BlockManager", "Lookup", "Placement", "Seq"]
