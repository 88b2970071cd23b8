"""The GPU's KV blocks (the GPU cache of :mod:`sim.serving.tiers.blocks`).

**GPU cache** (:class:`GpuCache`): ``capacity`` blocks of ``block_tokens``
tokens.  Hashed (prefix-cacheable) blocks are cached by their key (a dense
id, :class:`sim.serving.requests.KeySpace`) with a reference count
(requests using them) and a ``ready`` flag (False while their KV is
being loaded).  Blocks of a running request that carry no hash (its
partial last block, generated tokens, duplicates) are counted in
``private``.  Blocks nobody references stay cached and evictable in LRU
order; a finishing request releases its blocks tail first, so its prefix is
evicted last (as vLLM's free-block queue does).

**Arrays, not objects.** A cached block is a *slot*: an index into the
cache's arrays ``key``, ``ref`` (its reference count) and ``ready``; a table
indexed by key maps a key to its slot (a :data:`GpuBlock` is that int, -1
where a caller's position holds none), so a lookup, a promotion and an
eviction are array reads and writes, no hashing. The table is paged: key
``k``'s entry is ``_pool[k + _shift[k >> 8]]`` (pages of 256 keys, made as
their first key is cached, -1: not cached), and a page not made has a shift
that puts every key before ``_pool``: a read clips it to ``_pool[0]``, of a
page never written (-1). An engine of a fleet caches a share of the run's
keys spread over the whole id range (ids follow the trace, the router
spreads the requests), so a flat array per engine would cost every engine 4
bytes for every key of the run (5.7M keys in the whole conversation trace at
16-token blocks: 23 MB an engine, 1.5 GB over 64); pages cost only where its
keys are. ``_shift`` ends in such a shift (a key past the table clips there)
and ``ready`` in a False that slot -1 reads, so a prefix lookup is a few
array reads a chunk of keys, no masks or range checks. A request's blocks
move together, so the books are kept by vector operations over its slots:
one ``np.add.at`` to acquire them, one to release them; promoting a
request's new blocks writes their slots at their keys and reads them back (a
repeat or a key cached already reads otherwise: undone, the rare slow
path). The LRU of evictable blocks is a queue of *runs*: the blocks that one
release left unreferenced, in the order the per-block reference (an ordered
dict, a block appended as its count reaches 0) would have appended them,
each stamped with a global counter. An entry of a run is live while its slot
still carries that stamp and a count of 0 (acquiring a block makes its entry
stale; releasing it again appends it with a new stamp);
:meth:`GpuCache.allocate` takes the ``n`` oldest live entries in one go,
probing the head run in doubling chunks. Stale entries are dropped when they
outnumber the live ones (amortised O(1) per block).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np

GpuBlock = int  # a cached GPU block: its slot in GpuCache's arrays (-1: none)

_EMPTY = np.zeros(0, dtype=np.int64)
_PROBE = 64  # LRU entries checked at first by an eviction; doubled at each round
_SMALL_RUN = 32  # runs merged (same order) while they stay this short
_FEW = 8  # at most this many blocks are counted one by one
_SET_MAX = 64  # repeats among at most this many slots are found by a set
_BITS = 8  # keys of a page of the key -> slot table: 256 (ids of about one request's blocks)
_SWEEP_MIN = 64  # pages of the key table in use before the first sweep for empty ones
_NONE = -(1 << 62)  # the shift of a page not made: any key's entry then lies before _pool


class GpuCache:
    """The GPU's KV blocks: cached (hashed) ones and per-request private ones."""

    def __init__(self, capacity: int, prefix_cache: bool = True):
        if capacity <= 0:
            raise ValueError(f"GPU cache needs > 0 blocks, got {capacity}")
        self.capacity = capacity
        self.prefix_cache = prefix_cache
        # key >> _BITS -> where its page's entries start in _pool less its first key
        # (a key's entry: key + _shift[key >> _BITS]); _NONE: no page (the last: a sentinel)
        self._shift = np.full(65, _NONE, dtype=np.int64)
        self._pool = np.full(16 << _BITS, -1, dtype=np.int32)  # pages of key -> slot, -1: none
        self._pages = 1  # pages of _pool ever used (page 0 is never written)
        self._owner = np.full(16, -1, dtype=np.int64)  # per page of _pool: its key page, -1: none
        self._spare: list[int] = []  # pages of _pool let go (every entry -1), reused first
        self._limit = _SWEEP_MIN  # pages of _pool in use from which a sweep frees empty ones
        self.n_cached = 0  # keys cached
        self.private = 0
        self.evictions = 0
        self.n_evictable = 0  # cached blocks with a count of 0 (all of them evictable)
        n = min(capacity, 1 << 16)
        self.key = np.zeros(n, dtype=np.int64)
        self.ref = np.zeros(n, dtype=np.int64)
        self.ready = np.zeros(n + 1, dtype=bool)  # the last: slot -1's, always False
        self._stamp = np.full(n, -1, dtype=np.int64)  # the LRU entry a slot is live under
        self._seen = np.zeros(n, dtype=np.int64)  # scratch for duplicate checks
        self._free = np.arange(n - 1, -1, -1, dtype=np.int64)  # stack of unused slots
        self._top = n
        self._runs: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (slots, stamps), LRU first
        self._head = 0  # entries of the first run already taken
        self._queued = 0  # entries in the runs, stale ones included
        self._tail: list[int] = []  # newest entries pushed a few at a time, not yet a run
        self._tail_st: list[int] = []  # their stamps
        self._clock = 0
        self.evictable = EvictableView(self)

    @property
    def used(self) -> int:
        return self.n_cached + self.private

    @property
    def free(self) -> int:
        return self.capacity - self.used

    # ---- lookups and reference counts ------------------------------------------------
    def slot(self, key: int) -> int:
        """The slot of ``key``, -1 if not cached."""
        page = key >> _BITS
        shift = self._shift.item(page) if page < len(self._shift) else _NONE
        return -1 if shift == _NONE else self._pool.item(key + shift)

    def __contains__(self, key: int) -> bool:
        """Whether ``key`` is cached (ready or not)."""
        return self.slot(key) >= 0

    def slots_of(self, keys: Sequence[int] | np.ndarray) -> np.ndarray:
        """The slot of each of ``keys`` (-1: not cached); ``self.ready`` of
        them says which are ready (-1 reads the sentinel: False)."""
        ks = np.asarray(keys, dtype=np.int64)
        at = ks + self._shift.take(ks >> _BITS, mode="clip")  # past the table: the sentinel
        return self._pool.take(at, mode="clip")  # no page (< 0): page 0's first entry, -1

    def prefix_blocks(self, keys: np.ndarray) -> int:
        """How many of ``keys``, from the first, are cached (ready or not) up
        to the first that is not (what a router's KV index matches a prompt
        against, :class:`sim.fleet.router.InstanceState`)."""
        got = self.slots_of(keys) >= 0
        return len(got) if np.count_nonzero(got) == len(got) else int(got.argmin())

    def cached_keys(self) -> list[int]:
        """The keys cached, ascending (for tests and reports)."""
        pages = np.flatnonzero(self._shift != _NONE)
        first = (pages << _BITS) + self._shift[pages]
        rows, cols = np.nonzero(self._pool[first[:, None] + np.arange(1 << _BITS)] >= 0)
        return ((pages[rows] << _BITS) + cols).tolist()

    def lookup(self, key: int) -> GpuBlock | None:
        """The ready cached block of ``key`` (None if none, or no prefix caching)."""
        slot = self.slot(key) if self.prefix_cache else -1
        return slot if slot >= 0 and self.ready[slot] else None

    def acquire(self, block: GpuBlock) -> None:
        self.acquire_all([block])

    def acquire_all(self, blocks: Sequence[GpuBlock] | np.ndarray) -> None:
        """One more reference to each of ``blocks`` (repeats count each time);
        a block at 0 leaves the LRU."""
        if len(blocks) <= _FEW:  # a few: one by one is cheaper than array calls
            ref = self.ref
            for slot in blocks:
                r = ref.item(slot)
                self.n_evictable -= r == 0
                ref[slot] = r + 1
            return
        arr = np.asarray(blocks, dtype=np.int64)
        idle = arr[self.ref[arr] == 0]
        if len(idle):
            self.n_evictable -= len(self._last_each(idle))
        np.add.at(self.ref, arr, 1)

    def hold(self, blocks: Sequence[GpuBlock], n: int) -> bool:
        """Acquire ``blocks`` if ``n`` more could then be allocated (True);
        else (False) change nothing but the LRU order, as acquiring and
        releasing them would: their unreferenced ones become the most
        recently used, last block first."""
        if not len(blocks):
            return self.free + self.n_evictable >= n
        arr = np.asarray(blocks, dtype=np.int64)
        idle = self._last_each(arr[self.ref[arr] == 0][::-1])  # in the order a release frees
        if self.free + self.n_evictable - len(idle) >= n:
            self.n_evictable -= len(idle)
            np.add.at(self.ref, arr, 1)
            return True
        self._push(idle, requeue=True)
        return False

    def allocate(self, n: int) -> bool:
        """Reserve ``n`` private blocks, evicting unreferenced cached ones (LRU)."""
        if self.free + self.n_evictable < n:
            return False
        need = n - self.free
        if need > 0:
            victims = self._pop_lru(need)
            self._forget(victims)
            self.evictions += need
            self.n_evictable -= need
        self.private += n
        return True

    def promote(self, key: int, ready: bool) -> GpuBlock | None:
        """Turn one of the caller's private blocks into cached block ``key``
        (held once by the caller); None if ``key`` is cached already."""
        out, _made = self.promote_all([key], ready)
        return out[0] if out[0] >= 0 else None

    def promote_all(self, keys: Sequence[int], ready: bool) -> tuple[list[GpuBlock], int]:
        """:meth:`promote` for each of ``keys`` in order: the blocks (-1 where
        the key was cached already, or repeats an earlier one) and how many of
        the caller's private blocks became cached."""
        n = len(keys)
        if not n:
            return [], 0
        ks = np.asarray(keys, dtype=np.int64)
        at = self._at(ks)
        pool = self._pool
        cur = pool[at]
        if n <= self._top and cur.max() < 0:  # all new: no repeats is the usual case
            slots = self._take(n)
            pool[at] = slots
            if (pool[at] == slots).all():  # a repeat reads a later slot back
                self._fill(slots, ks, ready)
                return slots.tolist(), n
            pool[at] = -1  # undone: the slow path
            self._top += n  # the same free slots back on the stack, in the same places
        new = cur < 0
        if new.any():  # repeats: only a key's first time can be new
            _, first = np.unique(ks, return_index=True)
            once = np.zeros(n, dtype=bool)
            once[first] = True
            new &= once
        slots = self._take(int(new.sum()))  # new cached blocks, each held once
        pool[at[new]] = slots
        self._fill(slots, ks[new], ready)
        full = np.full(n, -1, dtype=np.int64)
        full[new] = slots
        return full.tolist(), len(slots)

    def _fill(self, slots: np.ndarray, keys: np.ndarray, ready: bool) -> None:
        """The arrays of new cached blocks ``slots`` (already in the table)
        for ``keys``, each held once, made of the caller's private blocks."""
        self.key[slots] = keys
        self.ref[slots] = 1
        self.ready[slots] = ready
        self.private -= len(keys)
        self.n_cached += len(keys)

    def set_ready(self, blocks: Sequence[GpuBlock]) -> None:
        """Their loads ended: ``blocks`` (-1 entries skipped) can be hits."""
        arr = np.asarray(blocks, dtype=np.int64)
        self.ready[arr[arr >= 0]] = True

    def release(self, blocks: Sequence[GpuBlock] | np.ndarray, private: int) -> None:
        """A request lets go of its blocks (-1 entries skipped) and ``private``
        blocks: tail first, so its prefix is the most recently used.  A block
        whose count reaches 0 joins the LRU (ready, prefix caching on) or
        leaves the cache."""
        self.private -= private
        if not len(blocks):
            return
        if len(blocks) <= _FEW:
            self._release_few(blocks)
            return
        arr = np.asarray(blocks, dtype=np.int64)[::-1]
        if arr.min() < 0:  # -1 entries: skipped (one vector test, not a list scan)
            arr = arr[arr >= 0]
            if not len(arr):
                return
        np.add.at(self.ref, arr, -1)
        zero = self._last_each(arr[self.ref[arr] == 0])  # in the order each reached 0
        if not len(zero):
            return
        if self.prefix_cache:
            keep = self.ready[zero]
            self._push(zero[keep])
            zero = zero[~keep]
        if len(zero):
            self._forget(zero)

    def _release_few(self, blocks: Sequence[GpuBlock] | np.ndarray) -> None:
        """:meth:`release` of a few blocks, one by one (a repeated block
        reaches 0 at its last decrement, where the array path puts it too)."""
        ref, ready, keep, drop = self.ref, self.ready, [], []
        for slot in reversed(blocks):
            if slot >= 0:
                r = ref.item(slot) - 1
                ref[slot] = r
                if r == 0:
                    (keep if self.prefix_cache and ready.item(slot) else drop).append(int(slot))
        if keep:
            self._push_few(keep)
        if drop:
            self._forget(np.array(drop, dtype=np.int64))

    def _push_few(self, slots: list[int]) -> None:
        """:meth:`_push` of a few slots: stamped one by one and kept in the
        tail lists until they make a run (or the queue is read)."""
        stamp, st = self._stamp, self._clock
        for i, slot in enumerate(slots):
            stamp[slot] = st + i
        self._clock += len(slots)
        self._tail += slots
        self._tail_st += range(st, st + len(slots))
        self._queued += len(slots)
        self.n_evictable += len(slots)
        if len(self._tail) >= _SMALL_RUN or self._queued > 2 * self.n_evictable + 1024:
            self._flush()
            if self._queued > 2 * self.n_evictable + 1024:
                self._compact()

    def _flush(self) -> None:
        """The tail lists become the newest run."""
        if self._tail:
            slots = np.array(self._tail, dtype=np.int64)
            self._runs.append((slots, np.array(self._tail_st, dtype=np.int64)))
            self._tail, self._tail_st = [], []

    # ---- the LRU as runs ---------------------------------------------------------------
    def _push(self, slots: np.ndarray, requeue: bool = False) -> None:
        """``slots`` (count 0, in this order) become the most recently used;
        ``requeue``: they were evictable already (moved, not added)."""
        if not len(slots):
            return
        self._flush()
        stamps = np.arange(self._clock, self._clock + len(slots), dtype=np.int64)
        self._clock += len(slots)
        self._stamp[slots] = stamps
        runs = self._runs
        if runs and len(runs[-1][0]) + len(slots) <= _SMALL_RUN:  # not many tiny runs
            last = runs.pop()
            runs.append((np.concatenate([last[0], slots]), np.concatenate([last[1], stamps])))
        else:
            runs.append((slots, stamps))
        self._queued += len(slots)
        self.n_evictable += 0 if requeue else len(slots)
        if self._queued > 2 * self.n_evictable + 1024:
            self._compact()

    def _live(self, slots: np.ndarray, stamps: np.ndarray) -> np.ndarray:
        return (self._stamp[slots] == stamps) & (self.ref[slots] == 0)

    def _compact(self) -> None:
        """The runs as one run of their live entries (same order)."""
        slots, stamps = self._queue()
        ok = self._live(slots, stamps)
        self._runs = deque([(slots[ok], stamps[ok])]) if ok.any() else deque()
        self._head, self._queued = 0, int(ok.sum())

    def _queue(self) -> tuple[np.ndarray, np.ndarray]:
        """Every queued entry (from the head), LRU first."""
        self._flush()
        if not self._runs:
            return _EMPTY, _EMPTY
        h = self._head
        runs = list(self._runs)
        slots = np.concatenate([runs[0][0][h:], *[r[0] for r in runs[1:]]])
        stamps = np.concatenate([runs[0][1][h:], *[r[1] for r in runs[1:]]])
        return slots, stamps

    def _pop_lru(self, need: int) -> np.ndarray:
        """The ``need`` least recently used evictable slots (there are as many),
        taken off the queue in LRU order."""
        out: list[np.ndarray] = []
        got = 0
        self._flush()
        while got < need:
            slots, stamps = self._runs[0]
            h, step = self._head, max(need - got, _PROBE)
            while h < len(slots) and got < need:
                e = min(h + step, len(slots))
                step *= 2
                ok = self._live(slots[h:e], stamps[h:e])
                n_ok = int(np.count_nonzero(ok))
                if n_ok > need - got:  # the chunk's live entries past the need stay queued
                    idx = np.flatnonzero(ok)[: need - got]
                    e = h + int(idx[-1]) + 1
                    ok, n_ok = ok[: e - h], len(idx)
                out.append(slots[h:e][ok])
                got += n_ok
                h = e
            if h >= len(slots):
                self._runs.popleft()
                self._queued -= len(slots) - self._head
                self._head = 0
            else:
                self._queued -= h - self._head
                self._head = h
        return np.concatenate(out) if len(out) > 1 else out[0]

    # ---- slots --------------------------------------------------------------------------
    def _take(self, n: int) -> np.ndarray:
        """``n`` unused slots (the arrays grow when short)."""
        if self._top < n:
            self._grow(n - self._top)
        self._top -= n
        return self._free[self._top : self._top + n].copy()

    def _forget(self, slots: np.ndarray) -> None:
        """``slots`` leave the cache (their keys uncached, the slots unused)."""
        self._pool[self._at(self.key[slots])] = -1
        self.n_cached -= len(slots)
        self._give_back(slots)

    def _give_back(self, slots: np.ndarray) -> None:
        self._stamp[slots] = -1
        self.ready[slots] = False
        self._free[self._top : self._top + len(slots)] = slots
        self._top += len(slots)

    def _sweep(self) -> None:
        """Let go of the pages of ``_pool`` that hold no cached key (their key
        pages unmade, the pool pages spare for the next ones made), and sweep
        next when twice as many pages as are left are in use: the pages follow
        the keys cached (at most the capacity's), not every key the engine
        ever cached, at O(1) amortised per page made."""
        used = np.flatnonzero(self._owner[: self._pages] >= 0)
        rows = self._pool[: self._pages << _BITS].reshape(-1, 1 << _BITS)[used]
        empty = used[~(rows >= 0).any(axis=1)]
        self._shift[self._owner[empty]] = _NONE
        self._owner[empty] = -1
        self._spare += empty.tolist()
        self._limit = max(2 * (len(used) - len(empty)), _SWEEP_MIN)

    def _at(self, keys: np.ndarray) -> np.ndarray:
        """Where in ``_pool`` the entries of ``keys`` are, their pages made
        (spare pages first, then new ones; the tables grown, at least
        doubled, as needed)."""
        page = keys >> _BITS
        top = int(page.max())
        if top >= len(self._shift) - 1:  # the sentinel stays past every page made
            pad = max(len(self._shift), top + 2 - len(self._shift))
            self._shift = np.concatenate([self._shift, np.full(pad, _NONE, dtype=np.int64)])
        shift = self._shift[page]
        none = shift == _NONE
        if none.any() and not self._spare and self._pages - 1 >= self._limit:
            self._sweep()  # before the keys' pages are read: it may unmake empty ones
            shift = self._shift[page]
            none = shift == _NONE
        if none.any():  # pages to make: spare pages of _pool, then the next ones
            new = np.unique(page[none])
            reuse = min(len(new), len(self._spare))
            fresh = len(new) - reuse
            got = self._spare[len(self._spare) - reuse :]
            del self._spare[len(self._spare) - reuse :]
            got += range(self._pages, self._pages + fresh)
            self._pages += fresh
            if self._pages << _BITS > len(self._pool):
                more = max(len(self._pool), (self._pages << _BITS) - len(self._pool))
                self._pool = np.concatenate([self._pool, np.full(more, -1, dtype=np.int32)])
            if self._pages > len(self._owner):
                more = max(len(self._owner), self._pages - len(self._owner))
                self._owner = np.concatenate([self._owner, np.full(more, -1, dtype=np.int64)])
            pool_pages = np.array(got, dtype=np.int64)
            self._owner[pool_pages] = new
            self._shift[new] = (pool_pages - new) << _BITS
            shift = self._shift[page]
        return keys + shift

    def _grow(self, more: int) -> None:
        old = len(self.key)
        new = max(2 * old, old + more)
        pad = new - old
        self.key = np.concatenate([self.key, np.zeros(pad, dtype=np.int64)])
        self.ref = np.concatenate([self.ref, np.zeros(pad, dtype=np.int64)])
        self.ready = np.concatenate([self.ready, np.zeros(pad, dtype=bool)])
        self._stamp = np.concatenate([self._stamp, np.full(pad, -1, dtype=np.int64)])
        self._seen = np.zeros(new, dtype=np.int64)
        free = np.empty(new, dtype=np.int64)
        free[: self._top] = self._free[: self._top]
        free[self._top : self._top + pad] = np.arange(new - 1, old - 1, -1, dtype=np.int64)
        self._free, self._top = free, self._top + pad

    def _last_each(self, slots: np.ndarray) -> np.ndarray:
        """``slots`` with each repeated slot kept at its last occurrence only
        (the usual case, no repeats, is found by a set when short, else by
        two vector operations)."""
        if len(slots) < 2:
            return slots
        if len(slots) <= _SET_MAX:
            if len(set(slots.tolist())) == len(slots):
                return slots
        else:
            pos = np.arange(len(slots), dtype=np.int64)
            self._seen[slots] = pos
            if (self._seen[slots] == pos).all():
                return slots
        _, first = np.unique(slots[::-1], return_index=True)
        return slots[np.sort(len(slots) - 1 - first)]


class EvictableView:
    """The evictable (cached, unreferenced) blocks' keys, LRU first: ``len``,
    ``in`` and iteration (the last walks the queue; for tests and reports)."""

    def __init__(self, gpu: GpuCache):
        self._gpu = gpu

    def __len__(self) -> int:
        return self._gpu.n_evictable

    def __contains__(self, key: object) -> bool:
        g = self._gpu
        slot = g.slot(key)  # type: ignore[arg-type]
        return slot >= 0 and g.ref[slot] == 0

    def __iter__(self) -> Iterator[int]:
        g = self._gpu
        slots, stamps = g._queue()
        return iter(g.key[slots[g._live(slots, stamps)]].tolist())
