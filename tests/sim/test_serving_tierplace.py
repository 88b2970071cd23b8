"""Bulk placement decides every key exactly as deciding keys one by one does.

The reference below is the per-key algorithm written plainly: every key laid
out by Algorithm 1, spilled over the devices with room, and LRU victims
found by walking the entries in LRU order (no heaps, no runs).  Random
workloads (seeded) drive it and :class:`OffloadTier` side by side: the same
keys placed, the same victims in the same order, the same used bytes, slots
and LRU order after every step.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from sim.serving.tiers.blocks import READY, Entry, OffloadTier
from sim.serving.tiers.layout import SlotAllocator, layer_stride
from sim.serving.tiers.placement import layer_runs


class RefEntry:
    def __init__(self, key: int, runs, slots, nbytes: list[float]):
        self.key, self.runs, self.slots, self.nbytes = key, runs, slots, nbytes
        self.ref_cnt = -1


class RefTier:
    """Per-key placement with scan-based victims (the definition)."""

    def __init__(self, ratios, caps, layers: int, layer_bytes: float):
        self.ratios, self.caps, self.L, self.lb = list(ratios), list(caps), layers, layer_bytes
        self.entries: OrderedDict[int, RefEntry] = OrderedDict()
        self.used = [0.0] * len(caps)
        self.alloc = [SlotAllocator(layer_stride(layer_bytes)) for _ in caps]

    def need(self, runs) -> list[float]:
        out = [0.0] * len(self.caps)
        for d, l0, l1 in runs:
            out[d] += (l1 - l0) * self.lb
        return out

    def short(self, need) -> list[float]:
        return [u + n - c for u, n, c in zip(self.used, need, self.caps, strict=True)]

    def spill(self, runs):
        if len(self.caps) == 1 or all(s <= 1e-6 for s in self.short(self.need(runs))):
            return runs
        room = [c - u >= self.lb for u, c in zip(self.used, self.caps, strict=True)]
        while any(room):
            r = [p if ok else 0.0 for p, ok in zip(self.ratios, room, strict=True)]
            alt = layer_runs([p / sum(r) for p in r], 1, self.L)[0]
            short = self.short(self.need(alt))
            if all(s <= 1e-6 for s in short):
                return alt
            room = [ok and s <= 1e-6 for ok, s in zip(room, short, strict=True)]
        return runs

    def victims(self, short) -> list[RefEntry]:
        out = []
        for e in self.entries.values():
            if all(s <= 1e-6 for s in short):
                break
            if e.ref_cnt != READY:
                continue
            if any(s > 1e-6 and f > 0 for s, f in zip(short, e.nbytes, strict=True)):
                out.append(e)
                short = [s - f for s, f in zip(short, e.nbytes, strict=True)]
        return out

    def place(self, keys, evict):
        new = [k for k in keys if k not in self.entries]
        placed = []
        for key, planned in zip(new, layer_runs(self.ratios, len(new), self.L), strict=True):
            runs = self.spill(planned)
            need = self.need(runs)
            if not all(s <= 1e-6 for s in self.short(need)):
                if any(n > c for n, c in zip(need, self.caps, strict=True)):
                    continue  # never fits: nothing evicted
                for e in self.victims(self.short(need)):
                    evict(e)  # handed over, then dropped
                    self.drop(e)
                if not all(s <= 1e-6 for s in self.short(need)):
                    continue  # no room: let go
            slots = tuple(self.alloc[d].alloc(l1 - l0) for d, l0, l1 in runs)
            self.entries[key] = RefEntry(key, runs, slots, need)
            self.used = [u + n for u, n in zip(self.used, need, strict=True)]
            placed.append(key)
        return placed

    def drop(self, e: RefEntry) -> None:
        del self.entries[e.key]
        self.used = [u - n for u, n in zip(self.used, e.nbytes, strict=True)]
        for (d, l0, l1), s in zip(e.runs, e.slots, strict=True):
            self.alloc[d].free(s, l1 - l0)


def same_books(t: OffloadTier, r: RefTier) -> None:
    assert list(t.entries) == list(r.entries)  # LRU order
    assert t.used == r.used  # exactly: the same additions in the same order
    for k, e in t.entries.items():
        f = r.entries[k]
        assert (e.runs, e.slots, e.ref_cnt) == (f.runs, f.slots, f.ref_cnt)


SHAPES = {
    "one device": ([1.0], [60 * 32.0]),
    "pool of three": ([0.2, 0.3, 0.5], [15 * 32.0, 10 * 32.0, 40 * 32.0]),
    # one device far too small for its share: most keys spill over the others
    "pool of four, one tiny": ([0.1, 0.4, 0.2, 0.3], [3 * 32.0, 12 * 32.0, 30 * 32.0, 9 * 32.0]),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("callback", [True, False])
def test_bulk_placement_matches_the_per_key_reference(
    shape: str, seed: int, callback: bool
) -> None:
    """``callback`` False: placement is told victims are dropped (no callback),
    the fused replace path of a one-device tier; the reference drops them."""
    ratios, caps = SHAPES[shape]
    _drive(ratios, caps, seed, callback, universe=400, most=40, steps=300)


# a pool like seed 004's: two fast small devices (DRAM) and two slow large
# ones (SSDs), sets of up to 300 keys: long runs of keys that spill to the
# large devices once the small ones are full, and of keys that evict
LONG = {
    "dram and ssd": ([0.4, 0.4, 0.1, 0.1], [30 * 32.0, 30 * 32.0, 400 * 32.0, 400 * 32.0]),
    "uneven": ([0.5, 0.3, 0.2], [20 * 32.0, 350 * 32.0, 200 * 32.0]),
}


@pytest.mark.parametrize("shape", sorted(LONG))
@pytest.mark.parametrize("seed", [4])
@pytest.mark.parametrize("callback", [True, False])
def test_long_runs_of_spills_and_fits_match_the_per_key_reference(
    shape: str, seed: int, callback: bool
) -> None:
    """Large sets: the fit and spill runs of :mod:`sim.serving.tiers.poolplace`
    span many keys and windows; still exactly the per-key decisions."""
    ratios, caps = LONG[shape]
    _drive(ratios, caps, seed, callback, universe=2000, most=250, steps=40)


@pytest.mark.parametrize("shape", sorted(LONG) + ["pool of three"])
@pytest.mark.parametrize("seed", [5, 6])
def test_sets_with_and_without_a_callback_match_the_per_key_reference(
    shape: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sets placed with no callback (victims dropped: the fused
    :func:`sim.serving.tiers.pooldrop.drop_run` of a pool) between sets whose
    victims are handed to a callback (the per-key path): the same keys
    placed, victims, books and LRU order as the per-key reference; and the
    fused loop did decide keys (many)."""
    import sim.serving.tiers.poolplace as poolplace

    decided = [0]
    real = poolplace.drop_run

    def counting(tier, new, plans, i, placed):
        j, spill = real(tier, new, plans, i, placed)
        decided[0] += j - i
        return j, spill

    monkeypatch.setattr(poolplace, "drop_run", counting)
    ratios, caps = {**LONG, **SHAPES}[shape]
    big = shape in LONG
    _drive(ratios, caps, seed, True, 2000 if big else 400, 250 if big else 40,
           40 if big else 300, mixed=True)  # fmt: skip
    assert decided[0] > 100


