"""Where a plan's independent simulations run: a local process pool or a Ray cluster.

An executor takes a function and a list of argument tuples and yields
``(index, result)`` as each call finishes (not in order), so the caller can
store every result the moment it exists.  :class:`LocalExecutor` uses a
process pool (``jobs`` workers; 1 = in this process); :class:`RayExecutor`
submits the calls as Ray tasks to the cluster at ``address`` (``"local"``
starts one on this machine); Ray is the ``cluster`` extra and imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Protocol

from sim.config import ConfigError


class Executor(Protocol):
    def run(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> Iterator[tuple[int, Any]]: ...


class LocalExecutor:
    """``jobs`` worker processes (default: CPU count); 1 runs in this process."""

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or os.cpu_count() or 1

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        if self.jobs == 1 or len(calls) <= 1:
            for i, args in enumerate(calls):
                yield i, fn(*args)
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(calls))) as pool:
            futures = {pool.submit(fn, *args): i for i, args in enumerate(calls)}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()


class RayExecutor:
    """Ray tasks on the cluster at ``address`` (``local``: a Ray instance on this
    machine, started here and left for the process's lifetime)."""

    def __init__(self, address: str = "local", num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "--executor ray needs Ray: pip install 'kvtier[cluster]' (ray==2.60.0)"
            ) from None
        self._ray = ray
        if not ray.is_initialized():
            if address == "local":
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        task = ray.remote(fn)
        pending = {task.remote(*args): i for i, args in enumerate(calls)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)


def make_executor(kind: str, jobs: int | None = None, address: str = "local") -> Executor:
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address, jobs)
    raise ConfigError(f"--executor: must be 'local' or 'ray', got {kind!r}")
