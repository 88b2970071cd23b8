"""Serving plots: the remaining-requests curve by hand, and the PNGs a run gets."""

from __future__ import annotations

import pandas as pd

from analysis.serving_plots import remaining


def test_remaining_requests_by_hand() -> None:
    req = pd.DataFrame(
        {
            "release_s": [0.0, 1.0, 1.5],
            "finish_s": [2.0, 3.0, 9.0],
            "rejected": [False, False, True],  # rejected ones are never in the system
        }
    )
    tl = pd.DataFrame({"t_s": [0.0, 1.0, 2.5], "waiting": [1, 1, 0]})
    r = remaining(req, tl)
    assert r["t_s"].tolist() == [0.0, 1.0, 2.0, 2.5, 3.0]
    assert r["remaining"].tolist() == [1, 2, 1, 1, 0]
    assert r["waiting"].tolist() == [1, 1, 1, 0, 0]
