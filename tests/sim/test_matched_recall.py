"""Issue 12 point 6: throughput at matched recall.

Each design's budget is ``budget_scale`` x the oracle's; the search finds the
smallest scale on a grid whose mean recall reaches a target, replaying the
selection of a design built once.  Hand cases: a toy design whose recall at
each budget is known, the bisection against a linear scan, the unreachable
case; end to end: the matched run is a plain run at the scale found.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hwprofiles import load_profile
from kvtier.cli.main import main
from sim.config import ConfigError, SwarmParams, load_scenario
from sim.policies import Layout, StepDecision
from sim.runner import run
from sim.scenarios.matched import full_scale, mean_recall, scale_grid, smallest_reaching
from sim.scenarios.swarm import BuiltLane, layout_for, replay_lane, run_lane
from sim.scenarios.swarm_traces import LaneData

K = 100  # the oracle's budget in the toy lane (fixed: sparsity 0)
N = 1000  # visible entries


class Interleaved:
    """Toy design: its ranking alternates one oracle entry (ids 0..K-1) with one
    entry outside the oracle, so a budget B selects ``min(K, ceil(B/2))`` of the
    oracle's K: recall ``min(1, ceil(B/2) / K)``.  With ``oracle_first`` it is
    the oracle itself (the K first, then the rest): recall ``min(1, B / K)``.
    ``cap`` bounds what it can select (a design whose units cover only part of
    the context): ``min(B, cap)`` entries."""

    name = "toy"
    score_device = "cpu"  # KVDesign protocol: where selection runs

    def __init__(self, oracle_first: bool = False, cap: int = N) -> None:
        self.cap = cap
        inside, outside = np.arange(K), np.arange(K, N)
        if oracle_first:
            self.ranking = np.arange(N)
        else:
            pairs = np.stack([inside, outside[:K]], axis=1).ravel()
            self.ranking = np.concatenate([pairs, outside[K:]])

    def build(self, activations, keys, layout: Layout, rng) -> None:
        self.layout = layout

    def step(self, t: int, query, new_key) -> StepDecision:
        b = min(self.layout.step_budget(N), self.cap)
        sel = np.sort(self.ranking[:b])
        return StepDecision(sel, len(sel), [np.zeros((0, 2), dtype=np.int64)])

    def index_bytes(self) -> int:
        return 0

    def host_bytes(self) -> int:
        return 0

    def ssd_bytes(self) -> np.ndarray:
        return np.zeros(1, dtype=np.int64)


def toy_lane(oracle_first: bool = False, cap: int = N) -> tuple[BuiltLane, SwarmParams, Layout]:
    """One lane of 2 steps whose oracle is always entries 0..K-1, N entries visible."""
    p = SwarmParams(context_tokens=N - 2, profile_steps=1, steps=2, local_window=0, sink_tokens=0)
    lay = Layout(1, 4096, 2048, K, 0, 0, 0, 80.0, 0.1)
    data = LaneData(
        np.zeros((N + 2, 4)), np.zeros((4, 4)), sp.csr_matrix((1, N)), (np.arange(K),) * 2
    )
    design = Interleaved(oracle_first, cap)
    design.build(data.activations, data.keys, lay, None)
    return BuiltLane(design, data), p, lay  # type: ignore[arg-type]


def toy_recall(built: BuiltLane, p: SwarmParams, lay: Layout):
    return lambda s: mean_recall([replay_lane(built, p, dataclasses.replace(lay, budget_scale=s))])


def test_step_budget_scales_the_oracles_count_by_hand():
    lay = Layout(2, 1024, 512, 845, 256, 4, 0, 80.0, 0.15, sparsity=0.1)
    v = 8448 + 1  # the oracle's budget there: round(0.1 x 8448) = 845
    at = lambda s: dataclasses.replace(lay, budget_scale=s).step_budget(v)  # noqa: E731
    assert at(1.0) == lay.step_budget(v) == 845
    assert at(2.0) == 1690 and at(0.5) == 422  # round(422.5) = 422 (half to even)
    assert at(0.001) == 1  # at least one entry
    assert at(20.0) == v  # never more than visible
    assert full_scale(lay, [v]) == pytest.approx(v / 845)
    assert dataclasses.replace(lay, budget_scale=full_scale(lay, [v])).step_budget(v) == v


def test_scale_grid_by_hand():
    assert scale_grid(0.25, 1.1).tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.1])
    assert scale_grid(0.5, 2.0).tolist() == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_the_oracle_reaches_recall_one_at_scale_one():
    built, p, lay = toy_lane(oracle_first=True)
    recall = toy_recall(built, p, lay)
    assert recall(1.0) == 1.0 and recall(0.95) == pytest.approx(0.95)
    grid = scale_grid(0.05, full_scale(lay, [N - 1, N]))
    m = smallest_reaching(recall, grid, 1.0)
    assert m.reached and m.scale == pytest.approx(1.0) and m.recall == 1.0
    m = smallest_reaching(recall, grid, 0.9)
    assert m.scale == pytest.approx(0.9) and m.recall == pytest.approx(0.9)


def test_half_precise_design_needs_the_budget_worked_out_by_hand():
    # recall(B) = ceil(B/2)/100 >= 0.9 needs B >= 179; B = round(100 s): s = 1.80 on the
    # 0.05 grid (1.75 gives B = 175, ceil(87.5) = 88: recall 0.88)
    built, p, lay = toy_lane()
    recall = toy_recall(built, p, lay)
    assert recall(1.75) == pytest.approx(0.88) and recall(1.80) == pytest.approx(0.90)
    m = smallest_reaching(recall, scale_grid(0.05, full_scale(lay, [N - 1, N])), 0.9)
    assert m.reached and m.scale == pytest.approx(1.80) and m.recall == pytest.approx(0.9)
    # grid 0.05 .. 10 (200 points): 1.0 (0.5), 2.0 (1.0), then bisection 1.5 (0.75),
    # 1.75 (0.88), 1.85 (0.93), 1.80 (0.90)
    assert m.evaluations == 6


def test_search_returns_the_first_reaching_point_of_any_monotone_grid():
    rng = np.random.default_rng(12)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        grid = np.cumsum(rng.uniform(0.01, 0.5, n))  # starts below or above 1.0
        values = np.sort(rng.uniform(0, 1, n))
        target = float(rng.uniform(0, 1))
        calls: list[float] = []

        def recall_at(s, grid=grid, values=values, calls=calls):
            calls.append(s)
            return values[np.searchsorted(grid, s)]

        m = smallest_reaching(recall_at, grid, target)
        first = np.nonzero(values >= target)[0]
        if first.size:
            assert m.reached and m.scale == grid[first[0]] and m.recall == values[first[0]]
        else:
            assert not m.reached and m.scale == grid[-1] and m.recall == values[-1]
        assert m.evaluations == len(set(calls)) == len(calls)  # each scale replayed once
        assert m.evaluations <= 2 * math.ceil(math.log2(n)) + 2


def test_unreachable_target_is_reported_with_the_recall_reached():
    # the toy selects at most 160 entries, 80 of the oracle's 100: recall 0.8 at best,
    # reached from B = 160 (scale 1.6) up to every entry visible (scale 10)
    built, p, lay = toy_lane(cap=160)
    top = full_scale(lay, [N - 1, N])
    assert top == pytest.approx(N / K)
    m = smallest_reaching(toy_recall(built, p, lay), scale_grid(0.05, top), 0.9)
    assert not m.reached and m.scale == pytest.approx(top) and m.recall == pytest.approx(0.8)
    assert m.evaluations == 5  # scales 1, 2, 4, 8, then the top: 0.5, 0.8, 0.8, 0.8, 0.8


def test_selecting_every_visible_entry_always_reaches_the_target():
    built, p, lay = toy_lane()
    top = full_scale(lay, [N - 1, N])
    assert toy_recall(built, p, lay)(top) == 1.0


@pytest.fixture(scope="module")
def matched_run(tmp_path_factory):
    """default.yaml's Swarm and InfLLM at a 4K prefix, one sequence, 4 steps, matched at 0.9."""
    cfg = load_scenario("default")
    w = dataclasses.replace(
        cfg.workload, context_tokens=4096, profile_steps=64, steps=4, batch=1, match_recall=0.9
    )
    keep = tuple(v for v in cfg.variants if v.name in ("Swarm", "InfLLM"))
    cfg = dataclasses.replace(cfg, workload=w, variants=keep)
    h20 = load_profile("h20-8ssd")
    return cfg, h20, run(cfg, h20, tmp_path_factory.mktemp("matched"))


