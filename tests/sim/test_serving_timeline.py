"""The engine's timeline: a row whenever its counts change, none otherwise.

:meth:`sim.serving.execute.engine.Engine._sample` compares the counts with the last
row it wrote before asking :meth:`Timeline.sample`; the rows must be the ones
that asking every iteration gives (the reference), on a run whose queue,
parked and running counts and GPU blocks move."""

from __future__ import annotations

import numpy as np

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.bench import mooncake_requests
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import Engine, EngineConfig


def _timeline(design: str):
    profile, card, block = load_profile("h100-2dimm-2ssd"), get_model("Llama-3.1-8B"), 16
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block) // 8, block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=False)  # fmt: skip
    eng = build_engine(profile, card, get_design(design), cfg, mooncake_requests(60, block, 1))
    return eng.run(None).timeline


def _every_iteration(self: Engine) -> None:
    """The reference: every iteration's counts offered to the timeline."""
    gpu = self.mgr.gpu
    self.timeline.sample(
        self.env.now, len(self.waiting), len(self.parked), len(self.running), gpu.used
    )


def test_rows_equal_sampling_every_iteration(monkeypatch) -> None:
    for design in ("lmcache-lp-async", "paged-ssd"):
        got = _timeline(design)
        monkeypatch.setattr(Engine, "_sample", _every_iteration)
        want = _timeline(design)
        monkeypatch.undo()
        assert got.num_rows == want.num_rows > 20
        assert got.equals(want)
        running = got.column("running").to_numpy()
        assert running.max() > 1 and np.all(np.diff(got.column("t_s").to_numpy()) >= 0)
