"""kvtier plan's parts: derived profiles, prices, the pruned search's rules, resume."""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.capacity.binding import Binding
from sim.capacity.evaluate import Point, Question, busiest, point_key
from sim.capacity.prices import KINDS, PriceError, bill, load_prices, read_prices
from sim.capacity.search import Space, pareto, search
from sim.capacity.store import ResultStore
from sim.capacity.variants import Hardware, derive, resolve_ssd
from sim.parallel import LocalExecutor

PM9A3 = "Samsung PM9A3 3.84 TB U.2"


def test_variant_is_a_valid_profile_with_new_ssds_behind_the_same_switch(tmp_path):
    p = derive("h100-2dimm-2ssd", Hardware(resolve_ssd("PM9A3"), 4, 3, 32), tmp_path)
    assert p.ssd_names == ("ssd0", "ssd1", "ssd2", "ssd3")
    ref = load_profile("h20-8ssd").ssds[0]  # the drive's figures come from its shipped profile
    assert (p.ssds[0].read_gbps, p.ssds[0].read_iops) == (ref.read_gbps, ref.read_iops)
    for i in range(4):  # each new SSD: a copy of ssd0's x4 link, into sw0 like ssd0
        assert p.link(f"ssd{i}.pcie").between == (f"ssd{i}", "sw0")
    assert p.link("sw0.up").gbps == 63.0  # the shared upstream link is untouched
    assert [m.capacity_gib for m in p.dram] == [32.0] * 3
    assert [p.link(f"dram{i}.bus").between for i in range(3)] == [
        ("mc0", f"dram{i}")
        for i in range(3)  # each a copy of dram0's: behind its channel
    ]
    assert load_profile(p.source_file) == p  # saved: it loads back the same


