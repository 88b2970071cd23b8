"""Running a simpy environment until it runs out of events, with a progress report.

:func:`drain` is :meth:`simpy.Environment.run` without ``until``, through
simpy's public API only: unwatched it *is* ``env.run()``; watched, it steps
with :meth:`simpy.Environment.step` and calls ``watch()`` after every
``every`` events and once at the end (a progress report; it only reads, so
the events are the same with or without it).  The events, their order and
what happens on a failure or a :class:`simpy.core.StopSimulation` are
therefore simpy 4.1.2's own: a failed event nobody defused is raised as a
copy of its exception; a ``StopSimulation`` raised by a callback (an
``until`` event's) re-queues the event's remaining callbacks, and
:func:`drain` returns its value as ``env.run()`` does, so a later run
resumes where this one stopped (tests/sim/test_drain.py holds it to
``env.run()`` on the same event logs).

Going through the public API costs no measurable speed against
``Environment.step`` inlined over simpy's private fields (kvtier's loop until
2026-12-02, which had drifted from 4.1.2's ``StopSimulation`` handling):
measured 2026-12-02 on this 2-core machine, three interleaved runs each, CPU
s of the run, ``python -m sim.serving.bench --requests 1000 --design lmcache
--block 256``: 0.504-0.706 (median 0.538) public, 0.554-0.590 (median 0.585)
inlined; paged-cpu-ssd block 16, 300 requests: 3.89-4.25 (median 4.08)
public, 4.14-4.15 (median 4.15) inlined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation

__all__ = ["drain"]


def drain(env: simpy.Environment, every: int = 0, watch: Callable[[], None] | None = None) -> Any:
    """``env.run()``: process every event of ``env`` until none is left (or a
    callback stops the simulation: its value is returned, as ``env.run()``
    returns it); ``watch()`` after every ``every`` events (``every > 0``) and
    once at the end."""
    if watch is None:
        return env.run()
    value = None
    if every > 0:
        step = env.step
        try:
            while True:
                for _ in range(every):
                    step()
                watch()
        except EmptySchedule:
            pass
        except StopSimulation as stop:
            value = stop.args[0]
    else:
        value = env.run()
    watch()
    return value
