"""``software.io_submit_cores`` flips a ranking at a point worked out by hand.

The tiny machine (tests/sim/conftest.py: PM9A3 SSDs, 1.1M read IOPS, 80 us; the SSD
links 7.88 GB/s; passthrough 0.25 us per I/O) with io_uring at 3.0 us per I/O and
2.0 us per io_uring_enter.  Llama-3.1-8B's entry is one 4 KiB I/O (8 KV heads x 128 x
2 B x K and V); a layer fetches E = 3,277 entries (10% of 32K, batch 1), and the
fetch stream is the bound (a layer's compute and its bounce copy, E x 4 KiB over
25 GB/s = 0.54 ms, overlap the next fetch).  Per I/O:

* ``spdk`` reads all E from one SSD over passthrough: the SSD's 1 / 1.1M = 0.909 us
  binds (its core spends 0.25 us), E x 0.909 us a layer at any core count;
* ``ring`` reads E / 2 from each of two SSDs over io_uring: its ring spends
  3.0 + 2.0 / 128 = 3.016 us of core time per I/O, so a layer takes
  E / 2 x max(3.016 / k, 0.909) us on k cores.

The machine has 4 cores and ``ring`` runs two ops at once, so each ring gets
k' = min(k, 2) of them.  ``ring`` is slower where 3.016 / (2 k') > 0.909, i.e. below
k' = 1.66: behind at one core (E x 1.508 us against E x 0.909), ahead from two, where
the shared cores, not the SSDs, still bind it (E / 2 x 3.016 / 2 = E x 0.754 us; four
cores per ring change nothing more).  With the 80 us fill a layer takes 80 + 1,639 x
3.016 = 5,023 us (one core), 80 + 1,639 x 1.508 = 2,551 us (two or four) and, for
``spdk``, 80 + 3,277 x 0.909 = 3,059 us: rates of 0.61 and 1.20 of spdk's, diluted a
little by the pipeline's fill over 2 steps of 4 layers.  The range [1, 4] with 1 as
given flips the ranking at its high end.  At 1.5 us per I/O the ring is E x 0.758 us
at one core, already ahead, and more cores only widen its lead.
"""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles import Assumption
from sim.parallel import LocalExecutor
from sim.sensitivity import sensitivity


@pytest.fixture
def toy(sparse_toy):
    return sparse_toy(
        "toy-submit", "one io_uring ring per SSD against an SPDK queue on one SSD",
        [{"name": "ring", "io_path": "io_uring", "ssds": 2},
         {"name": "spdk", "io_path": "passthrough", "ssds": 1}],
        layers=4, tier="ssd", queue_depth=128, balance="even",
    )  # fmt: skip


def _profile(make_profile, per_io_us: float):
    p = make_profile()
    sw = dataclasses.replace(p.software, io_uring_per_io_us=per_io_us)
    a = Assumption("software.io_submit_cores", 1, 4, "toy")
    return dataclasses.replace(p, software=sw, assumptions=(a,))


def test_more_rings_per_ssd_flip_the_ranking_at_the_high_end(toy, make_profile) -> None:
    s = sensitivity(toy, _profile(make_profile, 3.0), LocalExecutor(1))
    (row,) = s.table.to_dict("records")
    assert (row["top"], row["second"]) == ("spdk", "ring")
    assert row["verdict"] == "flips" and row["flips_at"] == "high"
    # one core as given: the low end is the same run; spdk is SSD-bound at every end
    assert row["ring @low"] == row["ring @base"] < row["ring @high"]
    assert row["spdk @low"] == row["spdk @base"] == row["spdk @high"]
    # 3,059 / 5,023 = 0.61 at one core; 3,059 / 2,551 = 1.20 at four (two cores a ring)
    assert row["ring @base"] / row["spdk @base"] == pytest.approx(3059 / 5023, rel=0.05)
    assert row["ring @high"] / row["spdk @high"] == pytest.approx(3059 / 2551, rel=0.05)


def test_a_ring_already_ahead_stays_ahead(toy, make_profile) -> None:
    s = sensitivity(toy, _profile(make_profile, 1.5), LocalExecutor(1))
    (row,) = s.table.to_dict("records")
    assert (row["top"], row["second"]) == ("ring", "spdk")
    assert not row["flips"]
    assert row["ring @base"] < row["ring @high"]
