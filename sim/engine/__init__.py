"""Engine: simpy-based flow network with max-min fair sharing."""

from sim.engine.flownet import Flow, FlowNetwork
from sim.engine.maxmin import maxmin_rates

__all__ = ["Flow", "FlowNetwork", "maxmin_rates"]
