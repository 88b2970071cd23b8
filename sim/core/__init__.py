"""Simulation core: units, time and the seeded random generator."""
