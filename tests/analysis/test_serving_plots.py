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


def test_a_run_without_per_design_timelines_gets_no_empty_remaining_plot(tmp_path) -> None:
    # a routed fleet's variant folder holds its requests but no timeline (those are
    # per instance): the TTFT CDF is drawn, the remaining-requests curve is not
    from analysis.serving_plots import write_serving_plots

    pd.DataFrame({"variant": ["gpu-only"]}).to_parquet(tmp_path / "summary.parquet")
    (tmp_path / "variants" / "gpu-only").mkdir(parents=True)
    req = pd.DataFrame({"ttft_s": [0.1, 0.2, 0.4], "rejected": [False, False, False]})
    req.to_parquet(tmp_path / "variants" / "gpu-only" / "requests.parquet")
    assert [p.name for p in write_serving_plots(tmp_path)] == ["ttft-cdf.png"]
    tl = pd.DataFrame({"t_s": [0.0], "waiting": [0]})
    req["release_s"], req["finish_s"] = [0.0, 0.1, 0.2], [1.0, 2.0, 3.0]
    req.to_parquet(tmp_path / "variants" / "gpu-only" / "requests.parquet")
    tl.to_parquet(tmp_path / "variants" / "gpu-only" / "timeline.parquet")
    names = [p.name for p in write_serving_plots(tmp_path)]
    assert names == ["remaining-requests.png", "ttft-cdf.png"]
