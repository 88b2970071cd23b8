"""Hardware models: a profile turned into simulated resources."""

from sim.hw.machine import Machine, RouteError

__all__ = ["Machine", "RouteError"]
