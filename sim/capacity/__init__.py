"""Capacity planning: the cheapest hardware and design meeting an SLO, and why.

:mod:`.variants` derives machines from a base profile, :mod:`.prices` costs them,
:mod:`.evaluate` simulates one point, :mod:`.binding` names its bottleneck and
classifies it, :mod:`.store` keeps every result keyed by its configuration,
:mod:`.search` prunes and bisects the grid, :mod:`.sparse` registers the
sparse-decode designs; :mod:`sim.parallel` runs points locally or on Ray.
"""
