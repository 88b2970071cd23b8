"""The kvdrive scenario's points, steady state and the index memo.

* a hand YAML's ``points`` expand to exactly the runs it names (every variant
  at each point of the workload, or at its own; ``[]``: once, at the workload);
* a plan of 16 decode steps repeats, op for op, the first 2 steps of a 2-step
  plan (designs without the cross-step prefetch): the step count changes how
  long a run is, not what its first steps do;
* the index memo hands back the very index a fresh build gives, and leaves the
  generator where that build leaves it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow.compute as pc
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.executor import simulate
from sim.factors import expand_matrix
from sim.policies.kvdrive import index as kvindex
from sim.policies.kvdrive.memo import BuildMemo
from sim.scenarios.kvdrive import plan_kvdrive
from sim.scenarios.kvdrive_kind import KVDriveParams

HAND = """name: p
description: d
seed: 0
workload:
  kind: kvdrive
  context_tokens: 4096
  batch: 2
  points:
    - {context_tokens: 8192, batch: 4}
    - {context_tokens: 16384, batch: 1}
variants:
  - {name: A, design: kvdrive}
  - {name: B, design: quest, points: []}
  - {name: C, design: kvdrive, points: [{batch: 3}], design_params: {window: 4}}
"""


def test_points_expand_to_the_runs_the_hand_yaml_names(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(HAND)
    cfg = load_scenario(str(path))
    runs = []
    for v in expand_matrix(cfg):
        p = cfg.variant_params(v)
        runs.append((v.name, p.context_tokens, p.batch, p.design, dict(p.design_params), p.points))
    assert runs == [
        ("A | 8K | 4", 8192, 4, "kvdrive", {}, ()),
        ("A | 16K | 1", 16384, 1, "kvdrive", {}, ()),
        ("B", 4096, 2, "quest", {}, ()),
        ("C | 3", 4096, 3, "kvdrive", {"window": 4}, ()),
    ]


def test_the_kvdrive_scenario_is_the_papers_five_pairs_at_steady_state():
    cfg = load_scenario("kvdrive")
    pairs = {(p["context_tokens"], p["batch"]) for p in cfg.workload.points}
    assert pairs == {(61440, 8), (92160, 4), (122880, 4), (245760, 2), (368640, 2)}
    assert cfg.workload.steps == 16 and cfg.workload.sparsity == 0.0156
    runs = [cfg.variant_params(v) for v in expand_matrix(cfg)]
    shadow = [
        (p.context_tokens, p.batch) for p in runs if p.design == "shadowkv" and not p.host_mem_gb
    ]
    assert set(shadow) == pairs and len(shadow) == 5


SMALL = dict(context_tokens=2048, batch=2, profile_steps=16, layers=2, trace="positional")


@pytest.mark.parametrize(
    "kw",
    [
        dict(design="kvdrive", micro_batches=2),
        dict(design="kvdrive", micro_batches=2, pinned_mb=0.1, dram_fill=True,
             design_params={"sync": "balanced", "ssd_io": "memmap"}),
        dict(design="shadowkv", micro_batches=1),
    ],
)  # fmt: skip
def test_sixteen_steps_repeat_the_first_two_steps_of_a_two_step_run(kw):
    l20 = load_profile("l20-server")
    ops = {}
    for steps in (2, 16):
        splan = plan_kvdrive(KVDriveParams(**SMALL, **kw, steps=steps), l20, seed=0)
        rec = simulate(splan.plan, l20).ops
        ops[steps] = rec.filter(pc.less(rec.column("step"), 2))
        decisions = [lane.decisions[:2] for lane in splan.lanes.values()]
        hits = [[d.info.get("gpu_hits", 0.0) for d in lane] for lane in decisions]
        ops[f"hits{steps}"] = hits
    assert ops[2].num_rows > 0
    assert ops[16].equals(ops[2])  # every op of steps 0 and 1: times, bytes, devices
    assert ops["hits16"] == ops["hits2"]


def test_the_memo_returns_what_a_fresh_build_gives_and_where_it_leaves_the_rng():
    keys = np.random.default_rng(3).standard_normal((600, 8)).astype(np.float32)
    kvindex.BUILT.clear()
    a_rng, b_rng, c_rng = (np.random.default_rng(5) for _ in range(3))
    a = kvindex.build_index(keys, 4, 4, a_rng)
    b = kvindex.build_index(keys, 4, 4, b_rng)  # the memo's
    c = kvindex._build_index(keys, 4, 4, c_rng, 3, "tree")  # no memo
    assert b is a and kvindex.BUILT.hits == 1 and kvindex.BUILT.misses == 1
    for x, y in ((a.centroids, c.centroids), (a.chunk_label, c.chunk_label)):
        np.testing.assert_array_equal(x, y)
    assert [m.tolist() for m in a.members] == [m.tolist() for m in c.members]
    assert repr(b_rng.bit_generator.state) == repr(c_rng.bit_generator.state)
    other = kvindex.build_index(keys, 4, 4, np.random.default_rng(6))  # another draw: built
    assert other is not a and kvindex.BUILT.misses == 2
    with pytest.raises(ValueError):
        a.centroids[0, 0] = 1.0  # shared between designs: read-only


def test_the_memo_evicts_the_least_recently_used_beyond_its_bytes():
    memo, rng = BuildMemo(max_bytes=100), np.random.default_rng(0)
    built = []

    def build(tag):
        return lambda: built.append(tag) or tag

    size = lambda _: 60  # noqa: E731
    for tag in ("x", "y", "x"):  # y evicts x (120 > 100 bytes); x is built again
        memo.get_or_build(tag, rng, build(tag), size)
        rng = np.random.default_rng(0)
    assert built == ["x", "y", "x"] and memo.held == 60


def test_expanded_points_keep_every_other_override():
    cfg = load_scenario("kvdrive")
    one = {v.name: cfg.variant_params(v) for v in expand_matrix(cfg)}
    base = dataclasses.replace(cfg.workload, points=(), context_tokens=61440, batch=8)
    sfc = one["KVDrive (SFC) | 60K | 8"]
    assert sfc == dataclasses.replace(
        base, micro_batches=2, pinned_mb=4000.0,
        design_params={"sync": "balanced", "ssd_io": "memmap"},
    )  # fmt: skip
