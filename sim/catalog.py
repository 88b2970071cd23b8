"""The one place that imports every module that registers something.

``sim/__init__.py`` imports this module, so every registration below has
happened before any ``sim`` module runs a lookup, whatever the user imported
first.  Adding a KV design, a serving design or a workload kind means adding
its module here (and its one ``register`` line in that module).
"""

import sim.policies.baselines.infllm  # noqa: F401 KV design: infllm
import sim.policies.baselines.nocluster  # noqa: F401 KV design: nocluster
import sim.policies.baselines.pqcache  # noqa: F401 KV design: pqcache
import sim.policies.swarm.design  # noqa: F401 KV designs: swarm and its ablations
import sim.serving.designs  # noqa: F401 serving designs of seeds 001 and 004
import sim.workloads  # noqa: F401 workload kinds: sparse_decode, swarm, serving
from sim.registry import KV_DESIGNS, SERVING_DESIGNS, WORKLOADS

REGISTRIES = (KV_DESIGNS, SERVING_DESIGNS, WORKLOADS)
