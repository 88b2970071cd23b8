"""Notebooks kept as code: ``analysis/make_*_notebook.py`` list their cells and
call :func:`write_notebook`, so a notebook's cells are reviewable in a diff."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_notebook(cells: Sequence[tuple[str, str]], path: str | Path) -> None:
    """Write ``cells`` (``("md" | "code", source)``) as a Python 3 notebook at ``path``."""
    import nbformat as nbf

    nb = nbf.v4.new_notebook()
    nb.cells = [
        nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
        for kind, src in cells
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbf.write(nb, Path(path))