def test_matched_run_is_a_plain_run_at_the_scale_found(matched_run):
    cfg, h20, res = matched_run
    df = res.summary().set_index("variant")
    for name in ("Swarm", "InfLLM"):
        row = df.loc[name]
        assert row["match_reached"] and row["match_recall"] >= 0.9
        # the simulated matched run scores the recall the search found (two computations)
        assert row["matched_recall"] == pytest.approx(row["match_recall"])
        assert row["matched_budget_scale"] == row["match_scale"]
        plain = dataclasses.replace(cfg.workload, match_recall=0.0, budget_scale=row["match_scale"])
        equal = dataclasses.replace(cfg.workload, match_recall=0.0)
        v = next(v for v in cfg.variants if v.name == name)
        for workload, prefix in ((plain, "matched_"), (equal, "")):
            again = run(dataclasses.replace(cfg, workload=workload, variants=(v,)), h20, None)
            s = again.summary().iloc[0]
            assert s["tokens_per_s"] == row[prefix + "tokens_per_s"], (name, prefix)
            assert s["recall"] == row[prefix + "recall"], (name, prefix)


def test_the_scale_found_is_the_smallest_on_the_grid(matched_run):
    cfg, h20, res = matched_run
    df = res.summary().set_index("variant")
    w = cfg.workload
    prefix = w.context_tokens + w.profile_steps
    for v in cfg.variants:
        scale = df.loc[v.name, "match_scale"]
        if scale <= w.match_step + 1e-9:
            continue
        p = dataclasses.replace(cfg.variant_params(v), budget_scale=scale - w.match_step)
        lay = layout_for(p, h20, len(h20.ssd_names), prefix)
        seed = int(np.random.SeedSequence([cfg.seed, 0, 0]).generate_state(1)[0])
        assert mean_recall([run_lane(p, lay, seed)]) < 0.9, v.name


