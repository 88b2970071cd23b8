"""Run an analysis notebook from its source of truth, the jupytext ``.py``.

``run_notebook(name, params, probes)`` builds the notebook from
``analysis/<name>.py``, injects ``params`` after its ``parameters``-tagged cell
(papermill's convention: an ``injected-parameters`` cell that overrides the
defaults), appends a cell that pickles the value of every expression in
``probes`` (evaluated in the kernel after the last cell), executes it with
nbclient in ``analysis/`` and returns ``(notebook, {probe name: value})``.  So a
test asserts on what the notebook computed, not on what it printed.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "analysis"

RunNotebook = Callable[[str, Mapping[str, Any], Mapping[str, str]], tuple[Any, dict[str, Any]]]


def inject_parameters(nb: Any, params: Mapping[str, Any]) -> None:
    """Insert ``NAME = repr(value)`` lines after the cell tagged ``parameters``."""
    import nbformat

    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{len(tagged)} cells tagged 'parameters' (expected one)"
    src = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(tagged[0] + 1, cell)


def probe_cell(probes: Mapping[str, str], path: Path) -> str:
    """Source of a cell that pickles ``{name: eval(expression)}`` to ``path``."""
    lines = ["import pickle as _pickle", "_probe = {}"]
    lines += [f"_probe[{k!r}] = {expr}" for k, expr in probes.items()]
    lines += [f"with open({str(path)!r}, 'wb') as _f:", "    _pickle.dump(_probe, _f)"]
    return "\n".join(lines)


@pytest.fixture
def run_notebook(tmp_path: Path) -> RunNotebook:
    nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")
    nbclient = pytest.importorskip("nbclient", reason="notebook extras not installed")
    jupytext = pytest.importorskip("jupytext", reason="notebook extras not installed")

    def run(
        name: str, params: Mapping[str, Any], probes: Mapping[str, str]
    ) -> tuple[Any, dict[str, Any]]:
        nb = jupytext.read(ANALYSIS / f"{name}.py")
        inject_parameters(nb, params)
        out = tmp_path / f"probe-{name}.pickle"
        nb.cells.append(nbformat.v4.new_code_cell(probe_cell(probes, out)))
        # the kernel imports this checkout's packages, however pytest was started
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path}
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ANALYSIS)}}
        )
        client.execute(env=env)  # raises CellExecutionError on a cell's error
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in outputs if o.get("output_type") == "error"]
        with out.open("rb") as f:
            return nb, pickle.load(f)

    return run
