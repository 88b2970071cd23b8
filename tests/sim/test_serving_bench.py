"""The speed benchmark's trace and the engine's progress reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving import bench
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute import engine as engine_module
from sim.serving.execute.engine import EngineConfig


def _engine(n: int, keep_plan: bool = True):
    profile, card = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B")
    cfg = EngineConfig(
        gpu_blocks=gpu_blocks(default_gpu_kv_bytes(profile, card), card, 256),
        block_tokens=256,
        gpu=profile.gpu_names[0],
        keep_plan=keep_plan,
    )
    design = get_design("lmcache", {"cpu_gib": 1.0, "ssd_gib": 4.0})
    return build_engine(profile, card, design, cfg, bench.mooncake_requests(n, 256))


def test_progress_watches_without_changing_a_single_event(monkeypatch) -> None:
    monkeypatch.setattr(engine_module, "PROGRESS_STEPS", 50)  # many reports mid-run
    plain = _engine(40).run().requests
    seen: list[tuple[float, int, int]] = []
    watched = _engine(40).run(lambda now, done, total: seen.append((now, done, total))).requests
    for col in ("first_token_s", "finish_s"):
        a, b = (np.asarray(t.column(col).to_numpy(zero_copy_only=False)) for t in (plain, watched))
        assert np.array_equal(a, b)
    assert len(seen) > 3
    assert seen[-1][1:] == (40, 40)  # the last report: everything served
    assert seen[-1][0] == float(np.max(watched.column("finish_s").to_numpy()))
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(seen, seen[1:], strict=False))


def test_a_run_without_its_plan_has_the_same_records() -> None:
    """keep_plan=False drops extents and dependencies, not a single event."""
    kept, lean = _engine(30).run(), _engine(30, keep_plan=False).run()
    assert lean.plan is None and kept.plan is not None
    assert kept.plan.num_rows == lean.ops.num_rows == kept.ops.num_rows
    assert lean.ops.equals(kept.ops)
    assert lean.requests.to_pandas().equals(kept.requests.to_pandas())  # NaN == NaN here
    assert lean.devices.equals(kept.devices)


def test_trace_stats_count_reused_blocks_by_hand() -> None:
    reqs = bench.mooncake_requests(3, 256)
    reqs[0].hashes, reqs[1].hashes, reqs[2].hashes = [1, 2], [1, 2, 3], [9]
    # blocks 1, 2 of the second request were seen before: 2 of 6 blocks
    assert bench.trace_stats(reqs)["reusable"] == 2 / 6


def test_mooncake_trace_has_the_target_shape() -> None:
    """The generator against Mooncake's published totals (FAST'25: mean input
    ~12K tokens, p99 ~85K, ~37% reusable, 12,031 requests over 3,537 s = 3.40/s);
    4,000 seeded requests, tolerances wider than the seed-to-seed spread
    measured at that size (p99 is the noisiest: one request in a hundred)."""
    s = bench.table_stats(bench.mooncake_table(4000, seed=3))
    assert abs(s["mean_input"] - 12_000) < 0.10 * 12_000
    assert abs(s["p99_input"] - 85_000) < 0.20 * 85_000
    assert abs(s["reusable"] - 0.37) < 0.05
    assert abs(s["rate"] - 12_031 / 3_537) < 0.10 * 12_031 / 3_537


def test_table_stats_agree_with_the_per_request_count() -> None:
    """The vectorised statistics equal trace_stats' set-based count at the
    trace's own block size (two independent computations)."""
    table = bench.mooncake_table(300, seed=1)
    fast = bench.table_stats(table)
    slow = bench.trace_stats(bench.load_requests(table, bench.TRACE_BLOCK))
    assert fast["mean_input"] == slow["mean_input"]
    assert fast["p99_input"] == slow["p99_input"]
    assert abs(fast["reusable"] - slow["reusable"]) < 1e-12


def test_mooncake_outputs_have_the_fitted_shape() -> None:
    """Output lengths against Mooncake's conversation trace (sim/serving/bench.py's
    docstring): the published mean 343; median 348, p90 593 and 14.8% under 50
    tokens in the 270 requests read from the trace.  4,000 seeded requests;
    the fit itself gives median ~341, p90 ~582, 13.4% under 50, and the
    tolerances are wider than the seed-to-seed spread at 12K requests."""
    out = bench.mooncake_table(4000, seed=3).column("output_tokens").to_numpy()
    assert abs(out.mean() - 343) < 0.05 * 343
    assert abs(np.median(out) - 348) < 0.08 * 348
    assert abs(np.percentile(out, 90) - 593) < 0.08 * 593
    assert abs(np.mean(out < 50) - 40 / 270) < 0.04


def test_fitted_outputs_keep_inputs_and_reuse_on_target() -> None:
    """Whole answers shift tokens from the last prompt to its answer; the
    inputs must still meet Mooncake's totals (the shape test's tolerances)."""
    s = bench.table_stats(bench.mooncake_table(4000, seed=3))
    assert abs(s["mean_input"] - 12_035) < 0.10 * 12_035
    assert abs(s["reusable"] - 0.37) < 0.05


