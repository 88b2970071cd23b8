"""Per layer-head window sizes under a GPU memory budget (seed 003 §5.2, "2D scaling").

Every lane (one sequence's layer-head group, :mod:`sim.scenarios.swarm`) gets
its own window cache.  A profiling pass replays the lane's prefill
selections (the observation window's activations,
``KVDrive.profile_selections``) through caches of ``w x budget`` entries for
each candidate window w (:func:`~sim.policies.kvdrive.knapsack.window_profile`):
the benefit of w is the entries *not* fetched against window 0, its cost the
cache's bytes (x ``repeat``: a modeled layer stands for that many real ones).
The greedy multiple-choice knapsack
(:func:`~sim.policies.kvdrive.knapsack.greedy_mckp`) then picks one window per
lane within the budget, so heads whose selections recur get large windows and
heads whose selections churn get none; each design's cache is rebuilt at its
window (:meth:`KVDrive.resize_cache`) before decoding starts.
"""

from __future__ import annotations

import numpy as np

from sim.policies.kvdrive.knapsack import greedy_mckp, window_profile

WINDOWS = (0, 1, 2, 4, 8)  # candidate windows, multiples of the step budget ("x N", Fig. 3)


def allocate_windows(
    designs: list, budget_bytes: float, repeat: int = 1, windows: tuple[int, ...] = WINDOWS
) -> np.ndarray:
    """Choose and apply one window per design (KVDrive instances, built); returns
    the windows chosen.  ``budget_bytes`` bounds the sum over designs of
    ``window x step budget x entry_bytes x repeat``."""
    if not designs:
        return np.zeros(0, dtype=np.int64)
    caps, benefit, cost = [], [], []
    for d in designs:
        budget = d.layout.step_budget(d.n_prefix + 1)
        b, c = window_profile(d.profile_selections, list(windows), budget, d.layout.entry_bytes)
        caps.append(budget)
        benefit.append(b)
        cost.append(c * repeat)
    choice = greedy_mckp(np.stack(benefit), np.stack(cost), float(budget_bytes))
    chosen = np.asarray(windows, dtype=np.int64)[choice]
    for d, w, cap in zip(designs, chosen.tolist(), caps, strict=True):
        d.resize_cache(w * cap)
    return chosen
