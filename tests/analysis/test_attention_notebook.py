"""analysis/attention.ipynb runs end to end on two tiny captures from the real model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")
nbclient = pytest.importorskip("nbclient", reason="notebook extras not installed")
torch = pytest.importorskip("torch", reason="the 'model' extra (torch) is not installed")
pytest.importorskip("gguf", reason="the 'model' extra (gguf) is not installed")

from traces import capture as cap  # noqa: E402
from traces.access import write_access_trace  # noqa: E402

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"


def test_attention_notebook_runs_on_tiny_captures(tmp_path: Path) -> None:
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
    nb = nbformat.read(ANALYSIS / "attention.ipynb", as_version=4)
    old = os.environ.get("KVTIER_TRACES")
    os.environ["KVTIER_TRACES"] = str(tmp_path)
    try:
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ANALYSIS)}}
        ).execute()
    finally:
        if old is None:
            os.environ.pop("KVTIER_TRACES", None)
        else:
            os.environ["KVTIER_TRACES"] = old
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text_out = "".join(o.get("text", "") for o in outputs)
    assert "2 captures; per-head statistics of a: 90 heads" in text_out
