"""Every analysis notebook is a jupytext pair: the percent-format ``.py`` (the source
of truth) and the ``.ipynb`` beside it hold the same cells, so nobody edits one and
forgets the other (``jupytext --sync analysis/<name>.py`` brings them back together)."""

from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="notebook extras not installed")
nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
FORMATS = "ipynb,py:percent"
NOTEBOOKS = sorted(p.stem for p in ANALYSIS.glob("*.ipynb"))


def cells(nb) -> list[tuple[str, str, list[str]]]:
    """(type, source, tags) of every cell: what the pair must agree on."""
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_notebook_has_its_paired_py_and_no_py_lacks_its_notebook() -> None:
    assert NOTEBOOKS, "no notebooks under analysis/"
    paired = sorted(
        p.stem for p in ANALYSIS.glob("*.py") if f"formats: {FORMATS}" in p.read_text()[:600]
    )
    assert paired == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_ipynb_and_py_hold_the_same_cells(name: str) -> None:
    py = jupytext.read(ANALYSIS / f"{name}.py")
    ipynb = nbformat.read(ANALYSIS / f"{name}.ipynb", as_version=4)
    for nb in (py, ipynb):
        assert nb.metadata["jupytext"]["formats"] == FORMATS
    assert cells(ipynb) == cells(py)
    # inputs come from one papermill-style parameters cell (tests inject tiny ones)
    assert sum("parameters" in tags for _, _, tags in cells(py)) == 1
