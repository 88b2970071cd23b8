"""The speed benchmark's trace and the engine's progress reports."""

from __future__ import annotations

import numpy as np

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


def test_bench_gives_each_design_only_its_own_tiers():
    """GPU only has no offload tier; paged-cpu no SSD; seed 004's designs both."""
    from sim.serving.bench import _tier_overrides

    t = (20.0, 200.0)
    assert _tier_overrides("gpu-only", t) == {}
    assert _tier_overrides("paged-cpu", t) == {"cpu_gib": 20.0}
    assert _tier_overrides("paged-ssd", t) == {"ssd_gib": 200.0}
    for d in ("lmcache", "pool", "paged-cpu-ssd"):
        assert _tier_overrides(d, t) == {"cpu_gib": 20.0, "ssd_gib": 200.0}
