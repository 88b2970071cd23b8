""":func:`sim.engine.drain.drain` steps an environment as ``env.step()`` does.

* Seeded processes that wait on timeouts (ties included) and on each other's
  events log (time, name) as they wake: the inlined loop and the reference
  (``INLINE = False``) give the same log, and ``env.now`` ends at the last
  timeout; 3 + 2 + ... waits by hand on a small case.
* ``watch`` is called after every ``every`` events and once at the end:
  7 events every 3 -> after the 3rd and 6th, and at the end (3 calls).
* A failed event nobody defused raises a copy of its exception.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import sim.engine.drain as drain_mod
from sim.engine.drain import drain


def _world(seed: int) -> tuple[simpy.Environment, list[tuple[float, str]]]:
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
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
    return env, log


@pytest.mark.parametrize("seed", range(5))
def test_inlined_steps_equal_env_step(monkeypatch, seed) -> None:
    env, log = _world(seed)
    drain(env)
    monkeypatch.setattr(drain_mod, "INLINE", False)
    ref_env, ref_log = _world(seed)
    drain(ref_env)
    assert len(log) > 20 and log == ref_log  # same wake-ups, same order (ties included)
    assert env.now == ref_env.now == max(t for t, _ in log)


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


@pytest.mark.parametrize("inline", [True, False])
def test_failed_event_raises(monkeypatch, inline) -> None:
    monkeypatch.setattr(drain_mod, "INLINE", inline)
    env = simpy.Environment()
    env.event().fail(ValueError("disk on fire"))
    with pytest.raises(ValueError, match="disk on fire"):
        drain(env)