def test_the_baseline_trace_is_the_one_before_the_output_fit() -> None:
    """``fitted_outputs=False`` is the trace the serving baseline saved: the
    same sessions, arrivals and session totals, answers cut to what is left
    (a one-turn session's answer is 1 token when its prompt fills it)."""
    old = bench.mooncake_table(500, seed=2, fitted_outputs=False)
    new = bench.mooncake_table(500, seed=2)
    first = [t.column("turn").to_numpy() == 0 for t in (old, new)]
    # the first turns' arrivals come from the same draws in both traces
    a_old = np.sort(old.column("arrival_s").to_numpy()[first[0]])
    a_new = np.sort(new.column("arrival_s").to_numpy()[first[1]])
    n = min(len(a_old), len(a_new)) // 2
    assert np.array_equal(a_old[:n], a_new[:n])
    assert np.median(old.column("output_tokens").to_numpy()) == 1
    assert np.median(new.column("output_tokens").to_numpy()) > 300


def test_load_stretches_arrivals_to_the_offered_load() -> None:
    """The offered load is proportional to the arrival rate: stretched to 0.8,
    the trace offers 0.8 (recomputed on the stretched arrivals), and its
    arrival duration grows by the ratio of the two loads."""
    own, s_own = bench.bench_trace(300, 0, 256, "h100-2dimm-2ssd", "Llama-3.1-8B")
    slow, s = bench.bench_trace(300, 0, 256, "h100-2dimm-2ssd", "Llama-3.1-8B", 0.8)
    assert s_own["offered_load"] == s_own["offered_load_trace"] == s["offered_load_trace"]
    assert s["offered_load"] == pytest.approx(0.8, rel=1e-12)
    ratio = s["offered_load_trace"] / 0.8
    assert s["duration_s"] == pytest.approx(s_own["duration_s"] * ratio, rel=1e-12)
    assert s_own["offered_load_trace"] > 1  # Mooncake's rate overloads one H100
    for col in ("input_tokens", "output_tokens", "block_hashes"):
        assert slow.column(col).equals(own.column(col))


def test_kv_batch_is_what_the_gpu_cache_holds_at_the_mean_context() -> None:
    """Inputs 1,000 and 1,200, outputs 100 and 300: mean context 1,100 + 200 / 2 =
    1,200 tokens, 75 blocks of 16; 750 blocks hold 10 such requests."""
    t = pa.table({"input_tokens": [1000, 1200], "output_tokens": [100, 300]})
    assert bench.kv_batch(t, 750, 16, 128) == 10
    assert bench.kv_batch(t, 750, 16, 8) == 8  # max_batch binds
    assert bench.kv_batch(t, 10, 16, 128) == 1  # not one request: one at a time


def test_bench_gives_each_design_only_its_own_tiers():
    """GPU only has no offload tier; paged-cpu no SSD; seed 004's designs both."""
    from sim.serving.bench import _tier_overrides

    t = (20.0, 200.0)
    assert _tier_overrides("gpu-only", t) == {}
    assert _tier_overrides("paged-cpu", t) == {"cpu_gib": 20.0}
    assert _tier_overrides("paged-ssd", t) == {"ssd_gib": 200.0}
    for d in ("lmcache", "pool", "paged-cpu-ssd"):
        assert _tier_overrides(d, t) == {"cpu_gib": 20.0, "ssd_gib": 200.0}


def test_capacity_is_what_a_saturated_instance_serves(capsys) -> None:
    """``--capacity``: the arrival rate over the completion rate of a saturated pass.
    The capacity does not depend on ``--load`` (the pass is the same), so the measured
    load is proportional to it, and below the capacity an instance keeps up: at a low
    load its own completions over the same middle 80% come at the arrival rate, below
    the capacity."""
    args = ["--requests", "200", "--design", "gpu-only", "--block", "256", "--json"]
    got = {}
    for load in (0.4, 0.8):
        assert bench.main([*args, "--load", str(load), "--capacity"]) == 0
        got[load] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    lo, hi = got[0.4], got[0.8]
    assert lo["capacity_rps"] == hi["capacity_rps"] > 0
    assert hi["arrival_rps"] == pytest.approx(2 * lo["arrival_rps"], rel=1e-9)
    assert hi["load_measured"] == pytest.approx(2 * lo["load_measured"], rel=1e-9)
    assert lo["load_measured"] < 1
    # the unsaturated run at 0.4 completes over its middle 80% no faster than the capacity
    table, _ = bench.bench_trace(200, 0, 256, "h100-2dimm-2ssd", "Llama-3.1-8B", 0.4)
    reqs = bench.load_requests(table, 256)
    rec = bench.build(reqs, "gpu-only", 256, "h100-2dimm-2ssd", "Llama-3.1-8B").run(None)
    finish = np.sort(rec.requests.column("finish_s").to_numpy(zero_copy_only=False))
    a, b = int(0.1 * len(finish)), int(0.9 * len(finish))
    assert (b - 1 - a) / (finish[b - 1] - finish[a]) < lo["capacity_rps"]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_peak_rss_is_this_process_not_the_one_that_started_it():
    """A parent holding 400 MiB starts a fresh interpreter that holds little: the
    child's peak is its own (well under 400 MiB), where ``ru_maxrss`` carries the
    parent's across ``execve``."""
    hog = bytearray(400 << 20)
    hog[::4096] = b"x" * len(hog[::4096])  # touch every page: resident
    code = "from sim.serving.bench import _peak_rss_mib; print(_peak_rss_mib())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert float(out.stdout) < 200
    del hog
