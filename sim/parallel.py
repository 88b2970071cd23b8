"""Where many independent simulations run: a local process pool or a Ray cluster.

Every command that runs many simulations (``kvtier sweep``'s points,
``kvtier plan``'s grid points, ``--sensitivity``'s runs) hands them to one
:class:`Executor`, made by :func:`make_executor` from the same three flags
(``--executor local|ray``, ``--address``, ``--jobs``).  An executor takes a function and a list of
argument tuples and yields ``(index, result)`` as each call finishes (not in
order), so the caller can store every result the moment it exists; the
results are those of the same calls made in this process (the function and
its arguments decide them: each simulation seeds its own RNG).

:class:`LocalExecutor` uses a process pool (``jobs`` workers; 1 = in this
process).  :class:`RayExecutor` submits the calls as Ray tasks to the cluster
at ``address`` (``"local"`` starts one on this machine); Ray is the
``cluster`` extra and imported only here.  :meth:`Executor.describe` is what
ran the calls, for the results' provenance.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Protocol

from sim.config import ConfigError

EXECUTORS = ("local", "ray")
LOCAL = "local"  # --address: start a Ray instance on this machine
# the wait for a TCP answer from a cluster's head before Ray is asked to join it (an
# assumption: a head on a LAN answers in under 10 ms, one across a WAN in ~0.1-1 s)
CONNECT_TIMEOUT_S = 5.0


class Executor(Protocol):
    def run(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> Iterator[tuple[int, Any]]: ...

    def describe(self) -> dict[str, Any]: ...


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

    def describe(self) -> dict[str, Any]:
        return {"executor": "local", "workers": self.jobs}


class RayExecutor:
    """Ray tasks on the cluster at ``address`` (``local``: a Ray instance on this
    machine with ``num_cpus`` CPUs, started here and left for the process's
    lifetime; an instance already started in this process is reused)."""

    def __init__(self, address: str = LOCAL, num_cpus: int | None = None) -> None:
        if address != LOCAL:
            check_address(address)
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "--executor ray: Ray is not installed; pip install 'kvtier[cluster]' (ray==2.60.0)"
            ) from None
        self._ray = ray
        self.address = address
        if not ray.is_initialized():
            try:
                if address == LOCAL:
                    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(f"--address {address}: Ray cannot join it: {exc}") from None

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        task = ray.remote(fn)
        pending = {task.remote(*args): i for i, args in enumerate(calls)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)

    def describe(self) -> dict[str, Any]:
        cpus = self._ray.cluster_resources().get("CPU", 0)
        return {
            "executor": "ray",
            "address": self.address,
            "workers": int(cpus),
            "ray": self._ray.__version__,
        }


def check_address(address: str) -> None:
    """A Ray address (``host:port``, ``ray://host:port``, or ``auto``) answers a TCP
    connect within :data:`CONNECT_TIMEOUT_S`; else a ConfigError naming ``--address``
    (Ray itself retries an unreachable head for minutes before it gives up)."""
    if address == "auto":
        return  # Ray finds the running instance on this machine, or says there is none
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--address {address}: not a Ray address (HOST:PORT, ray://HOST:PORT, auto or local)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(f"--address {address}: no Ray cluster answers there ({why})") from None


def make_executor(kind: str, jobs: int | None = None, address: str | None = None) -> Executor:
    """The executor ``--executor kind`` names; ``jobs`` workers locally (or the CPUs of
    a Ray instance started here); ``address`` only with Ray (None: ``local``)."""
    if kind not in EXECUTORS:
        raise ConfigError(f"--executor: must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    if kind == "local":
        if address is not None:
            raise ConfigError("--address: names a Ray cluster; give it with --executor ray")
        return LocalExecutor(jobs)
    address = address or LOCAL
    if address != LOCAL and jobs is not None:
        raise ConfigError(
            f"--jobs: a Ray cluster ({address}) has its own workers; "
            "--jobs sets a local pool's or a local Ray instance's"
        )
    return RayExecutor(address, jobs)
