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
transfers as plain data (:class:`sim.serving.jobs.Transfer`, pieces with
their byte ranges) and is told when they end.  Loads: :meth:`load` then
:meth:`on_loaded`.  Stores: :meth:`computed` returns the blocks to offload
(a :class:`~sim.serving.jobs.StoreRequest`); :meth:`place_store` places
them and returns the demotions it caused, the store itself and what must
wait for a demotion to drain (the executor asks again when one has);
:meth:`on_stored` completes a store or demotion and returns the transfers
that follow it (LMCache's write-through).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.serving.blocks import Entry, GpuBlock, GpuCache, OffloadTier
from sim.serving.designs import DesignParams
from sim.serving.jobs import StoreRequest, Transfer, load_pieces, store_pieces, store_pieces_each
from sim.serving.requests import Request
from sim.serving.tierplace import fitting_prefix, room_blocked


@dataclass
class Placement:
    """What :meth:`BlockManager.place_store` decided: demotions to start (first),
    the store, and the groups that wait for a demotion of tier 0 to drain."""

    demotions: list[Transfer]
    store: Transfer | None
    waiting: StoreRequest | None


@dataclass
class Lookup:
    """A prefix hit: GPU blocks, then (tier, entry, first block, blocks) below."""

    gpu: list[GpuBlock]
    lower: list[tuple[OffloadTier, Entry, int, int]]
    blocks: int


class Seq:
    """The engine's state of one request.

    ``prefill_left`` (prompt tokens neither cached nor prefilled yet) is read
    several times per running request per iteration, so it is a plain
    attribute kept up to date by the setters of ``cached_tokens`` and
    ``prefilled`` rather than recomputed on every read.
    """

    __slots__ = ("req", "total_blocks", "blocks", "private", "_cached", "_prefilled",
                 "prefill_left", "generated", "stored_groups", "lookup", "load")  # fmt: skip

    def __init__(self, req: Request, total_blocks: int):
        self.req = req
        self.total_blocks = total_blocks
        self.blocks: list[GpuBlock | None] = []  # per input block
        self.private = 0
        self._cached = self._prefilled = 0
        self.prefill_left = req.input_tokens
        self.generated = 0
        self.stored_groups = 0
        self.lookup: Lookup | None = None  # hits still to load
        self.load: Transfer | None = None  # their load, once started

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens whose KV a prefix hit supplies (GPU or a lower tier)."""
        return self._cached

    @cached_tokens.setter
    def cached_tokens(self, n: int) -> None:
        self._cached = n
        self.prefill_left = self.req.input_tokens - n - self._prefilled

    @property
    def prefilled(self) -> int:
        """Prompt tokens computed by prefill chunks so far."""
        return self._prefilled

    @prefilled.setter
    def prefilled(self, n: int) -> None:
        self._prefilled = n
        self.prefill_left = self.req.input_tokens - self._cached - n


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
        self.k = design.block_factor
        self.gpu_name = gpu_name
        # demotions decided while placing (tier, below, new entry, victim), handed out after
        self._demotions: list[tuple[OffloadTier, OffloadTier, Entry, Entry]] = []

    # ---- lookup and admission ----------------------------------------------------
    def lookup(self, s: Seq) -> Lookup:
        hs, k = s.req.hashes, self.k
        limit = min(len(hs), (s.req.input_tokens - 1) // self.B)
        keys = _ints(hs, 0, min(len(hs), max(limit, 0) + k))
        cached = self.gpu.cached if self.gpu.prefix_cache else {}
        gpu: list[GpuBlock] = []
        for key in keys[: max(limit, 0)]:  # the GPU's prefix: stops at the first miss
            b = cached.get(key)
            if b is None or not b.ready:
                break
            gpu.append(b)
        j = len(gpu)
        lower = []
        while j < limit:
            last = (j // k) * k + k - 1
            if last >= len(hs):
                break
            n = min(last + 1, limit) - j
            if any(key in self.gpu.cached for key in keys[j : j + n]):
                break
            found = self._find(keys[last])
            if found is None:
                break
            lower.append((*found, j, n))
            j += n
        return Lookup(gpu, lower, j)

    def _find(self, key: int) -> tuple[OffloadTier, Entry] | None:
        for tier in self.tiers:
            e = tier.lookup(key)
            if e is not None:
                return tier, e
        return None

    def acquire(self, s: Seq, hit: Lookup, new_blocks: int) -> bool:
        """Take the hit and ``new_blocks`` more GPU blocks for ``s``; False
        (and nothing taken) if the GPU cannot make room."""
        for b in hit.gpu:
            self.gpu.acquire(b)
        if not self.gpu.allocate(new_blocks):
            self.gpu.release(hit.gpu, 0)
            return False
        s.blocks = list(hit.gpu)
        s.private = new_blocks
        s.cached_tokens = hit.blocks * self.B
        hits = {"gpu": len(hit.gpu)}
        for tier, e, j, n in hit.lower:
            tier.pin(e)
            tier.touch_all((e,))
            hits[tier.name] = hits.get(tier.name, 0) + n
            for i in range(j, j + n):
                s.blocks.append(self.gpu.promote(s.req.hashes[i], ready=False))
                s.private -= 1
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
        self.gpu.release([b for b in s.blocks if b is not None], s.private)
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
        for b in s.blocks[len(hit.gpu) :]:
            if b is not None:
                b.ready = True
        for tier, entries in _by_tier(hit.lower).items():
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
            blocks, made = self.gpu.promote_all(_ints(hs, len(s.blocks), frontier), ready=True)
            s.private -= made
            s.blocks += blocks
        g0, g1 = s.stored_groups, frontier // k
        if not (self.tiers and store) or g1 <= g0:
            return None
        s.stored_groups = g1
        held = [t.entries for t in self.tiers]
        keys = _ints(hs, g0 * k + k - 1, g1 * k, k)  # each group's last block hash
        groups: list[tuple[int, list[GpuBlock]]] = []
        for g, key in enumerate(keys, g0):
            blocks = s.blocks[g * k : (g + 1) * k]
            if None in blocks or any(key in h for h in held):
                continue
            groups.append((key, blocks))  # type: ignore[arg-type]
        if not groups:
            return None
        for _key, blocks in groups:
            for b in blocks:
                self.gpu.acquire(b)
        return StoreRequest(s.req.rid, groups)

    def place_store(self, req: StoreRequest) -> Placement:
        """Place ``req``'s groups in the first tier, evicting (and demoting) as
        needed; groups with no room at all are let go (not offloaded)."""
        tier = self.tiers[0]
        sources = dict(req.groups)
        pending = [key for key, _ in req.groups]
        placed, waiting = tier.place(pending, self._evict if self._demotes(0) else None)
        if len(placed) + len(waiting) < len(pending):  # some were let go
            for key in set(pending) - {e.key for e in placed} - set(waiting):
                self.gpu.release(sources[key], 0)  # no room: not offloaded
        demotions = self._demotion_transfers()
        store = None
        if placed:
            pieces = store_pieces(None, tier, placed, self.gpu_name)
            store = Transfer("store", "dst", req.rid, pieces, None, tier, placed, [], sources)
        return Placement(demotions, store, _rest(req, pending, waiting, sources))

    def keys_added(self, keys: set[int], since: int) -> bool:
        """Whether one of ``keys`` was added to tier 0 since position ``since``
        of its ``added`` log (True when it keeps none).  A waiting store none
        of whose keys was added, placed again while :meth:`room_blocked`,
        would decide what it did last time (every key waits; nothing placed,
        evicted or let go: a key present would be skipped and let go), so it
        need not be placed again."""
        added = self.tiers[0].added
        return added is None or not keys.isdisjoint(added[since:])

    def room_blocked(self) -> bool:
        """Whether every key a store places in tier 0 now must wait, with
        nothing evicted (:func:`sim.serving.tierplace.room_blocked`)."""
        return room_blocked(self.tiers[0], self._demotes(0))

    def fitting_prefix(self, n: int) -> int:
        """How many keys of a waiting store of ``n`` keys, none in tier 0, to
        place alone (:func:`sim.serving.tierplace.fitting_prefix`); 0: all."""
        return fitting_prefix(self.tiers[0], self._demotes(0), n)

    def on_stored(self, t: Transfer) -> list[Transfer]:
        """Store or demotion ``t`` ended: its entries are ready below, its sources
        let go; returns the transfers that follow (write-through to the next tier)."""
        assert t.dst is not None
        t.dst.complete_all(t.entries)
        if t.tag == "demote":
            for old in t.olds:
                t.src.drained(old)  # type: ignore[union-attr]
        elif t.olds:
            t.src.unpin_all(t.olds)  # type: ignore[union-attr]
        for e in t.entries:
            if e.key in t.sources:
                self.gpu.release(t.sources[e.key], 0)
        if t.src is None and self.design.cpu_to_ssd == "write_through" and len(self.tiers) > 1:
            return self._write_through(0, t.entries, t.rid)
        return []

    def _write_through(self, i: int, entries: list[Entry], rid: int) -> list[Transfer]:
        src, dst = self.tiers[i], self.tiers[i + 1]
        live = [e for e in entries if src.entries.get(e.key) is e]
        placed, _ = dst.place([e.key for e in live], None)
        if not placed:
            return []
        olds = [src.entries[e.key] for e in placed]
        for old in olds:
            src.pin(old)
        pieces = store_pieces(src, dst, placed, self.gpu_name)
        return [Transfer("store", "dst", rid, pieces, src, dst, placed, olds)]

    def _demotes(self, i: int) -> bool:
        """Whether tier ``i``'s victims are demoted (else :meth:`_evict` always
        drops them, and placement is told so by passing no callback)."""
        return self.design.cpu_to_ssd == "on_evict" and i + 1 < len(self.tiers)

    def _evict(self, tier: OffloadTier, e: Entry) -> bool:
        """An entry leaves ``tier``: demote it (True) or drop it (False)."""
        i = self.tiers.index(tier)
        if self.design.cpu_to_ssd != "on_evict" or i + 1 >= len(self.tiers):
            return False
        below = self.tiers[i + 1]
        if e.key in below.entries:
            return False
        placed, _ = below.place([e.key], None)
        if not placed:
            return False
        self._demotions.append((tier, below, placed[0], e))
        return True

    def _demotion_transfers(self) -> list[Transfer]:
        """The demotions :meth:`_evict` decided, in that order: a transfer per
        victim, their pieces made together per (tier, tier below)
        (:func:`store_pieces_each`: each the pieces of that victim alone)."""
        decided, self._demotions = self._demotions, []
        by_pair: dict[tuple[OffloadTier, OffloadTier], list[int]] = {}
        for n, (tier, below, _new, _old) in enumerate(decided):
            by_pair.setdefault((tier, below), []).append(n)
        pieces: list = [None] * len(decided)
        for (tier, below), idx in by_pair.items():
            made = store_pieces_each(tier, below, [decided[n][2] for n in idx], self.gpu_name)
            for n, p in zip(idx, made, strict=True):
                pieces[n] = p
        return [
            Transfer("demote", "dst", -1, p, tier, below, [new], [old])
            for (tier, below, new, old), p in zip(decided, pieces, strict=True)
        ]

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


def _ints(hs: Sequence[int], start: int, stop: int, step: int = 1) -> list[int]:
    """``hs[start:stop:step]`` as Python ints (``hs`` a tuple or an int64 array)."""
    part = hs[start:stop:step]
    return part.tolist() if hasattr(part, "tolist") else list(part)


def _rest(
    req: StoreRequest, pending: list[int], waiting: list[int], sources: dict[int, list[GpuBlock]]
) -> StoreRequest | None:
    """The groups of ``req`` whose ``waiting`` keys wait (None if none): a slice
    of its groups when they are its last ones (the usual case: from the first
    key that must wait on), else picked key by key."""
    if not waiting:
        return None
    cut = len(pending) - len(waiting)
    if cut >= 0 and pending[cut:] == waiting:
        return StoreRequest(req.rid, req.groups[cut:])
    return StoreRequest(req.rid, [(k, sources[k]) for k in waiting])


def _by_tier(lower: list[tuple[OffloadTier, Entry, int, int]]) -> dict[OffloadTier, list[Entry]]:
    """The entries of lower hits, per tier, in hit order."""
    out: dict[OffloadTier, list[Entry]] = {}
    for tier, e, _j, _n in lower:
        out.setdefault(tier, []).append(e)
    return out
