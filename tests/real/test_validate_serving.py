"""The serving part of ``kvtier real validate --serving``: the I/O plan cut from a
serving run's plan, the per-kind errors and the devices' sizes by hand, and the serving
run's own I/O planned on a profile."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hwprofiles import load_profile
from kvtier.compare.serving import (
    REVISIT_DRAW,
    ServingReplay,
    by_kind,
    compare_serving,
    compressed,
    io_plan,
    revisiting,
    serving_run,
)
from kvtier.contracts.plan import PlanBuilder
from kvtier.contracts.records import Records
from sim.serving.bench import mooncake_table

MIB = 1 << 20


def _served() -> tuple[pa.Table, pa.Table]:
    """A serving run's plan: GPU work 0, a store 1 after it, a copy 2, a load 3 after
    the store and the copy, GPU work 4 after the load; and when each op started."""
    b = PlanBuilder()
    gpu = b.compute("gpu0", 1e9, 0.0)
    store = b.write("dram0", "ssd0", 8 * MIB, 8, depends_on=[gpu], tag="store")
    copy = b.copy("gpu0", "dram0", MIB, depends_on=[gpu], tag="store")
    load = b.read("ssd1", "dram0", 2 * MIB, 2, depends_on=[store, copy], tag="load")
    b.compute("gpu0", 1e9, 0.0, depends_on=[load])
    ops = pa.table({"op_id": [4, 3, 2, 1, 0], "start_s": [0.9, 0.5, 0.1, 0.2, 0.0]})
    return b.table(), ops


def test_io_plan_keeps_the_ssd_ops_released_when_the_run_started_them():
    plan, ops = _served()
    io = io_plan(plan, ops)
    # the store (op 1) and the load (op 3) become ops 0 and 1; the load keeps its
    # dependency on the store, not the copy's; each starts no earlier than it did
    assert io.column("op_id").to_pylist() == [0, 1]
    assert io.column("kind").to_pylist() == ["write", "read"]
    assert io.column("tag").to_pylist() == ["store", "load"]
    assert io.column("release_s").to_pylist() == [0.2, 0.5]
    assert io.column("depends_on").to_pylist() == [[], [0]]
    assert io.column("bytes").to_pylist() == [8 * MIB, 2 * MIB]
    assert io.column("n_ios").to_pylist() == [8, 2]


def _records(rows: list[tuple[int, str, float, float]], backend_bytes: int) -> Records:
    n = len(rows)
    ops = pa.table(
        {
            "op_id": list(range(n)),
            "tag": [r[1] for r in rows],
            "kind": ["write" if r[1] == "store" else "read" for r in rows],
            "src": ["dram0"] * n,
            "dst": ["ssd0"] * n,
            "bytes": [r[0] for r in rows],
            "n_ios": [1] * n,
            "start_s": [r[2] for r in rows],
            "end_s": [r[3] for r in rows],
        }
    )
    dev = pa.table(
        {
            "device": ["ssd0"],
            "type": ["ssd"],
            "bytes_read": [backend_bytes],
            "bytes_written": [0],
            "n_ios": [n],
        }
    )
    return Records(ops, dev)


def test_errors_by_op_kind_by_hand():
    # stores: 1.0 s sim vs 1.25 real (-20%), 2.0 vs 2.0 (0%), 3.3 vs 3.0 (+10%):
    # |err| median 10%, bias (median error) 0%; loads: 0.1 vs 0.2 (-50%)
    sim = _records(
        [(10, "store", 0, 1.0), (20, "store", 1, 3.0), (30, "store", 0, 3.3), (5, "load", 2, 2.1)],
        65,
    )
    real = _records(
        [(10, "store", 0, 1.25), (20, "store", 1, 3.0), (30, "store", 0, 3.0), (5, "load", 2, 2.2)],
        65,
    )
    r = compare_serving(sim, real)
    k = r["by_kind"]
    assert list(k) == ["load", "store"]
    assert k["store"]["ops"] == 3 and k["store"]["bytes"] == 60 and k["store"]["n_ios"] == 3
    assert k["store"]["median"] == pytest.approx(0.10)
    assert k["store"]["bias"] == pytest.approx(0.0)
    assert k["store"]["max"] == pytest.approx(0.20)
    assert k["store"]["sim_s"] == pytest.approx(6.3) and k["store"]["real_s"] == pytest.approx(6.25)
    assert k["load"]["median"] == pytest.approx(0.5) and k["load"]["bias"] == pytest.approx(-0.5)
    assert r["bytes"]["match"].all()
    # a device that read one byte less for real: no match
    assert not compare_serving(sim, _records([(1, "load", 0, 1)] * 4, 64))["bytes"]["match"].all()
    assert by_kind(r["ops"]) == k


def test_revisiting_keeps_only_conversations_of_several_turns():
    """The default run's requests: every session it keeps has at least two turns in the
    draw, they come in arrival order, renumbered; the first turn of each is in."""
    t = revisiting(30).to_pandas()
    assert len(t) == 30 and t["request_id"].tolist() == list(range(30))
    assert t["arrival_s"].is_monotonic_increasing
    drawn = mooncake_table(REVISIT_DRAW * 30).to_pandas()
    turns = drawn.groupby("session_id").size()
    assert (turns.loc[t["session_id"].unique()] > 1).all()
    # a session's turns are kept in order from its first: every kept turn k > 0 follows
    # a kept turn k - 1 of the same session (the trace's prefix reuse)
    kept = set(zip(t["session_id"], t["turn"], strict=True))
    assert all((s, k - 1) in kept for s, k in kept if k > 0)
    assert (t["turn"] > 0).sum() > 0


def test_device_share_and_compressed_arrivals():
    # 0.5 GiB over 4 devices: 128 MiB each; over 3: 170.67 MiB, rounded up to 171 MiB
    assert ServingReplay(ssd_gib=0.5).device_bytes(4) == 128 * MIB
    assert ServingReplay(ssd_gib=0.5).device_bytes(3) == 171 * MIB
    t = pa.table({"arrival_s": [0.0, 10.0, 40.0], "x": [1, 2, 3]})
    got = compressed(t, 5.0)
    assert got.column("arrival_s").to_pylist() == [0.0, 1.25, 5.0]
    assert got.column("x").to_pylist() == [1, 2, 3]


def test_the_pool_run_stores_and_loads_on_every_pool_ssd():
    """The pool design spreads its stores over the profile's SSDs; the I/O plan holds
    exactly the run's SSD ops and bytes."""
    profile = load_profile("h20-8ssd")
    spec = ServingReplay(requests=40)
    served = serving_run(spec, profile)
    io = io_plan(served.plan, served.ops).to_pandas()
    # later turns of the revisited conversations find their context in the pool
    assert {"store", "load"} <= set(io["tag"])
    assert set(io.loc[io["tag"] == "load", "kind"]) == {"read"}
    kinds = np.asarray(served.plan.column("kind").to_pylist(), dtype=object)
    assert len(io) == int(((kinds == "read") | (kinds == "write")).sum()) > 0
    assert set(io["tag"]) <= {"store", "load", "demote"} and "store" in set(io["tag"])
    assert set(io.loc[io["kind"] == "write", "dst"]) == set(profile.ssd_names)
    assert (io["release_s"] >= 0).all()
    ssd = (kinds == "read") | (kinds == "write")
    assert io["bytes"].sum() == int(np.asarray(served.plan.column("bytes"))[ssd].sum())


def test_serving_replay_end_to_end_on_paced_files(direct_dir, tmp_path):
    import json

    from kvtier.cli.main import main

    out = tmp_path / "val"
    rc = main(
        ["real", "validate", "--pace", "h20-8ssd", "--n", "2", "--steps", "1", "--step-s",
         "0.02", "--regimes", "bandwidth", "--no-fio", "--engine", "threads", "--designs",
         "none", "--serving", "pool", "--serving-requests", "10", "--dir", str(direct_dir),
         "--out", str(out), "--informational"]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "serving" / "serving.json").read_text())
    assert report["bytes_match"] and report["serving"]["requests"] == 10
    # each backend counted its own bytes and I/Os on both devices, and they agree
    rows = report["device_io"]
    assert [r["device"] for r in rows] == ["ssd0", "ssd1"]
    assert all(r["bytes_written_real"] == r["bytes_written_sim"] > 0 for r in rows)
    assert all(r["n_ios_real"] == r["n_ios_sim"] for r in rows)
    assert "store" in report["by_kind"]
    assert (out / "serving" / "real" / "ops.parquet").exists()
    assert not list(direct_dir.rglob("kvtier-*.dat"))  # the replay removed its files
