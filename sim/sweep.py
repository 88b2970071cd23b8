"""Parameter sweeps: one scenario over the cartesian product of any number of factors.

``sweep(cfg, profile, {"ssds": [1, 2, 4], "context_tokens": [4096, 8192]})``
runs the scenario's variants at every point of the product
(:func:`sim.factors.points`: values typed from the workload dataclass, a
point's values replacing the workload's and every variant's), each point an
independent simulation with the scenario's seed.  The factor ``hw`` names
hardware profiles instead of a workload field.  Points run on an
:class:`sim.parallel.Executor` (a local process pool of ``jobs`` workers unless
one is given: Ray, ``kvtier sweep --executor ray``), with the same results; the
result is one table, one row per (point, variant), with a column per factor
(and ``hw``).  :func:`run_points` runs any list of (scenario, profile, point)
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import yaml

from hwprofiles import HardwareProfile, load_profile
from sim.config import ConfigError, ScenarioConfig
from sim.factors import Point, points
from sim.parallel import Executor, LocalExecutor

HW = "hw"  # the factor that varies the hardware profile


def parse_factor(text: str, values: str | None = None) -> tuple[str, list[Any]]:
    """``"ssds=1,2,4"`` (or ``"ssds"`` with ``values="1,2,4"``) -> (name, raw
    values); each item is read as a YAML scalar, typed later against the workload."""
    name, sep, rest = text.partition("=")
    if sep and values is not None:
        raise ConfigError(f"--factor {text}: give the values after '=' or in --values, not both")
    rest = rest if sep else values
    if rest is None:
        raise ConfigError(f"--factor {text}: no values (write --factor {name}=V1,V2,...)")
    items = [v.strip() for v in rest.split(",") if v.strip()]
    if not name.strip() or not items:
        raise ConfigError(f"--factor {text}: no values given for '{name}'")
    if name == HW:
        return name, items
    return name.strip(), [_scalar(v) for v in items]


def _scalar(text: str) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, bool | int | float) else text


def sweep_points(
    cfg: ScenarioConfig, factors: Mapping[str, Sequence[Any]]
) -> list[tuple[Point, ScenarioConfig]]:
    """Every (point, scenario there) of ``factors``, the first factor varying
    slowest; ``hw`` values pass through, and a workload field typed ``str``
    takes a number's text back ("1" read as a YAML scalar)."""
    fixed = {
        k: [str(x) for x in v] if isinstance(getattr(cfg.workload, k, None), str) else list(v)
        for k, v in factors.items()
    }
    return points(cfg, fixed, passthrough=(HW,))


def _point(cfg: ScenarioConfig, hw: str | HardwareProfile, point: Point) -> pd.DataFrame:
    """The summary of ``cfg`` on ``hw`` (a profile's name or path, or the profile
    itself), with a column per ``point`` key and ``hw``."""
    from sim.runner import run

    profile = hw if isinstance(hw, HardwareProfile) else load_profile(hw)
    df = run(cfg, profile, None).summary()
    df = df.drop(columns=[c for c in point if c in df.columns])  # the factor's value wins
    if HW not in point:
        df.insert(0, HW, profile.name)
    for i, (k, v) in enumerate(point.items()):
        df.insert(i, k, v)
    return df


def sweep(
    cfg: ScenarioConfig,
    profile: HardwareProfile,
    factors: Mapping[str, Sequence[Any]] | str,
    values: Sequence[Any] | None = None,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> pd.DataFrame:
    """Run every point of ``factors`` (name -> values; or one factor name with
    ``values``) on ``profile`` (or the ``hw`` factor's profiles) on ``executor``
    (default: a local pool of ``jobs`` processes, CPU count unless given)."""
    if isinstance(factors, str):
        factors = {factors: list(values or [])}
    here = profile.source_file or profile.name  # the file given, not a shipped namesake
    todo = [(c, p.get(HW, here), p) for p, c in sweep_points(cfg, factors)]
    return run_points(todo, executor or LocalExecutor(jobs), progress)


def run_points(
    todo: Sequence[tuple[ScenarioConfig, str | HardwareProfile, Point]],
    executor: Executor,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Each (scenario, profile, point) of ``todo`` simulated on ``executor``: one
    table, the summaries in ``todo``'s order, each row with its point's columns."""
    frames: dict[int, pd.DataFrame] = {}
    for n, (i, frame) in enumerate(executor.run(_point, todo), start=1):
        frames[i] = frame
        if progress:
            progress(n, len(todo))
    return pd.concat([frames[i] for i in range(len(todo))], ignore_index=True)
