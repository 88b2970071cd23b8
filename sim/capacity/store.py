"""Results of a plan as a Parquet dataset, one file per point, keyed by its configuration hash.

Each evaluated point is written as ``<dir>/part-<key>.parquet`` the moment it
is done (written to a temporary name, then renamed: a killed run leaves whole
files only), so an interrupted search resumes where it stopped and a rerun
by the same code never recomputes a point: :meth:`ResultStore.get` finds it by
:func:`sim.capacity.evaluate.point_key` (which hashes the code too).
``pyarrow.parquet.read_table(dir)`` reads the whole dataset.

A point's ``ok`` row must carry :data:`FACTS`, the whole-run bottleneck's facts the
search decides by (:mod:`sim.capacity.search`); a row written before they were
columns is not loaded, so its point is simulated again and its file rewritten
(:attr:`ResultStore.stale` counts them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# more SSDs relieve every resource tied at the top / more GPUs relieve one of them
FACTS = ("bottleneck_run_ssd_only", "bottleneck_run_gpu_relieved")


class ResultStore:
    """Point results by key, backed by a directory of Parquet files (or memory only)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.dir = Path(directory) if directory is not None else None
        self._rows: dict[str, dict[str, Any]] = {}
        self.stale = 0  # ok rows without FACTS (written before them): recomputed
        if self.dir is not None and self.dir.exists():
            for path in sorted(self.dir.glob("part-*.parquet")):
                for row in pq.read_table(path).to_pylist():
                    if row.get("status") == "ok" and not all(k in row for k in FACTS):
                        self.stale += 1
                        continue
                    self._rows[row["key"]] = row

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(key)

    def put(self, row: dict[str, Any]) -> None:
        """Keep ``row`` (it has a ``key``) and write it to its own file."""
        self._rows[row["key"]] = row
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"part-{row['key']}.parquet"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        pq.write_table(pa.Table.from_pylist([row]), tmp)
        os.replace(tmp, path)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self._rows.values()))
