"""kvtier simulator: a discrete-event model of multi-tier KV-cache movement.

Importing ``sim`` imports :mod:`sim.catalog`, the one place that names the
modules registering KV designs, serving designs and workload kinds
(:mod:`sim.registry`); a registry imports them on its first lookup, so every
lookup sees all of them.
"""

import sim.catalog  # noqa: F401  (every registry told what fills it, before any lookup)
