"""Online cluster maintenance (§6.2) runs once decode outlasts
the local window, and changes what is read.

A token generated at step t leaves the window when ``visible - window`` passes
it: with a 16-token window and 48 steps, tokens prefix..prefix+31 leave (32
tokens; step t's window starts at ``prefix + t + 1 - 16``).  Without
maintenance each becomes a singleton cluster; with it, those co-active with a
medoid while in the window join that medoid's cluster instead.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.swarm import build_lane, layout_for, replay_lane

WINDOW, STEPS = 16, 48
LEFT = STEPS - WINDOW  # tokens that left the window by the last step


@pytest.fixture(scope="module")
def lanes():
    """default.yaml's workload at a 4K prefix, one sequence, window 16, 48 steps."""
    base = load_scenario("default").workload
    h20 = load_profile("h20-8ssd")
    out = {}
    for maint in (True, False):
        p = dataclasses.replace(
            base,
            context_tokens=4096,
            profile_steps=64,
            steps=STEPS,
            batch=1,
            local_window=WINDOW,
            design_params={"maintenance": maint},
        )
        lay = layout_for(p, h20, len(h20.ssd_names), p.context_tokens + p.profile_steps)
        built = build_lane(p, lay, seed=5)
        out[maint] = replay_lane(built, p, lay)
    return out


def _total(lane, key: str) -> int:
    return int(sum(d.info[key] for d in lane.decisions))


def test_every_leaving_token_is_placed_once_decode_outlasts_the_window(lanes):
    off = lanes[False]
    assert _total(off, "joins") == 0 and _total(off, "new_clusters") == LEFT
    on = lanes[True]
    # a token joins one or more clusters, or opens its own: at least one cluster per token
    assert _total(on, "joins") > 0 and _total(on, "new_clusters") < LEFT
    assert _total(on, "new_clusters") + _total(on, "joins") >= LEFT


def test_maintenance_changes_what_is_read(lanes):
    on, off = lanes[True], lanes[False]
    before = WINDOW  # no token has left the window before step WINDOW: same reads
    for a, b in zip(on.decisions[:before], off.decisions[:before], strict=True):
        assert np.array_equal(a.selected, b.selected)
    differ = [
        t
        for t, (a, b) in enumerate(zip(on.decisions, off.decisions, strict=True))
        if a.read_bytes != b.read_bytes or not np.array_equal(a.selected, b.selected)
    ]
    assert differ and min(differ) >= before
