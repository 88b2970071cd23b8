"""``Machine.gpu_seconds`` is :func:`roofline_seconds` at the machine's
achievable rates, to the bit (it divides by the rates worked out once)."""

from __future__ import annotations

import numpy as np
import pytest

from hwprofiles.loader import load_profile
from sim.hw.machine import Machine, RouteError
from sim.models.cost import LayerCost, roofline_seconds


@pytest.mark.parametrize("name", ["h100-2dimm-2ssd", "h20-8ssd", "l20-server"])
def test_gpu_seconds_is_the_roofline_to_the_bit(name: str) -> None:
    m = Machine(load_profile(name))
    gpu = m.profile.gpu_names[0]
    rng = np.random.default_rng(5)
    flops = rng.uniform(0, 1e15, 200) * rng.choice([1e-6, 1.0], 200)
    hbm = rng.uniform(0, 1e11, 200) * rng.choice([1e-6, 1.0], 200)
    both = 0
    for f, b in zip(flops.tolist(), hbm.tolist(), strict=True):
        want = roofline_seconds(LayerCost(f, b), m.tensor_flops / 1e12, m.hbm_bps / 1e9)
        assert m.gpu_seconds(gpu, f, b) == want
        both |= 1 if f / (m.tensor_flops) > b / m.hbm_bps else 2
    assert both == 3  # compute-bound and memory-bound cases both seen
    with pytest.raises(RouteError):
        m.gpu_seconds("no-such-gpu", 1.0, 1.0)