def test_bill_by_hand():
    p = derive("h100-2dimm-2ssd", Hardware(PM9A3, 4, 3, 32), "/tmp/kvtier-test-bill")
    # shipped table: platform 10,000 + H100 25,000 + 96 GiB x 18.58 + 4 x (600 + 50 slot)
    assert sum(bill(p, load_prices()).values()) == pytest.approx(10000 + 25000 + 1783.68 + 2600)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "ssd_slot: {usd: 50, source: x, date: 2025-01-01, color: red}\n",
            ":1: ssd_slot.color: unknown key",
        ),
        (
            "gpu:\n  H100: {usd: -3, source: x, date: 2025-01-01}\n",
            ":2: gpu.H100.usd: must be a number >= 0, got -3",
        ),
        ("platfrom: {usd: 1, source: x, date: 2025-01-01}\n", ":1: platfrom: unknown key"),
        ("ssd_slot: {usd: 5, date: 2025-01-01}\n", ":1: ssd_slot: missing required key 'source'"),
        (
            "ssd_slot: {usd: 5, source: x, date: 2025-01-01, kind: guessed}\n",
            ":1: ssd_slot.kind: must be one of list, street, cloud-derived, assumed",
        ),
    ],
)
def test_bad_price_table_is_one_line(tmp_path, text, message):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(PriceError) as err:
        read_prices(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_bad_prices_exit_2(tmp_path, capsys):
    from kvtier.cli.main import main

    path = tmp_path / "p.yaml"
    path.write_text("ssd: {X: {usd: -1, source: s, date: 2025-01-01}}\n")
    assert main(["plan", "--prices", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ssd.X.usd: must be a number >= 0" in err[0]


def test_shipped_prices_each_say_where_from_and_what_kind():
    prices = load_prices()
    for key, price in prices.entries.items():
        assert price.source and price.date and price.kind in KINDS, key
        # an assumed price says why (more than the bare word), a cited one is not assumed
        assert price.assumed == (price.kind == "assumed"), key
        assert not price.assumed or len(price.source) > len("assumed: "), key


def test_override_replaces_only_its_entries(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("ssd_slot: {usd: 0, source: mine, date: 2026-01-01}\n")
    prices = load_prices(path)
    assert prices.get("ssd_slot").usd == 0 and prices.get("platform").usd == 10000


def test_sparse_designs_are_registry_presets_of_their_tier():
    from sim.capacity.evaluate import sparse_scenario
    from sim.config import ConfigError
    from sim.registry import SPARSE_DECODE_DESIGNS

    assert SPARSE_DECODE_DESIGNS.names() == ["sparse-dram", "sparse-ssd"]
    q = Question(trace="sparse_decode", docs=3, context_tokens=4096)
    for design, tier in (("sparse-ssd", "ssd"), ("sparse-dram", "dram")):
        w = sparse_scenario(q, design).workload
        assert (w.tier, w.batch, w.context_tokens) == (tier, 3, 4096)
    with pytest.raises(
        ConfigError, match="sparse_decode takes sparse-dram, sparse-ssd; got 'pool'"
    ):
        sparse_scenario(q, "pool")


def test_busiest_is_the_highest_busy_share():
    import pandas as pd

    dev = pd.DataFrame({"device": ["ssd0", "sw0.up", "gpu0.compute"], "util_mean": [0.4, 0.9, 0.7]})
    assert busiest(dev) == ("sw0.up", 0.9)


# ---- the search's rules on a made-up monotone model, counted by hand ----------------
CALLS: list[str] = []


def fake(q: Question, p: Point) -> dict:
    """TTFT 8/n s, but no better than 2 s (a shared link saturates from n = 4)."""
    CALLS.append(point_key(q, p))
    n = p.hw.ssds
    ttft = max(8.0 / n, 2.0)
    bound = Binding(("ssd0",) if n < 4 else ("sw0.up",), 1.0)
    return {"key": point_key(q, p), **p.flat(), "status": "ok", "ttft_p99_s": ttft,
            "tpot_p99_s": 0.01, "throughput_tok_s": 100 / ttft,
            **bound.columns("bottleneck_run")}  # fmt: skip


def space(counts=tuple(range(1, 9))) -> Space:
    return Space(("pool",), (PM9A3,), counts, (1,), (64.0,))


def test_bisection_skips_the_plateau():
    CALLS.clear()
    res = search(Question(), space(), fn=fake)
    # round 1: n=1 (8 s), n=8 (2 s); round 2: mid n=4 (2 s) -> 5..7 equal 4 and 8 (skipped);
    # round 3: n=2 (4 s); round 4: n=3 (2.67 s).  5 of 8 simulated.
    assert sorted(res.rows.loc[res.rows["evaluated"], "ssds"]) == [1, 2, 3, 4, 8]
    assert res.simulated == len(CALLS) == 5 and res.grid == 8


def saturating(q: Question, p: Point) -> dict:
    """TTFT 4/n s up to n = 2 (SSD-bound), then 2 + 0.1 (n - 2) s: DRAM-bus bound, each
    added SSD only adds contention."""
    n = p.hw.ssds
    ttft = 4.0 / n if n <= 2 else 2 + 0.1 * (n - 2)
    row, bound = fake(q, p), Binding(("ssd0",) if n < 2 else ("dram0.bus",))
    return {**row, "ttft_p99_s": ttft, "throughput_tok_s": 100 / ttft,
            **bound.columns("bottleneck_run")}  # fmt: skip


def test_saturation_stops_adding():
    res = search(Question(), space(), fn=saturating)
    # n=1 (4 s), n=8 (2.6 s); mid n=4 (2.2 s); lowest interval first: n=2 (2 s), n=3
    # (2.1 s): 3 is no better than 2 and dram0.bus binds -> 5, 6, 7 skipped.
    assert sorted(res.rows.loc[res.rows["evaluated"], "ssds"]) == [1, 2, 3, 4, 8]
    assert all(res.rows.loc[~res.rows["evaluated"], "status"].str.contains("saturated: dram0"))


def test_pareto_by_hand():
    import pandas as pd

    df = pd.DataFrame({"key": list("abcd"), "status": "ok", "cost_usd": [1, 2, 3, 4],
                       "ttft_p99_s": [5.0, 5.0, 3.0, 4.0]})  # fmt: skip
    assert list(pareto(df, "cost_usd", "ttft_p99_s")["key"]) == ["a", "c"]


def test_resume_never_recomputes(tmp_path):
    """A search killed after 3 points, rerun: the 3 are read back, each point simulated once."""
    q, sp = Question(), space((1, 2, 3, 4, 5, 6))
    CALLS.clear()

    def dies(q: Question, p: Point) -> dict:
        if len(CALLS) == 3:
            raise KeyboardInterrupt
        return fake(q, p)

    with pytest.raises(KeyboardInterrupt):
        search(q, sp, store=ResultStore(tmp_path / "pts"), prune=False, fn=dies)
    assert len(ResultStore(tmp_path / "pts")) == 3
    res = search(q, sp, store=ResultStore(tmp_path / "pts"), prune=False, fn=fake)
    assert res.simulated == 3 and len(CALLS) == 6 == len(set(CALLS))
    again = search(q, sp, store=ResultStore(tmp_path / "pts"), prune=False, fn=fake)
    assert again.simulated == 0 and len(CALLS) == 6


def test_rows_without_the_bottleneck_facts_are_recomputed(tmp_path):
    """An ok row stored before the facts were columns is not loaded: its point runs again
    and its file is rewritten; a row that could not run needs no facts and stays."""
    q, sp = Question(), space((1, 2))
    store = ResultStore(tmp_path / "pts")
    one, two = (point_key(q, p) for p in sp.chains()[0])
    store.put({"key": one, "status": "ok", "ttft_p99_s": 8.0, "bottleneck": "ssd0"})
    store.put({"key": two, "status": "cannot run: no SSD"})
    reread = ResultStore(tmp_path / "pts")
    assert reread.stale == 1 and one not in reread and two in reread
    CALLS.clear()
    res = search(q, sp, store=reread, prune=False, fn=fake)
    assert res.simulated == 1 and [one] == CALLS
    again = ResultStore(tmp_path / "pts")
    assert again.stale == 0 and again.get(one)["bottleneck_run_ssd_only"] is True


def test_ray_executor_matches_local():
    ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
    import sys

    from sim.parallel import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers can't import tests
    ex = RayExecutor("local", num_cpus=1)
    try:
        got = search(Question(), space(), executor=ex, fn=fake).rows
    finally:
        ray.shutdown()
    ref = search(Question(), space(), executor=LocalExecutor(1), fn=fake).rows
    import pandas as pd

    pd.testing.assert_frame_equal(got, ref)


def test_assumed_share_of_the_cheapest_point_by_hand(tmp_path):
    import pandas as pd

    from kvtier.cli.plan import _assumed_share

    q = Question(base="h20-8ssd")
    assumed = f"platform,ssd/{PM9A3},ssd_slot"
    row = pd.Series({"ssd_model": PM9A3, "ssds": 1, "dram_modules": 1, "dram_gib": 64.0,
                     "gpus": 2, "assumed_prices": assumed})  # fmt: skip
    # 2 H20 (24,000, street) + 64 GiB x 18.58 (street); assumed: platform 10,000,
    # PM9A3 600, slot 50
    total = 10000 + 24000 + 64 * 18.58 + 600 + 50
    assert _assumed_share(row, q, load_prices(), tmp_path) == pytest.approx(10650 / total)


def test_a_point_key_changes_with_the_code_that_simulates_it(monkeypatch):
    """A plan store written by other code is not read back: the key hashes the sources."""
    import sim.capacity.evaluate as ev

    q, p = Question(), Point("gpu-only", Hardware("PM9A3", 2, 2, 64))
    before = point_key(q, p)
    assert point_key(q, p) == before  # the same code, the same key
    monkeypatch.setattr(ev, "code_digest", lambda: "another tree")
    assert point_key(q, p) != before