def _drive(
    ratios, caps, seed: int, callback: bool, universe: int, most: int, steps: int,
    mixed: bool = False,
) -> None:  # fmt: skip
    """Random sets of up to ``most`` of ``universe`` keys placed ``steps``
    times in both tiers, with the same random life in between; ``callback``:
    victims handed to a callback that records them (as the block manager's
    demotion does); ``mixed``: every third set placed with no callback."""
    rng = np.random.default_rng(seed)
    t = OffloadTier("t", [f"d{i}" for i in range(len(caps))], ratios, caps, 32, 1.0)
    r = RefTier(ratios, caps, 32, 1.0)
    victims: dict[str, list[int]] = {"bulk": [], "ref": []}
    for step in range(steps):
        keys = [int(k) for k in rng.choice(universe, int(rng.integers(1, most)), replace=False)]

        def bulk_evict(tier: OffloadTier, e: Entry) -> None:
            assert tier.entries[e.key] is e  # handed over while still in the tier
            victims["bulk"].append(e.key)

        def ref_evict(e: RefEntry) -> None:
            victims["ref"].append(e.key)

        dropping = not callback or (mixed and step % 3 == 0)
        seen = len(victims["bulk"]), len(victims["ref"])
        placed = t.place(keys, None if dropping else bulk_evict)
        assert [e.key for e in placed] == r.place(keys, ref_evict)
        if not dropping:  # this set's victims, in order (none seen when dropped)
            assert victims["bulk"][seen[0] :] == victims["ref"][seen[1] :]
        assert t.evictions == len(victims["ref"])
        same_life(t, r, rng)  # the same random life for both
        same_books(t, r)
    if len(caps) > 1:  # some entries spilled: no bytes on a device with a share
        assert any(0.0 in e.nbytes for e in t.entries.values())
    assert len(victims["ref"]) > 200  # the comparison saw real evictions


