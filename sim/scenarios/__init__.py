"""Scenarios: workload shapes that produce transfer plans."""
