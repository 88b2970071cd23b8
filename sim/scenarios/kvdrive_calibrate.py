"""KVDrive's calibration pass (seed 003 §6.2): centroids, GPU cache size, micro-batches.

"The performance of KVDRIVE's pipeline depends critically on three
parameters: the number of centroids in the index, the GPU cache size, and
the micro-batch size" — chosen before decoding from a short pre-run.  Here
the pre-run is a short simulation (``steps`` decode steps) of the very plan
the variant would run, and the pass is coordinate-wise, in the paper's order:

1. **index**: every candidate ``chunks_per_centroid`` (fewer chunks per
   centroid = more centroids: finer selection, costlier scoring); the
   fastest wins;
2. **cache size**: windows in ascending order, "incrementally increases the
   cache size until the CPU evaluation time and GPU fetching time reach
   equilibrium": the first window that is no faster than the one before
   stops the climb (a larger cache saves copies but lengthens the CPU's
   hit/miss scan);
3. **micro-batch size**: every candidate count of micro-batches; the fastest wins.

Ties keep the earlier candidate (fewer centroids, smaller cache, fewer
micro-batches: the cheaper configuration).  :func:`calibrate` is the search
over any ``measure`` (a configuration -> seconds per decode step);
:func:`calibrate_kvdrive` measures by simulating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

CHUNKS_PER_CENTROID = (4, 8, 16)  # index candidates (Fig. 18 sweeps 2,048-8,192 centroids)
WINDOWS = (1, 2, 3, 4)  # GPU cache, multiples of the step budget (Fig. 16 sweeps 2, 3, 4)
MICRO_BATCHES = (1, 2, 4)  # SFC pipeline granularity


@dataclass(frozen=True)
class Config:
    """One point of the calibration space."""

    chunks_per_centroid: int
    window: int
    micro_batches: int


@dataclass
class Calibration:
    """The configuration chosen and every measurement the pass took, in order."""

    best: Config
    step_s: float
    measured: list[tuple[Config, float]] = field(default_factory=list)


def calibrate(
    measure: Callable[[Config], float],
    start: Config,
    chunks_per_centroid: Sequence[int] = CHUNKS_PER_CENTROID,
    windows: Sequence[int] = WINDOWS,
    micro_batches: Sequence[int] = MICRO_BATCHES,
) -> Calibration:
    """Coordinate-wise search (see the module doc) from ``start``; ``measure``
    runs once per distinct configuration it is asked about."""
    seen: dict[Config, float] = {}
    order: list[tuple[Config, float]] = []

    def cost(c: Config) -> float:
        if c not in seen:
            seen[c] = float(measure(c))
            order.append((c, seen[c]))
        return seen[c]

    best = start
    for cpc in chunks_per_centroid:  # 1. index: the fastest candidate
        best = _better(best, replace(best, chunks_per_centroid=cpc), cost)
    climb = replace(best, window=windows[0]) if windows else best
    best = _better(best, climb, cost)
    for w in windows[1:]:  # 2. cache: grow while it pays
        nxt = replace(climb, window=w)
        if cost(nxt) >= cost(climb):
            break
        climb = nxt
        best = _better(best, climb, cost)
    for m in micro_batches:  # 3. micro-batches: the fastest candidate
        best = _better(best, replace(best, micro_batches=m), cost)
    return Calibration(best, cost(best), order)


def _better(a: Config, b: Config, cost: Callable[[Config], float]) -> Config:
    return b if cost(b) < cost(a) else a


def calibrate_kvdrive(params, profile, seed: int, steps: int = 2, **candidates) -> Calibration:
    """:func:`calibrate` with each configuration simulated for ``steps`` decode
    steps (``params``: a :class:`~sim.scenarios.kvdrive_kind.KVDriveParams` of a
    KVDrive design, whose ``design_params`` and ``micro_batches`` are the start)."""
    from sim.executor import simulate
    from sim.scenarios.kvdrive import plan_kvdrive

    dp = dict(params.design_params)
    start = Config(
        int(dp.get("chunks_per_centroid", 8)), int(dp.get("window", 2)), params.micro_batches
    )

    def measure(c: Config) -> float:
        design = {**dp, "chunks_per_centroid": c.chunks_per_centroid, "window": c.window}
        p = replace(
            params, steps=steps, design_params=design, micro_batches=c.micro_batches, gpu_cache_mb=0
        )
        ops = simulate(plan_kvdrive(p, profile, seed).plan, profile).ops
        return float(max(ops.column("end_s").to_pylist(), default=0.0)) / steps

    return calibrate(measure, start, **candidates)


def calibrated(params, profile, seed: int, steps: int = 2):
    """``params`` with the calibration pass's choice (:func:`calibrate_kvdrive` on
    a profiling run of ``min(context_tokens, calibrate_tokens)`` tokens, ``steps``
    steps) and the summary columns saying what it chose and what it cost."""
    import time

    short = replace(
        params, context_tokens=min(params.context_tokens, params.calibrate_tokens), calibrate=False
    )
    t0 = time.perf_counter()
    cal = calibrate_kvdrive(short, profile, seed, steps)
    c = cal.best
    design = {**params.design_params, "chunks_per_centroid": c.chunks_per_centroid}
    design["window"] = c.window
    chosen = replace(params, design_params=design, micro_batches=c.micro_batches, calibrate=False)
    info = {
        "cal_chunks_per_centroid": c.chunks_per_centroid,
        "cal_window": c.window,
        "cal_micro_batches": c.micro_batches,
        "cal_configs": len(cal.measured),
        "cal_s": time.perf_counter() - t0,
    }
    return chosen, info