def same_life(t: OffloadTier, r: RefTier, rng: np.random.Generator) -> None:
    """The same random completions and loads (pin, touch, unpin) in a tier and
    the per-key definition, one draw per entry."""
    for e in list(t.entries.values()):
        f, x = r.entries[e.key], rng.random()
        if e.ref_cnt == -1 and x < 0.6:
            t.complete_all([e])
            f.ref_cnt = READY
        elif e.ref_cnt == READY and x < 0.1:
            t.pin(e)
            t.touch(e.key)
            f.ref_cnt += 1
            r.entries.move_to_end(e.key)
        elif e.ref_cnt > READY and x < 0.4:
            t.unpin_all([e])
            f.ref_cnt -= 1


def literal_layer_runs(ratios: list[float], n: int, layers: int) -> list:
    """Algorithm 1 item by item: item ``l * n + b`` to its device, runs merged."""
    from sim.serving.tiers.placement import assign

    devices = assign(ratios, layers * n)
    out = []
    for b in range(n):
        runs: list[tuple[int, int, int]] = []
        for layer in range(layers):
            dev = devices[layer * n + b]
            if runs and runs[-1][0] == dev:
                runs[-1] = (dev, runs[-1][1], layer + 1)
            else:
                runs.append((dev, layer, layer + 1))
        out.append(tuple(runs))
    return out


def test_vectorised_layer_runs_equal_the_item_by_item_assignment() -> None:
    rng = np.random.default_rng(5)
    for _ in range(400):
        d = int(rng.integers(2, 6))
        r = rng.random(d) + 0.01
        ratios = [float(x) for x in r / r.sum()]
        n, layers = int(rng.integers(0, 50)), int(rng.integers(1, 40))
        got = layer_runs(ratios, n, layers)
        assert got == literal_layer_runs(ratios, n, layers)
        # blocks laid out alike share one tuple (placement compares layouts by identity)
        assert len({id(x) for x in got}) == len(set(got)) <= d + 1


def test_full_tier_hands_each_victim_over_then_frees_its_block() -> None:
    """Worked by hand: a one-device tier of 4 blocks holding 4 ready entries
    (1 least recently used), victims handed to a callback.  A set of 6 new
    keys: key 11 evicts 1 and takes its block, 12 evicts 2, ..., 14 evicts
    4; 15 and 16 find only not-ready entries (11..14) and are let go.  Each
    victim is handed over while it is still in the tier (the manager copies
    it below from there) and is gone afterwards; ``used`` stays 4 blocks and
    each new key holds the slot its victim left."""
    layers, lb = 4, 4096.0
    block = layers * lb
    tier = OffloadTier("cpu", ["m0"], [1.0], [4 * block], layers, lb)
    old = tier.place([1, 2, 3, 4], None)
    tier.complete_all(old)
    slot = {e.key: e.slots for e in old}
    handed: list[tuple[int, bool]] = []

    def demote(t: OffloadTier, e: Entry) -> None:
        handed.append((e.key, t.entries.get(e.key) is e))

    placed = tier.place([11, 12, 13, 14, 15, 16], demote)
    assert [e.key for e in placed] == [11, 12, 13, 14]
    assert handed == [(1, True), (2, True), (3, True), (4, True)]
    assert list(tier.entries) == [11, 12, 13, 14] and tier.evictions == 4
    assert tier.used == [4 * block]
    assert [e.slots for e in placed] == [slot[1], slot[2], slot[3], slot[4]]
