"""Swarm's balanced routing measured in what a bucket costs its disk once reads
are coalesced (retrieval.ReadCost): hand cases and invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.kvdesign import extents_from_slots
from sim.policies.swarm.placement import place
from sim.policies.swarm.retrieval import ReadCost, assign, schedule
from sim.policies.swarm.types import Clustering

EB = 4096
# the h20-8ssd figures: one I/O = max(1/1.1M IOPS, 1.5 us io_uring + 1 us syscall / 128)
IO_US, ENTRY_US = 1.5 + 1.0 / 128, EB / 6.9e3  # 4 KiB at 6.9 GB/s
COST = ReadCost(IO_US, ENTRY_US, EB, 1280 * 1024)


def clustering(*members: list[int]) -> Clustering:
    ms = [np.array(m, dtype=np.int64) for m in members]
    return Clustering(ms, 0.5, int(max(max(m) for m in members)) + 1)


# 2 disks.  c0 = [0, 1, 2] from disk 0: 0 -> d0 s0, 1 -> d1 s0, 2 -> d0 s1 (pointer 3);
# c1 = [3, 4, 5, 6, 0] from disk 1: 3 -> d1 s1, 4 -> d0 s2, 5 -> d1 s2, 6 -> d0 s3,
# 0 -> d1 s3.  Entry 0 has replicas d0 s0 (c0's) and d1 s3 (c1's, after 5's slot).
SPLIT = clustering([0, 1, 2], [3, 4, 5, 6, 0])


def test_placement_of_the_split_case():
    pl = place(SPLIT, 2)
    assert pl.replicas(0) == [(0, 0), (1, 3)]
    assert [pl.replicas(e) for e in (3, 4, 5, 6)] == [[(1, 1)], [(0, 2)], [(1, 2)], [(0, 3)]]


def test_entry_count_greedy_splits_the_run_cost_greedy_keeps_it():
    pl = place(SPLIT, 2)
    want = np.array([3, 4, 5, 6, 0])  # c1, every replica a candidate (c0's too)
    # singles 3, 5 on d1 and 4, 6 on d0: 2 entries each, then 0 goes to a tie
    count = assign(want, pl, "balanced", cost=None)
    assert [s.tolist() for s in count.slots] == [[2, 3, 0], [1, 2]]  # 0 to d0 (tie, lowest)
    # d0 reads slots {0} and {2, 3}: 2 I/Os; d1 {1, 2}: 1 I/O -- 3 I/Os in all
    count = dataclasses.replace(count, cost=COST)  # the same buckets, measured by the disk
    assert count.io_counts.tolist() == [2, 1]
    assert count.costs.tolist() == pytest.approx([2 * IO_US + 3 * ENTRY_US, IO_US + 2 * ENTRY_US])
    cost = assign(want, pl, "balanced", cost=COST)
    # d0 s0 would cost 2 I/Os + 3 entries; d1 s3 extends d1's run {1, 2}: 1 I/O + 3 entries
    assert [s.tolist() for s in cost.slots] == [[2, 3], [1, 2, 3]]
    assert cost.io_counts.tolist() == [1, 1]
    assert cost.costs.tolist() == pytest.approx([IO_US + 2 * ENTRY_US, IO_US + 3 * ENTRY_US])
    assert cost.rounds == 1 and count.rounds == 2
    assert cost.costs.max() < count.costs.max()
    # reading the selected cluster c1, its own replica of 0 is the only candidate
    assert [sorted(s.tolist()) for s in schedule([1], pl, SPLIT.members, cost=COST).slots] == [
        [2, 3],
        [1, 2, 3],
    ]


def test_joining_two_runs_counts_the_cut_at_the_transfer_size():
    # 1 disk: c0 = [0, 1, 2, 3, 4] in slots 0-4, c1 = [5, 2] puts a second replica of
    # entry 2 at slot 6.  0, 1, 3, 4 have one replica: runs {0, 1} and {3, 4} first.
    cl = clustering([0, 1, 2, 3, 4], [5, 2])
    pl = place(cl, 1)
    assert pl.replicas(2) == [(0, 2), (0, 6)]
    # slot 2 joins the runs into one of 5 entries: ceil(5/m) I/Os for 2 x ceil(2/m)
    # before; slot 6 opens a run of its own (+1).  m = 0 (no limit): 1 I/O against 3;
    # m = 2: 3 against 3, a tie, so the first-placed replica (slot 2); m = 4: 2 against 3
    for max_entries, ios in ((0, 1), (2, 3), (4, 2)):
        c = ReadCost(IO_US, ENTRY_US, EB, max_entries * EB)
        b = assign(np.array([0, 1, 2, 3, 4]), pl, "balanced", c)
        read = dict(zip(b.entries[0].tolist(), b.slots[0].tolist(), strict=True))
        assert read[2] == 2
        assert b.io_counts.tolist() == [ios]
        assert b.costs.tolist() == pytest.approx([ios * IO_US + 5 * ENTRY_US])


def test_symmetric_replicas_balance_to_equal_cost():
    # c0 = 0..7 from d0 (even entries d0 s0-3, odd d1 s0-3); c1 = pairs swapped, from
    # disk 0 again (pointer 8): entry 2m also on d1 s4+m, 2m+1 on d0 s4+m
    cl = clustering(list(range(8)), [1, 0, 3, 2, 5, 4, 7, 6])
    pl = place(cl, 2)
    assert pl.replicas(0) == [(0, 0), (1, 4)] and pl.replicas(1) == [(1, 0), (0, 4)]
    b = schedule([0, 1], pl, cl.members, "balanced", cost=COST)
    # each disk: one run of 4 slots, one I/O: costs equal, not merely within one I/O
    assert [s.tolist() for s in b.slots] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert b.costs.tolist() == pytest.approx([IO_US + 4 * ENTRY_US] * 2)
    assert b.costs.max() - b.costs.min() <= IO_US + ENTRY_US


def _random_case(n_ssd, clusters, pick):
    covered = set().union(*map(set, clusters))
    clusters = clusters + [[e] for e in range(10) if e not in covered]
    cl = clustering(*clusters)
    return cl, place(cl, n_ssd), [c for c in pick if c < len(clusters)]


CASES = dict(
    n_ssd=st.integers(1, 4),
    clusters=st.lists(
        st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True), min_size=1, max_size=6
    ),
    pick=st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True),
)


@settings(max_examples=80, deadline=None)
@given(**CASES, max_entries=st.integers(0, 4), res=st.lists(st.integers(0, 9), max_size=4))
def test_reads_each_selected_nonresident_entry_once_from_a_replica(
    n_ssd, clusters, pick, max_entries, res
):
    cl, pl, chosen = _random_case(n_ssd, clusters, pick)
    resident = np.zeros(10, dtype=bool)
    resident[res] = True
    c = ReadCost(IO_US, ENTRY_US, EB, max_entries * EB)
    b = schedule(chosen, pl, cl.members, cost=c, resident=resident)
    want = {e for i in chosen for e in cl.members[i].tolist()} - set(res)
    got = np.concatenate(b.entries).tolist()
    assert sorted(got) == sorted(want)  # every one, none twice
    for k in range(n_ssd):
        for e, s in zip(b.entries[k].tolist(), b.slots[k].tolist(), strict=True):
            # a replica of e that one of the chosen clusters holds
            a, z = pl.indptr[e], pl.indptr[e + 1]
            hit = (pl.disk[a:z] == k) & (pl.slot[a:z] == s)
            assert hit.sum() == 1 and int(pl.cluster[a:z][hit][0]) in chosen
        # the I/O count is the driver's: merged ranges cut at the transfer size
        ext = extents_from_slots(b.slots[k], EB, merge=True)
        cut = [-(-n // (max_entries * EB)) if max_entries else 1 for n in ext[:, 1].tolist()]
        assert b.io_counts[k] == sum(cut)
    assert b.rounds == max(b.io_counts.tolist())


@settings(max_examples=80, deadline=None)
@given(**CASES)
def test_one_entry_per_io_is_the_entry_count_greedy(n_ssd, clusters, pick):
    cl, pl, chosen = _random_case(n_ssd, clusters, pick)
    a = schedule(chosen, pl, cl.members, cost=ReadCost(IO_US, ENTRY_US, EB, EB))
    b = schedule(chosen, pl, cl.members, cost=None)
    assert [s.tolist() for s in a.slots] == [s.tolist() for s in b.slots]
    assert [e.tolist() for e in a.entries] == [e.tolist() for e in b.entries]
    assert a.rounds == b.rounds == max(b.sizes.tolist())
