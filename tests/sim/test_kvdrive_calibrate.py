"""KVDrive's calibration pass: the coordinate-wise search on a cost worked out by
hand, and on a tiny simulated run against the candidates simulated one by one."""

import itertools
from dataclasses import replace

import pytest

from hwprofiles import load_profile
from sim.executor import simulate
from sim.scenarios.kvdrive import plan_kvdrive
from sim.scenarios.kvdrive_calibrate import Config, calibrate, calibrate_kvdrive
from sim.scenarios.kvdrive_kind import KVDriveParams


def hand_step_s(c: Config) -> float:
    """Selection falls with chunks per centroid (64 / cpc x 0.1), reads rise
    (coarser centroids fetch more); lookup grows with the window (0.3 w) while the
    fetch shrinks (3 / w) and the step waits for the slower; micro-batches trade
    bubbles (0.5 / m) for launches (0.2 m)."""
    index = 0.1 * 64 / c.chunks_per_centroid + {4: 1.0, 8: 1.1, 16: 2.0}[c.chunks_per_centroid]
    cache = max(0.3 * c.window, 3.0 / c.window)
    pipe = 0.5 / c.micro_batches + 0.2 * c.micro_batches
    return index + cache + pipe


def test_calibration_picks_the_hand_optimum_and_stops_the_cache_climb_at_equilibrium():
    asked = []

    def measure(c: Config) -> float:
        asked.append(c)
        return hand_step_s(c)

    windows = (1, 2, 3, 4, 5, 6)
    cal = calibrate(measure, Config(8, 2, 1), (4, 8, 16), windows, (1, 2, 4))
    # index: 1.6+1.0=2.6, 0.8+1.1=1.9, 0.4+2.0=2.4 -> 8 chunks per centroid;
    # cache: max(0.3w, 3/w) = 3.0, 1.5, 1.0, 1.2 -> 3 (lookup 0.9 ~ fetch 1.0), and the
    # climb stops at 4 (slower): windows 5 and 6 are never tried;
    # micro-batches: 0.7, 0.65, 0.925 -> 2
    assert cal.best == Config(8, 3, 2)
    assert cal.step_s == pytest.approx(1.9 + 1.0 + 0.65)
    assert {c.window for c in asked} == {1, 2, 3, 4}
    assert len(asked) == len(set(asked)) == 3 + 3 + 2  # each configuration measured once
    grid = itertools.product((4, 8, 16), windows, (1, 2, 4))
    assert cal.step_s == pytest.approx(min(hand_step_s(Config(*g)) for g in grid))


def test_calibrated_micro_batches_are_the_fastest_simulated_one():
    l20 = load_profile("l20-server")
    p = KVDriveParams(
        context_tokens=2048, batch=4, steps=2, profile_steps=16, layers=2, trace="positional"
    )
    cal = calibrate_kvdrive(
        p, l20, 0, steps=2, chunks_per_centroid=(8,), windows=(2,), micro_batches=(1, 2, 4)
    )
    step = {}
    for m in (1, 2, 4):  # each candidate simulated on its own
        ops = simulate(plan_kvdrive(replace(p, micro_batches=m), l20, 0).plan, l20).ops
        step[m] = max(ops.column("end_s").to_pylist()) / p.steps
    assert cal.best.micro_batches == min(step, key=lambda m: (step[m], m))
    assert cal.step_s == pytest.approx(min(step.values()))
    assert [c.micro_batches for c, _ in cal.measured] == [1, 2, 4]


def test_calibrated_variant_runs_the_configuration_the_short_pass_picks():
    """``calibrate: true`` = the pass on a short profiling run (1,024 tokens), then
    the full run (2,048) with its choice: the same plan as giving that choice by hand."""
    from sim.scenarios.kvdrive_kind import plan_kvdrive as plan_variant

    l20 = load_profile("l20-server")
    p = KVDriveParams(
        context_tokens=2048,
        batch=2,
        steps=2,
        profile_steps=16,
        layers=2,
        trace="positional",
        calibrate=True,
        calibrate_tokens=1024,
    )
    short = replace(p, context_tokens=1024, calibrate=False)
    best = calibrate_kvdrive(short, l20, 0, steps=2).best
    planned = plan_variant(p, l20, 0, "calibrated", None)
    row = planned.summarize(simulate(planned.plan, l20))
    assert (row["cal_chunks_per_centroid"], row["cal_window"], row["cal_micro_batches"]) == (
        best.chunks_per_centroid,
        best.window,
        best.micro_batches,
    )
    assert row["micro_batches"] == best.micro_batches
    design = {"chunks_per_centroid": best.chunks_per_centroid, "window": best.window}
    by_hand = replace(p, calibrate=False, design_params=design, micro_batches=best.micro_batches)
    direct = plan_kvdrive(by_hand, l20, 0).plan
    assert planned.plan.equals(direct)


def test_calibrate_tokens_must_be_positive():
    from sim.registry import ParamError

    with pytest.raises(ParamError, match="calibrate_tokens"):
        KVDriveParams(calibrate_tokens=0)