def test_matched_runs_are_written_beside_the_variant(matched_run):
    _, _, res = matched_run
    assert (res.out_dir / "variants" / "swarm" / "matched" / "plan.parquet").is_file()


BASE = """name: m
description: matched recall
seed: 0
workload:
  kind: swarm
  context_tokens: 1024
  match_recall: 0.9
variants:
  - {name: a, budget_scale: 1.5}
"""


@pytest.mark.parametrize(
    "old, new, line, key",
    [
        ("match_recall: 0.9", "match_recall: 1.5", 7, "workload.match_recall"),
        ("match_recall: 0.9", "match_recall: -0.5", 7, "workload.match_recall"),
        ("match_recall: 0.9", "match_step: 0", 7, "workload.match_step"),
        ("budget_scale: 1.5", "budget_scale: 0", 9, "variants[0].budget_scale"),
        ("budget_scale: 1.5", "budget_scale: -2", 9, "variants[0].budget_scale"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(tmp_path: Path, old, new, line, key, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(BASE.replace(old, new))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}:{line}: {key}") and "\n" not in str(exc.value)
    assert main(["sim", "--scenario", str(path), "--out", str(tmp_path / "out")]) == 2
    assert key in capsys.readouterr().err.strip().splitlines()[-1]


def test_table_says_unreachable_with_the_recall_reached(matched_run):
    from rich.console import Console

    from kvtier.cli.simulate import design_tables

    cfg, _, res = matched_run
    df = res.summary()
    df.loc[df["variant"] == "InfLLM", ["match_reached", "match_recall"]] = [False, 0.8125]
    console = Console(record=True, width=400)
    for table in design_tables(df, cfg):
        console.print(table)
    lines = console.export_text().splitlines()
    infllm = [line for line in lines if "InfLLM" in line][-1]  # the quality table's row
    swarm = [line for line in lines if "Swarm" in line][-1]
    assert "unreachable" in infllm and "0.812" in infllm  # the recall it reached
    assert "unreachable" not in swarm
