"""Where the notebooks find their inputs: one results folder, searched recursively.

Every notebook in ``analysis/`` takes one folder in its ``parameters`` cell
(``KVTIER_RESULTS`` unless set there) and reads what lies anywhere under it:
a notebook drawing every run of a kind (sweeps, serving runs, kvdrive tables)
reads them all; one drawing a single run (a capacity plan, a SwiftCache run, a
validation report) reads the newest (:func:`newest_run`).  So the folder can
be one run's, or the results folder kvtier writes by default (``results/``)
holding many.

``kvtier lab`` (``make lab``) opens JupyterLab on ``analysis/`` with
``KVTIER_RESULTS`` set by :func:`lab_results`: the user's results folder when
it holds any results, else the tiny run shipped in :data:`TINY` (the commands
that produced it are in its ``README.md``); and ``KVTIER_TRACES``, the folder of
captured access traces the attention notebook reads (not results: captures of a
real model's attention), by :func:`lab_traces`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

TINY = Path(__file__).resolve().parent / "tiny-run"
RESULT_FILES = ("*.parquet",)  # every kvtier result table is Parquet (kvtier.contracts.records)


def newest_run(root: str | Path, name: str, keep: Callable[[Path], bool] | None = None) -> Path:
    """The folder holding the newest file called ``name`` under ``root`` (``root``
    itself included), among those ``keep`` accepts (it gets the folder); a
    FileNotFoundError naming ``root`` and ``name`` when there is none."""
    root = Path(root)
    found = [p for p in root.rglob(name) if p.is_file() and (keep is None or keep(p.parent))]
    if not found:
        raise FileNotFoundError(f"no {name} under {root}")
    return max(found, key=lambda p: (p.stat().st_mtime_ns, str(p))).parent


def has_results(root: str | Path) -> bool:
    """``root`` is a folder with at least one result table somewhere under it."""
    root = Path(root)
    return root.is_dir() and any(next(root.rglob(g), None) for g in RESULT_FILES)


def lab_traces(traces: str | Path) -> Path:
    """The captures ``kvtier lab`` shows: ``traces`` (absolute) when it holds an access
    trace (``*.parquet``, as the attention notebook globs them), else the tiny run's."""
    traces = Path(traces).resolve()
    return traces if traces.is_dir() and next(traces.glob("*.parquet"), None) else TINY / "traces"


def lab_results(results: str | Path) -> Path:
    """What ``kvtier lab`` points the notebooks at: ``results`` (absolute) when it
    holds results, else :data:`TINY`."""
    results = Path(results).resolve()
    return results if has_results(results) else TINY
