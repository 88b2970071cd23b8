"""The serving run's garbage-collector policy: raised while it runs, restored after."""

import gc

import pytest

from sim.serving.execute.gcpolicy import YOUNG_THRESHOLD, relaxed_gc


@pytest.fixture
def default_thresholds():
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*old)


def test_threshold_raised_inside_and_restored(default_thresholds):
    with relaxed_gc():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_body_raises(default_thresholds):
    with pytest.raises(ValueError), relaxed_gc(5_000):
        assert gc.get_threshold()[0] == 5_000
        raise ValueError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowers_a_higher_threshold(default_thresholds):
    higher = 5 * YOUNG_THRESHOLD
    gc.set_threshold(higher, 10, 10)
    with relaxed_gc():
        assert gc.get_threshold()[0] == higher
    assert gc.get_threshold() == (higher, 10, 10)


def test_serving_run_is_inside_the_policy(default_thresholds):
    """The engine's run loop (watched by a progress callback) sees the raised
    threshold; the caller's is back once the run returns."""
    from hwprofiles.loader import load_profile
    from sim.models import get_model
    from sim.serving.bench import mooncake_requests
    from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
    from sim.serving.designs import get_design
    from sim.serving.execute.engine import EngineConfig

    profile, card = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B")
    block = 256
    cfg = EngineConfig(
        gpu_blocks=gpu_blocks(default_gpu_kv_bytes(profile, card, 0.9), card, block),
        block_tokens=block,
        gpu=profile.gpu_names[0],
        keep_plan=False,
    )
    eng = build_engine(profile, card, get_design("gpu-only"), cfg, mooncake_requests(5, block, 0))
    seen = []
    eng.run(lambda now, done, total: seen.append(gc.get_threshold()[0]))
    assert seen and set(seen) == {YOUNG_THRESHOLD}
    assert gc.get_threshold() == (700, 10, 10)
