"""Parameter sweeps: one scenario, one factor, many values, in a process pool.

``sweep(cfg, profiles, factor, values)`` runs the scenario's variants at every
value of one workload field (``ssds``, ``context_tokens``, ``batch``,
``sparsity``, ...) or over several hardware profiles (``factor="hw"``), each
point an independent simulation with the scenario's seed.  Points run in a
local process pool (``jobs`` workers); results are one table, one row per
(point, variant), with the factor's value in a column.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import pandas as pd

from hwprofiles import HardwareProfile, load_profile
from sim.config import ConfigError, ScenarioConfig, Variant


def parse_values(field: str, text: str, cfg: ScenarioConfig) -> list[Any]:
    """``"1,2,4,8"`` -> typed values for workload field ``field`` (or ``hw``)."""
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items:
        raise ConfigError(f"--values: no values given for '{field}'")
    if field == "hw":
        return items
    fields = {f.name: f for f in dataclasses.fields(cfg.workload)}
    if field not in fields or field == "kind":
        raise ConfigError(
            f"--factor: '{field}' is not a workload field (one of: "
            f"{', '.join(sorted(set(fields) - {'kind'}))}, hw)"
        )
    kind = type(getattr(cfg.workload, field))
    out = []
    for item in items:
        try:
            out.append(kind(float(item)) if kind is int else kind(item))
        except ValueError:
            raise ConfigError(f"--values: '{item}' is not a valid {field}") from None
    return out


def _point(cfg: ScenarioConfig, hw: str, field: str, value: Any) -> pd.DataFrame:
    from sim.runner import run

    profile = load_profile(hw)
    if field != "hw":
        # the factor overrides the base workload and every variant
        cfg = dataclasses.replace(
            cfg,
            workload=dataclasses.replace(cfg.workload, **{field: value}),
            variants=tuple(
                Variant(v.name, tuple((k, x) for k, x in v.overrides if k != field))
                for v in cfg.variants
            ),
        )
    result = run(cfg, profile, None)
    df = result.summary()
    df.insert(0, "hw", profile.name)
    if field != "hw":
        if field in df.columns:  # the summary reports it too (e.g. ssds): keep the factor's
            df = df.drop(columns=[field])
        df.insert(0, field, value)
    return df


def sweep(
    cfg: ScenarioConfig,
    profile: HardwareProfile,
    field: str,
    values: Sequence[Any],
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Run every value of ``field``; ``jobs`` processes (default: CPU count)."""
    points = [(profile.name if field != "hw" else v, v) for v in values]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(points)))
    frames: dict[int, pd.DataFrame] = {}
    if jobs == 1:
        for i, (hw, v) in enumerate(points):
            frames[i] = _point(cfg, hw, field, v)
            if progress:
                progress(i + 1, len(points))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {
                pool.submit(_point, cfg, hw, field, v): i for i, (hw, v) in enumerate(points)
            }
            for n, fut in enumerate(as_completed(futures), start=1):
                frames[futures[fut]] = fut.result()
                if progress:
                    progress(n, len(points))
    return pd.concat([frames[i] for i in range(len(points))], ignore_index=True)
