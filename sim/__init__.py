"""kvtier simulator: a discrete-event model of multi-tier KV-cache movement.

Importing ``sim`` imports :mod:`sim.catalog`, the one place that imports the
modules registering KV designs, serving designs and workload kinds
(:mod:`sim.registry`), so every lookup sees all of them.
"""

import sim.catalog  # noqa: F401  (every registration, before any lookup)
