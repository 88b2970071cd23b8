"""Policies: pure decisions (placement, selection, retrieval, caching).

A policy never sleeps, yields or does I/O; it returns decisions that the
driver turns into a transfer plan, which an executor (simulated or real)
times.  Sparse-attention KV designs implement :class:`KVDesign` and are
registered by name with :func:`register`.
"""

from sim.policies.kvdesign import (
    DESIGNS,
    KVDesign,
    Layout,
    StepDecision,
    extents_from_slots,
    get_design,
    register,
)

__all__ = [
    "DESIGNS",
    "KVDesign",
    "Layout",
    "StepDecision",
    "extents_from_slots",
    "get_design",
    "register",
]
