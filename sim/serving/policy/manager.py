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
(write-through from the GPU, seed 001 §2.2 "Store"), the GPU blocks held
until the copy ends.  Below that: LMCache writes everything through to the
SSD tier (``cpu_to_ssd: write_through``); seed 001's hierarchy demotes the
CPU tier's LRU victims to the SSD tier (``on_evict``, "LRU-based rotation",
§4.1): a victim leaves the CPU tier at once, its copy placed below, and the
victims of one store move as one job that the store follows (it writes the
slots they leave; :mod:`sim.serving.policy.demotions`).  Victims are ready
entries in use by nobody, least recently used first: nothing being stored,
loaded or copied is ever evicted.

**Two store rules, each the framework's.**  ``stores: step`` (the paged
designs, vLLM's offloading connector): :meth:`prepare_store`, called for
every request of every scheduler step, places the request's new groups all
or nothing (vLLM's ``LRUOffloadingManager.prepare_store`` returns None when
it cannot evict enough: nothing is stored and the same blocks are tried at
the request's next step; no GPU block is held meanwhile).  ``stores: eager``
(LMCache, HiCache): :meth:`computed` then :meth:`place_store` as each chunk
is computed, best effort (a block that finds no room is not offloaded).
Neither ever waits for room: a victim leaves its tier as it is evicted.

**Decisions without a clock.**  The manager never waits: it returns its
transfers as plain data (:class:`sim.serving.policy.jobs.Transfer`, pieces with
their byte ranges) and is told when they end.  Loads: :meth:`load` then
:meth:`on_loaded`.  Stores: :meth:`prepare_store` (or :meth:`computed` and
:meth:`place_store`) return the demotions and the store;
:meth:`on_stored` completes a store or demotion and returns the transfers
that follow it (LMCache's write-through, :mod:`sim.serving.policy.writethrough`).
A load's sources are grouped per tier once, at :meth:`acquire`, and
kept on its :class:`~sim.serving.policy.prefix.Lookup` for :meth:`on_loaded`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter

import numpy as np

from sim.serving.designs import DesignParams
from sim.serving.policy import writethrough
from sim.serving.policy.demotions import Decided, demotion_transfers
from sim.serving.policy.jobs import StoreRequest, Transfer, load_pieces, store_pieces
from sim.serving.policy.prefix import Lookup, first_cached, gpu_prefix, ints, lower_hits
from sim.serving.policy.seq import Seq
from sim.serving.policy.storegroups import store_groups
from sim.serving.requests import KeySpace, Request
from sim.serving.tiers.blocks import Entry, GpuBlock, GpuCache, OffloadTier
from sim.serving.tiers.placement import layer_runs


@dataclass
class Placement:
    """What :meth:`BlockManager.place_store` decided: the demotions of its
    victims (one job per tier pair, to run first) and the store."""

    demotions: list[Transfer]
    store: Transfer | None


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
        # demotions decided while placing (tier, below, new entry, pieces), handed out after
        self._demotions: list[Decided] = []
        self._one = np.empty(0, dtype=object)  # (slot,) per GPU slot (:meth:`_ones`)
        # the tier below each tier whose victims are demoted (:meth:`_evict`)
        self._below = {t: tiers[i + 1] for i, t in enumerate(tiers) if self._demotes(i)}

    # ---- lookup and admission ----------------------------------------------------
    def lookup(self, s: Seq) -> Lookup:
        """The longest prefix of ``s``'s prompt blocks (never the last token's
        block) found on the GPU, then group by group in the offload tiers.

        The probes are array reads by key (the GPU's) or C-level ``map`` over
        the request's keys (the tiers' dicts), not a Python loop per block:
        the GPU prefix is cut at the first missing or not-ready block, the
        lower hits at the first group with a block on the GPU or with no
        ready copy in any tier (:func:`sim.serving.policy.prefix.lower_hits`).
        With ``stores: step`` every offload block of the prompt held in a tier
        is touched first, as vLLM's ``get_num_new_matched_tokens`` does
        (:meth:`_touch`).  A request waiting for room is looked up at every
        step: when no tier has added, touched, placed or dropped an entry since
        its last lookup (each tier's LRU clock and changes as that lookup left
        them, ``s.touched``), its blocks are the most recent, in the order a
        touch gives, and touching them again leaves the order as it is."""
        hs, k = s.req.hashes, self.k
        step = self.design.stores == "step"  # get_num_new_matched_tokens: manager.touch first
        if step and s.touched != [(t.lru.clock, t.changes) for t in self.tiers]:
            keys = self._keys(s)
            for tier in self.tiers:
                self._touch(tier, keys)
            s.touched = [(t.lru.clock, t.changes) for t in self.tiers]
        limit = max(min(len(hs), (s.req.input_tokens - 1) // self.B), 0)
        gpu = gpu_prefix(self.gpu, hs, limit) if self.gpu.prefix_cache else []
        on_gpu, tiers = first_cached(self.gpu), self.tiers
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
        s.keys = s.no_room = s.touched = None

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
        now, best effort (a design whose stores are ``eager``: placed as they are
        computed, :meth:`place_store`; their GPU blocks held from now: the
        request may finish before the copy).  ``upto``: tokens whose KV exists
        (default: the prompt computed so far; at the end of a request its prompt
        and reply, the engine's ``cache_replies``); ``store=False`` hashes them on
        the GPU only."""
        frontier = self._frontier(s, upto)
        g0, g1 = self._hash(s, frontier), frontier // self.k
        if not (self.tiers and store) or g1 <= g0:
            return None
        s.stored_groups = g1
        groups, mine = self._store_groups(s, g0, g1)
        self.gpu.acquire_all(mine)
        return StoreRequest(s.req.rid, groups, s.req.space) if groups else None

    def prepare_store(
        self, s: Seq, upto: int | None = None, store: bool = True
    ) -> list[Transfer] | None:
        """vLLM's ``OffloadingConnectorScheduler._get_reqs_to_store`` for one
        request at a scheduler step (stores ``step``, :mod:`sim.serving.execute.stores`):
        hash its newly computed full blocks (as :meth:`computed`); the groups
        from ``s.stored_groups`` (vLLM's ``_next_stored_block_idx``) to the last
        complete one are prepared in the first tier all or nothing
        (``LRUOffloadingManager.prepare_store``): None when the tier cannot make
        room for every one of them (nothing placed, evicted or held; the same
        groups are tried again at the request's next step), else the transfers
        (its demotions, then its store: :meth:`place_store`) and
        ``stored_groups`` moves on, the request's blocks in the tier touched
        (:meth:`_touch`).  Groups already held in a tier are not stored again
        (``block_hashes_to_store``).  ``s.unstored`` says whether
        this store was not prepared (the engine tries again only those).

        The verdict None reads the groups (``g0``, ``g1``), the request's GPU
        blocks (only ever appended to while it holds them: their count), each
        tier's held keys and the first tier's used, evictable and capacity
        bytes (:meth:`OffloadTier.state`); a retry that finds all of them as
        the last verdict found them (``s.no_room``) is that verdict again."""
        frontier, k = self._frontier(s, upto), self.k
        g0, g1 = self._hash(s, frontier), frontier // k
        if not (self.tiers and store) or g1 <= g0:
            s.unstored = False
            return []
        seen = (g0, g1, len(s.blocks), *[t.state() for t in self.tiers])
        if s.unstored and s.no_room == seen:
            return None  # nothing the verdict reads changed: still no room
        s.unstored = False
        if min(s.blocks[g0 * k : g1 * k]) >= 0:  # every group whole: the count is known first
            keys = self._keys(s)[g0:g1]
            held: set[int] = set()
            for t in self.tiers:
                held.update(filter(t.entries.__contains__, keys))
            if not self._room(len(keys) - len(held)):
                s.unstored, s.no_room = True, seen  # no group picked: a retry costs no arrays
                return None
        groups, mine = self._store_groups(s, g0, g1)
        if groups and not self._room(len(groups)):
            s.unstored, s.no_room = True, seen
            return None
        s.stored_groups = g1
        if not groups:
            return []
        self.gpu.acquire_all(mine)
        placed = self.place_store(StoreRequest(s.req.rid, groups, s.req.space))
        self._touch(self.tiers[0], self._keys(s)[:g1])  # _get_reqs_to_store: manager.touch
        return placed.demotions + ([placed.store] if placed.store is not None else [])

    def _touch(self, tier: OffloadTier, keys: list[int]) -> None:
        """vLLM's ``LRUOffloadingManager.touch`` of a request's first offload
        blocks (their ``keys``): each one ``tier`` holds made most recently
        used, in reverse, so the first block ends most recent (``for
        block_hash in reversed(...): move_to_end``)."""
        got = list(filter(None, map(tier.entries.get, reversed(keys))))
        if got:
            tier.touch_all(got)

    def _keys(self, s: Seq) -> list[int]:
        """``s``'s offload-block keys, each group's last block hash (``s.keys``,
        made once while ``s`` holds blocks)."""
        keys = s.keys
        if keys is None:
            hs, k = s.req.hashes, self.k
            keys = s.keys = ints(hs, k - 1, len(hs) // k * k, k)
        return keys

    def _frontier(self, s: Seq, upto: int | None) -> int:
        done = s.cached_tokens + s.prefilled if upto is None else upto
        return min(len(s.req.hashes), done // self.B)

    def _hash(self, s: Seq, frontier: int) -> int:
        """Give ``s``'s newly computed full blocks (up to block ``frontier``)
        their hash on the GPU (they become shareable); returns the first group
        not yet stored."""
        if len(s.blocks) < frontier:
            hs = s.req.hashes
            blocks, made = self.gpu.promote_all(ints(hs, len(s.blocks), frontier), ready=True)
            s.private -= made
            s.blocks += blocks
        return s.stored_groups

    def _room(self, n: int) -> bool:
        """Whether the first tier can hold ``n`` more blocks now, evicting only
        ready entries in use by nobody (``LRUOffloadingManager.prepare_store``:
        ``ref_cnt == 0``; a block being stored, loaded or copied on is never a
        victim).  Looked at without evicting: whether the tier has room now
        or the victim walk would make it (:meth:`OffloadTier.room_for`)."""
        tier = self.tiers[0]
        need = [0] * len(tier.devices)
        for r, m in Counter(layer_runs(tier.ratios, n, tier.layers)).items():
            for d, b in enumerate(tier.bytes_on(r)):
                need[d] += m * b
        return tier.room_for(need)

    def _store_groups(
        self, s: Seq, g0: int, g1: int
    ) -> tuple[list[tuple[int, tuple[GpuBlock, ...]]], np.ndarray]:
        """Groups ``g0 .. g1`` of ``s`` held in no tier and whole on the GPU
        (:func:`sim.serving.policy.storegroups.store_groups`), and their blocks."""
        return store_groups(self.tiers, self._ones, self.k, s, self._keys(s)[g0:g1], g0, g1)

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

    def place_store(self, req: StoreRequest) -> Placement:
        """Place ``req``'s groups in the first tier, evicting (and demoting) LRU
        victims as needed; groups with no room at all are let go (not
        offloaded; never after :meth:`_room` said yes).  A demoted victim
        leaves the first tier at once, its copy placed below; the slots it
        leaves are written by the store once the demotion has read them
        (:class:`sim.serving.execute.stores.Offloader` starts the store when the
        demotion ends), so nothing waits for room."""
        sources = dict(req.groups)
        pending = [key for key, _ in req.groups]
        tier = self.tiers[0]
        placed = tier.place(pending, self._evict if self._demotes(0) else None)
        if len(placed) < len(pending):  # some were let go
            gone = _let_go(pending, placed, req.space)
            # no room: not offloaded; one release of the groups in reverse is one each in order
            self.gpu.release(list(chain.from_iterable(map(sources.get, reversed(gone)))), 0)
        demotions = self._demotion_transfers() if self._demotions else []
        store = None
        if placed:
            pieces = store_pieces(None, tier, placed, self.gpu_name)
            store = Transfer("store", "dst", req.rid, pieces, None, tier, placed, [], sources)
        return Placement(demotions, store)

    def on_stored(self, t: Transfer) -> list[Transfer]:
        """Store or demotion ``t`` ended: its entries are ready below, its sources
        let go; returns the transfers that follow (write-through to the next tier,
        :mod:`sim.serving.policy.writethrough`)."""
        assert t.dst is not None
        through = t.src is None and self.design.cpu_to_ssd == "write_through"
        through = through and len(self.tiers) > 1
        fresh = t.dst.complete_all(t.entries)  # all were not ready: all still held there
        if t.olds and t.tag != "demote":  # a demotion's victims left their tier already
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

    def _evict(self, tier: OffloadTier, victims: Sequence[Entry]) -> None:
        """``victims`` leave ``tier``: their copies are placed in the tier
        below, in order (those not there already and for which that tier has
        room), and the copies' pieces made now, while the victims are still
        in ``tier`` (:func:`store_pieces` reads their layout there); ``tier``
        then drops them, their slots given to the keys that evicted them."""
        below = self._below.get(tier)
        if below is None:
            return
        placed = below.place([e.key for e in victims], None)
        if placed:
            pieces = store_pieces(tier, below, placed, self.gpu_name)
            self._demotions.append((tier, below, placed, pieces))

    def _demotion_transfers(self) -> list[Transfer]:
        """The demotions :meth:`_evict` decided for one store, one transfer per
        (tier, tier below) holding every victim's copy
        (:func:`sim.serving.policy.demotions.demotion_transfers`)."""
        decided, self._demotions = self._demotions, []
        return demotion_transfers(decided)

    # ---- warm-up ------------------------------------------------------------------
    def preload(self, req: Request) -> None:
        """Store ``req``'s prompt blocks in the offload tiers at no time cost, as
        the design would have after serving it once (seed 004's warm-up pass)."""
        if not self.tiers:
            return
        hs, k = req.hashes, self.k
        keys = [hs[g * k + k - 1] for g in range(len(hs) // k)]
        keys = [key for key in keys if not any(key in t.entries for t in self.tiers)]
        placed = self.tiers[0].place(keys, self._evict_now if self._demotes(0) else None)
        self.tiers[0].complete_all(placed)
        if self.design.cpu_to_ssd == "write_through" and len(self.tiers) > 1:
            below = self.tiers[1].place([e.key for e in placed], None)
            self.tiers[1].complete_all(below)

    def _evict_now(self, tier: OffloadTier, victims: Sequence[Entry]) -> None:
        i = self.tiers.index(tier)
        if self.design.cpu_to_ssd == "on_evict" and i + 1 < len(self.tiers):
            below = self.tiers[i + 1]
            below.complete_all(below.place([e.key for e in victims], self._evict_now))


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


def _let_go(pending: list[int], placed: list[Entry], space: KeySpace | None) -> list[int]:
    """The keys of ``pending`` not ``placed``, in the order of the set of their
    hashes (iterated as a set of the hashes, which orders by value: the order
    the GPU blocks of the groups let go are released in, so kept as it was
    when keys were the hashes themselves; no ``space``: each key is its own)."""
    hashes = space.hash_list if space is not None else list
    values = hashes(pending)
    key_of = dict(zip(values, pending, strict=True))
    return [key_of[h] for h in set(values) - set(hashes([e.key for e in placed]))]


_TIER, _ENTRY, _BLOCKS = itemgetter(0), itemgetter(1), itemgetter(3)


__all__ = ["BlockManager", "Lookup", "Placement", "Seq"]
