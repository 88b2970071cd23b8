"""Which modules fill each registry, imported on the registry's first lookup.

``sim/__init__.py`` imports this module, which hands each registry of
:mod:`sim.registry` the function importing every module that registers in
it (:meth:`sim.registry.Registry.fill_with`): every lookup sees every
registration, whatever the user imported first, and a command imports only
the families it looks up.  KV designs are found, not listed: every module
under :mod:`sim.policies` is imported, so a new design is one policy file
with its ``register`` line (docs/changes.md, "Adding a KV design").  Serving
designs, workload kinds and the capacity plan's sparse-decode designs are
the modules named below; a module registers in one registry only
(``tests/sim/test_registry.py`` holds each family to its modules).
"""

import importlib
import pkgutil

from sim.registry import (
    KV_DESIGNS,
    REQUEST_TRACES,
    ROUTERS,
    SERVING_DESIGNS,
    SPARSE_DECODE_DESIGNS,
    WORKLOADS,
)

REGISTRIES = (
    KV_DESIGNS,
    SERVING_DESIGNS,
    WORKLOADS,
    SPARSE_DECODE_DESIGNS,
    ROUTERS,
    REQUEST_TRACES,
)


def kv_designs() -> None:
    """Every module under :mod:`sim.policies` (a design added as one file
    registers itself on import)."""
    import sim.policies  # noqa: PLC0415

    for info in pkgutil.walk_packages(sim.policies.__path__, "sim.policies."):
        importlib.import_module(info.name)


def serving_designs() -> None:
    import sim.serving.designs  # noqa: F401, PLC0415  serving designs of seeds 001 and 004


def workload_kinds() -> None:
    import sim.scenarios.kvdrive_kind  # noqa: F401, PLC0415  kvdrive (seed 003)
    import sim.workloads  # noqa: F401, PLC0415  sparse_decode, swarm, serving


def sparse_decode_designs() -> None:
    import sim.capacity.sparse  # noqa: F401, PLC0415  capacity-plan designs of sparse_decode


def routers() -> None:
    import sim.fleet.router  # noqa: F401, PLC0415  round-robin, least-loaded, prefix-aware


def request_traces() -> None:
    import sim.scenarios.mooncake_traces  # noqa: F401, PLC0415  Mooncake-shaped, fitted


KV_DESIGNS.fill_with(kv_designs)
SERVING_DESIGNS.fill_with(serving_designs)
WORKLOADS.fill_with(workload_kinds)
SPARSE_DECODE_DESIGNS.fill_with(sparse_decode_designs)
ROUTERS.fill_with(routers)
REQUEST_TRACES.fill_with(request_traces)
