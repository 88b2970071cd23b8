"""What a run reads (sim.reads) and the sensitivity run's reuse of it.

A toy on the tiny machine (tests/sim/conftest.py): a design that fetches its
sparse working set from host memory and one that reads it from the SSD.  Only
the SSD design touches the SSD, so only it reads ``ssds[0].read_latency_us``
(80 us); neither reads through GPUDirect Storage, so none reads
``software.gds_per_io_us`` (3 us).  A sensitivity run of the two assumptions
simulates the two designs as given (2 runs), the SSD design at the latency's two
ends (2 runs) and nothing else: 4 of the 2 x (1 + 4) = 10 design points, the six
others kept from the run as given; and every kept or simulated row equals the
whole scenario simulated at that end.  An end at the value as given is the run as
given: not simulated again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd
import pytest

from hwprofiles import Assumption
from hwprofiles.assume import with_value
from sim.parallel import LocalExecutor
from sim.reads import ALL, changed, tracked, was_read
from sim.runner import run
from sim.sensitivity import UNREAD, apply, knobs, sensitivity


@pytest.fixture
def toy(sparse_toy):
    return sparse_toy(
        "toy-reads",
        "host memory vs SSD",
        [{"name": "host", "tier": "dram"}, {"name": "disk", "tier": "ssd"}],
    )


def _profile(make_profile, *ranges: tuple[str, float, float]):
    p = make_profile()
    return dataclasses.replace(p, assumptions=tuple(Assumption(*r, "toy") for r in ranges))


@dataclass(frozen=True)
class Leaf:
    a: float
    b: int = 2


@dataclass(frozen=True)
class Root:
    name: str
    leaf: Leaf
    leaves: tuple[Leaf, ...]


def _root() -> Root:
    return Root("r", Leaf(1.0), (Leaf(3.0), Leaf(4.0, 5)))


def test_a_read_is_recorded_by_its_key_path_and_a_container_is_not() -> None:
    sink: set[str] = set()
    r = tracked(_root(), sink)
    assert r.leaf.a == 1.0 and r.leaves[1].b == 5
    assert sink == {"leaf.a", "leaves[1].b"}  # not "leaf", not "leaves"


def test_the_copy_equals_and_hashes_like_the_original() -> None:
    sink: set[str] = set()
    r = tracked(_root(), sink)
    assert r == _root() and _root() == r and hash(r) == hash(_root())
    assert type(r).__name__ == "Root" and isinstance(r, Root)
    assert r != dataclasses.replace(_root(), name="s")
    assert {"name", "leaf.a", "leaf.b", "leaves[0].a"} <= sink  # == compares every field


def test_replace_makes_a_tracked_copy_and_records_only_what_is_read() -> None:
    sink: set[str] = set()
    r = tracked(_root(), sink)
    leaf = dataclasses.replace(r.leaf, b=7)
    assert sink == set()  # copying is no read
    assert leaf.a == 1.0 and sink == {"leaf.a"}
    assert leaf.b == 7 and sink == {"leaf.a", "leaf.b"}  # conservative: b's path too


def test_reading_an_objects_dict_reads_everything_under_it() -> None:
    sink: set[str] = set()
    r = tracked(_root(), sink)
    vars(r.leaves[0])
    assert sink == {f"leaves[0].{ALL}"}
    assert was_read("leaves[0].a", sink) and not was_read("leaves[1].a", sink)


def test_changed_lists_the_key_paths_that_differ() -> None:
    a = _root()
    b = dataclasses.replace(a, leaves=(Leaf(3.0), Leaf(4.5, 5)))
    assert changed(a, b) == {"leaves[1].a"}
    c = dataclasses.replace(a, leaves=(Leaf(3.0),))  # another length: the container
    assert changed(a, c) == {"leaves"}
    assert was_read("leaves", {"leaves[0].a"}) and not was_read("leaves", {"leaf.a"})
    assert changed(a, a) == set()


def test_changed_on_a_profile_is_the_number_with_value_sets(make_profile) -> None:
    p = make_profile()
    assert changed(p, with_value(p, "efficiency.nvlink", 0.5)) == {"efficiency.nvlink"}


def test_a_design_is_rerun_only_where_it_read_the_assumption(toy, make_profile) -> None:
    p = _profile(
        make_profile, ("ssds[0].read_latency_us", 40.0, 160.0), ("software.gds_per_io_us", 1.0, 5.0)
    )
    s = sensitivity(toy, p, LocalExecutor(1))
    assert (s.simulated, s.points) == (4, 10)
    assert s.unread == ("software.gds_per_io_us",)
    rows = {r["assumption"]: r for r in s.table.to_dict("records")}
    assert rows["software.gds_per_io_us"]["verdict"] == UNREAD
    lat = rows["ssds[0].read_latency_us"]
    assert lat["host @low"] == lat["host @base"] == lat["host @high"]
    # every row, kept or simulated, is the whole scenario simulated at that end
    for k in knobs(toy, p):
        for end in ("low", "high"):
            c2, p2 = apply(toy, p, k, getattr(k, end))
            whole = run(c2, p2, None).summary()
            mine = s.runs[(s.runs["assumption"] == k.name) & (s.runs["at"] == end)]
            mine = mine.drop(columns=["assumption", "at", "value", "hw"])
            pd.testing.assert_frame_equal(
                mine.reset_index(drop=True), whole[mine.columns], check_exact=True
            )


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_end_at_the_value_as_given_is_not_simulated_again(toy, make_profile, jobs) -> None:
    p = _profile(make_profile, ("ssds[0].read_latency_us", 80.0, 160.0))  # low: as given
    s = sensitivity(toy, p, LocalExecutor(jobs))
    assert (s.simulated, s.points) == (3, 6)  # both as given, disk at 160 us
