"""The attention notebook (built from analysis/attention.py) runs end to end on two
tiny captures from the real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the 'model' extra (torch) is not installed")
pytest.importorskip("gguf", reason="the 'model' extra (gguf) is not installed")

from traces import capture as cap  # noqa: E402
from traces.access import write_access_trace  # noqa: E402


def test_attention_notebook_runs_on_tiny_captures(run_notebook, tmp_path: Path) -> None:
    try:
        model, tok = cap.load_model()
    except cap.TraceError as exc:
        pytest.skip(f"the 'model' extra is incomplete: {exc}")
    torch.set_num_threads(2)
    text = cap.pydoc_text()
    p = cap.CaptureParams(context_tokens=96, steps=24, sparsity=0.25, sink_tokens=2,
                          local_window=8, chunk=48)  # fmt: skip
    for name, offset in (("a", 0), ("b", 300_000)):
        ids = tok.encode(text[offset : offset + 3000])
        c = cap.capture(model, ids, p, source=f"capture:test@{offset}")
        write_access_trace(c.trace, tmp_path / f"{name}.parquet")
    probes = {
        "names": "names",
        "df": "df",
        "het_cols": "het_cols",
        "grids": "[np.asarray(ax.images[0].get_array()).tolist() for ax in np.atleast_1d(axes)]",
        "persist": "len(persist)",
        "cross": "type(cross).__name__",
    }
    _, got = run_notebook("attention", {"FOLDER": str(tmp_path)}, probes)
    df = got["df"]
    assert got["names"] == ["a", "b"]  # 2 captures, sorted by name: text A and text B
    # per-head statistics of a: one row per (layer, head) of SmolLM2-135M, 30 x 3 = 90 heads
    assert len(df) == 90 and got["persist"] == 90
    assert sorted(zip(df["layer"], df["head"], strict=True)) == [
        (layer, head) for layer in range(30) for head in range(3)
    ]
    # each heat map draws its column of the per-head table, layer by head
    assert len(got["grids"]) == len(got["het_cols"])
    for col, grid in zip(got["het_cols"], got["grids"], strict=True):
        want = df.pivot(index="layer", columns="head", values=col).to_numpy()
        np.testing.assert_array_equal(np.asarray(grid, dtype=float), want)
    assert got["cross"] == "DataFrame"  # two texts: a cross-text comparison, not a note
