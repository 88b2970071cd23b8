""":func:`sim.engine.drain.drain` runs an environment as ``env.run()`` does.

* Seeded processes that wait on timeouts (ties included) and on each other's
  events log (time, name) as they wake: drained with a watch every 1, 3 or
  1000 events, the log is the one ``env.run()`` gives on the same world, and
  ``env.now`` ends at the last wake-up; 3 + 2 + 1 waits by hand.
* ``watch`` is called after every ``every`` events and once at the end:
  7 events every 3 -> after the 3rd and 6th, and at the end (3 calls);
  6 events every 3 -> after the 3rd and 6th, and at the end (3 calls).
* A callback that stops the simulation (simpy's ``until`` mechanism,
  :class:`simpy.core.StopSimulation`) while other callbacks of its event are
  still to run: drain returns the stop's value at the stop's time, as
  ``env.run()`` does, and the event's remaining callbacks run when the
  environment runs again (simpy 4.1.2 re-queues them): the logs of both
  halves equal ``env.run()``'s.  An environment first run ``until`` a time
  and then drained gives ``env.run()``'s log too.
* A failed event nobody defused raises a copy of its exception; a defused
  one does not.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simpy.core import StopSimulation

from sim.engine.drain import drain

Log = list[tuple[float, str]]


def _world(seed: int, stop_at: float | None = None) -> tuple[simpy.Environment, Log]:
    """20 seeded processes (timeouts with ties, gates one process opens and
    another waits on); with ``stop_at``, a timeout then whose first callback
    stops the simulation (value ``"stopped"``) and two processes that wait on
    it after that callback."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    log: Log = []
    gates = [env.event() for _ in range(5)]

    def proc(name: str, waits: list[float], gate: simpy.Event | None, opens: simpy.Event | None):
        for w in waits:
            yield env.timeout(w)
            log.append((env.now, name))
        if gate is not None:
            yield gate
            log.append((env.now, name + "+gate"))
        if opens is not None and not opens.triggered:
            opens.succeed()

    for k in range(20):
        waits = [float(x) for x in rng.choice([0.0, 0.5, 1.0, 1.5], int(rng.integers(1, 6)))]
        gate = gates[k % 5] if k >= 10 else None
        opens = gates[k % 5] if k < 10 else None
        env.process(proc(f"p{k}", waits, gate, opens))
    if stop_at is not None:
        stop = env.timeout(stop_at, "stopped")
        stop.callbacks.append(StopSimulation.callback)

        def after_stop(name: str):
            yield stop
            log.append((env.now, name))
            yield env.timeout(0.25)
            log.append((env.now, name + "+0.25"))

        env.process(after_stop("s0"))
        env.process(after_stop("s1"))
    return env, log


def _watched(env: simpy.Environment, every: int) -> tuple[object, list[float]]:
    seen: list[float] = []
    value = drain(env, every, lambda: seen.append(env.now))
    return value, seen


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("every", [1, 3, 1000])
def test_drain_gives_env_runs_log(seed, every) -> None:
    ref_env, ref_log = _world(seed)
    ref_env.run()
    env, log = _world(seed)
    _, seen = _watched(env, every)
    assert len(ref_log) > 20 and log == ref_log  # same wake-ups, same order (ties included)
    assert env.now == ref_env.now == max(t for t, _ in ref_log)
    assert seen[-1] == env.now and seen == sorted(seen)
    # unwatched, too
    env2, log2 = _world(seed)
    drain(env2)
    assert log2 == ref_log


def test_hand_case_and_watch_calls() -> None:
    env = simpy.Environment()
    woke: list[float] = []

    def proc():
        for w in (3.0, 2.0, 1.0):
            yield env.timeout(w)
            woke.append(env.now)

    env.process(proc())  # events: init, 3 timeouts, the process's end = 5
    for t in (0.5, 7.0):
        env.timeout(t)  # 2 more: 7 events
    seen: list[float] = []
    drain(env, 3, lambda: seen.append(env.now))
    assert woke == [3.0, 5.0, 6.0] and env.now == 7.0
    # events in order: init@0, 0.5, 3, 5, 6, proc end@6, 7 -> watch after the 3rd
    # (t=3) and the 6th (t=6), then once at the end (t=7)
    assert seen == [3.0, 6.0, 7.0]


def test_watch_on_a_multiple_of_every() -> None:
    env = simpy.Environment()
    for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        env.timeout(t)  # 6 events
    seen: list[float] = []
    drain(env, 3, lambda: seen.append(env.now))
    assert seen == [3.0, 6.0, 6.0]  # after the 3rd, the 6th, and at the end


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("every", [0, 1, 4])
def test_stop_simulation_then_resume(seed, every) -> None:
    ref_env, ref_log = _world(seed, stop_at=1.0)
    assert ref_env.run() == "stopped"
    ref_first = list(ref_log)
    ref_env.run()
    env, log = _world(seed, stop_at=1.0)
    value, _ = _watched(env, every)
    assert value == "stopped" and env.now == 1.0
    assert log == ref_first  # stopped where env.run() stops
    # the processes waiting on the stop event were behind its StopSimulation
    # callback: they have not woken yet, and wake first when the run resumes
    assert all(name[0] != "s" for _, name in log)
    n = len(log)
    _watched(env, every)
    assert log == ref_log
    assert log[n : n + 2] == [(1.0, "s0"), (1.0, "s1")]
    assert (1.25, "s0+0.25") in log and (1.25, "s1+0.25") in log
    assert env.now == ref_env.now


@pytest.mark.parametrize("every", [0, 2])
def test_run_until_then_drain(every) -> None:
    ref_env, ref_log = _world(1)
    ref_env.run(until=2.5)
    ref_env.run()
    env, log = _world(1)
    env.run(until=2.5)
    assert env.now == 2.5 and all(t <= 2.5 for t, _ in log)
    _watched(env, every)
    assert log == ref_log and any(t > 2.5 for t, _ in log)


@pytest.mark.parametrize("every", [0, 3])
def test_failed_event_raises(every) -> None:
    env = simpy.Environment()
    env.event().fail(ValueError("disk on fire"))
    with pytest.raises(ValueError, match="disk on fire"):
        drain(env, every, lambda: None)
    env = simpy.Environment()
    failed = env.event()
    failed.fail(ValueError("handled"))
    failed.defused = True
    env.timeout(2.0)
    drain(env, every, lambda: None)
    assert env.now == 2.0
