"""Stepping a simpy environment until it runs out of events, without a call per event.

:func:`drain` does what ``env.run()`` does (``env.step()`` until the queue is
empty), with :meth:`simpy.Environment.step`'s body inlined into the loop: the
same events, in the same order (the queue's (time, priority, id) order), each
one's callbacks called in order, a failed event nobody defused raised as a
copy of its exception, as simpy does.  What it saves is a method call and an
exception frame per event, which a serving run pays some hundred thousand
times.  ``every``/``watch``: ``watch()`` is called after every ``every``
events and once at the end (a progress report; it only reads).
``INLINE = False`` steps by ``env.step()``: the reference
(tests/sim/test_drain.py).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop

import simpy

__all__ = ["INLINE", "drain"]

# simpy's step inlined; False: env.step() per event (the reference)
INLINE = True


def drain(env: simpy.Environment, every: int = 0, watch: Callable[[], None] | None = None) -> None:
    """Process every event of ``env`` until none is left (``env.run()``);
    ``watch()`` after every ``every`` events (``every > 0``) and at the end."""
    if not INLINE:
        _drain_reference(env, every, watch)
        return
    queue = env._queue  # type: ignore[attr-defined]
    left = every if every > 0 and watch is not None else -1
    while queue:
        env._now, _, _, event = heappop(queue)  # type: ignore[attr-defined]
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc
        if left > 0:
            left -= 1
            if not left:
                watch()  # type: ignore[misc]
                left = every
    if watch is not None:
        watch()


def _drain_reference(env: simpy.Environment, every: int, watch: Callable[[], None] | None) -> None:
    """:func:`drain` by ``env.step()``, one call per event."""
    n = 0
    try:
        while True:
            env.step()
            n += 1
            if watch is not None and every > 0 and n % every == 0:
                watch()
    except simpy.core.EmptySchedule:
        if watch is not None:
            watch()
