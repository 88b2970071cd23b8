"""The flow network's small records: flows, memoised mixes, timer events.

Kept apart from :mod:`sim.engine.flownet`, which creates them on its hot
paths (a :class:`Flow` per flow, a :class:`Tick` per armed timer)."""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import compress
from typing import Any


class Tick:
    """The least a simpy event needs to be stepped: a callback list and ``_ok``.

    The network schedules these itself (:meth:`simpy.Environment.schedule`):
    one completion timer per re-rating and one late re-rating per instant need
    nothing else of :class:`simpy.events.Event` (no value, no waiting process)."""

    __slots__ = ("callbacks",)
    _ok = True

    def __init__(self, callback: Callable[[Any], None]):
        self.callbacks = [callback]


class Flow:
    """One transfer of ``amount`` units over the (path, cap) interned as ``sig``.

    ``token`` is the caller's (e.g. an op id), passed back untouched with the
    flow to ``on_done``; the network keeps the flow's rate and finish time.
    A flow started alone (:meth:`sim.engine.flownet.FlowNetwork.start_alone`)
    is itself scheduled as its end's simpy event (``callbacks``, ``_ok``, as
    :class:`Tick`); ``callbacks`` is unset on every other flow."""

    __slots__ = ("sig", "amount", "on_done", "token", "start_s", "end_s", "callbacks")
    _ok = True

    def __init__(
        self,
        sig: int,
        amount: float,
        on_done: Callable[[Flow], None] | None,
        token: Any,
        now: float,
    ):
        self.sig = sig
        self.amount = amount
        self.on_done = on_done
        self.token = token
        self.start_s = now
        self.end_s = math.nan


class Mix:
    """One memoised allocation: rates per flow (in the mix's order), the loads
    they put on resources, and the simulated time spent in this mix."""

    __slots__ = ("rates", "loads", "time_s")

    def __init__(self, rates: list[float], loads: dict[int, float]):
        self.rates = rates
        self.loads = loads
        self.time_s = 0.0


def take_done(
    flows: list[Flow], fsig: list[int], rate: list[float], fin: list[float], lim: float
) -> list[Flow]:
    """Take the flows whose finish time is by ``lim`` out of the active set
    (four aligned lists, in place); returns them in the order they started."""
    gone = list(compress(range(len(fin)), map(lim.__ge__, fin)))  # t <= lim
    done = []
    for k in reversed(gone):
        done.append(flows.pop(k))
        del fsig[k], rate[k], fin[k]
    done.reverse()  # callbacks in the order the flows started
    return done
