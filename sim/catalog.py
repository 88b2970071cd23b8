"""The one place that imports every module that registers something.

``sim/__init__.py`` imports this module, so every registration below has
happened before any ``sim`` module runs a lookup, whatever the user imported
first.  KV designs are found, not listed: every module under
:mod:`sim.policies` is imported, so a new design is one policy file with its
``register`` line (docs/changes.md, "Adding a KV design").  Serving designs,
workload kinds and the capacity plan's sparse-decode designs are the modules below.
"""

import importlib
import pkgutil

import sim.capacity.sparse  # noqa: F401 capacity-plan designs of sparse_decode
import sim.policies
import sim.policies.baselines.infllm  # noqa: F401 KV design: infllm
import sim.policies.baselines.nocluster  # noqa: F401 KV design: nocluster
import sim.policies.baselines.pqcache  # noqa: F401 KV design: pqcache
import sim.policies.swarm.design  # noqa: F401 KV designs: swarm and its ablations
import sim.scenarios.kvdrive_kind  # noqa: F401 workload kind: kvdrive (seed 003)
import sim.serving.designs  # noqa: F401 serving designs of seeds 001 and 004
import sim.workloads  # noqa: F401 workload kinds: sparse_decode, swarm, serving
from sim.registry import KV_DESIGNS, SERVING_DESIGNS, SPARSE_DECODE_DESIGNS, WORKLOADS

REGISTRIES = (KV_DESIGNS, SERVING_DESIGNS, WORKLOADS, SPARSE_DECODE_DESIGNS)

# any other policy module (a design added as one file registers itself on import)
for _info in pkgutil.walk_packages(sim.policies.__path__, "sim.policies."):
    importlib.import_module(_info.name)
