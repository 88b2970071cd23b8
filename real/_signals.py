"""SIGINT, SIGTERM and SIGHUP end a real-backend command cleanly, every time.

:func:`guarded` runs a command handler with a handler for the three signals.
The first signal blocks all three (in this thread) and raises
:class:`Interrupted`, so every ``finally`` and ``with`` on the way out runs
undisturbed; a second signal -- a double Ctrl-C, a SIGHUP after a SIGTERM --
is recorded and otherwise ignored.  Then whatever the run still holds in
:data:`real.cleanup.REGISTRY` is removed, signals pending meanwhile are
discarded, the three signals stay ignored until the process exits (a signal
between cleanup and exit must not kill it), and the exit status is the
shell's convention for the first signal: 130 (SIGINT), 143 (SIGTERM), 129
(SIGHUP).

A test hook: ``KVTIER_TEST_SIGNAL_AT=<phase>`` makes :func:`phase` announce
``kvtier-phase <phase>`` on stderr and wait 30 s when the run reaches that
phase (``setup``, ``fill``, ``replay``, ``fio``), so a test can signal it there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from real.cleanup import REGISTRY

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HOOK_ENV = "KVTIER_TEST_SIGNAL_AT"


class Interrupted(KeyboardInterrupt):
    """The run was stopped by signal ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    first: int | None = None


def _handler(signum: int, _frame: object) -> None:
    if _State.first is not None:
        return  # a second signal while the first is being handled: cleanup goes on
    _State.first = signum
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    raise Interrupted(signum)


def guarding() -> bool:
    """Whether :func:`guarded`'s handler holds SIGTERM now."""
    return signal.getsignal(signal.SIGTERM) is _handler


def guarded(fn: Callable[[Any], int], args: Any) -> int:
    """Run ``fn(args)``; on SIGINT/SIGTERM/SIGHUP clean up and return 128 + signal."""
    if threading.current_thread() is not threading.main_thread():
        try:
            return _run_and_release(fn, args)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    _State.first = None
    old = {s: signal.signal(s, _handler) for s in SIGNALS}
    code: int | None = None
    try:
        code = _run_and_release(fn, args)
    except Interrupted:
        pass
    finally:
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)  # drop what arrived while cleaning up
        pending = signal.sigpending() & set(SIGNALS)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        if _State.first is None and not pending:
            for s, h in old.items():
                signal.signal(s, h)
        # else the command is ending: the three stay ignored, so a second Ctrl-C
        # landing between here and the exit cannot kill it with a traceback
    first = _State.first or (min(pending) if pending else None)
    _State.first = None
    if first is not None:
        print(f"kvtier: interrupted by {signal.Signals(first).name}; cleaned up", file=sys.stderr)
        return 128 + int(first)
    return int(code or 0)


def _run_and_release(fn: Callable[[Any], int], args: Any) -> int:
    try:
        return int(fn(args) or 0)
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # nothing interrupts the cleanup
        problems = REGISTRY.release_all()
        for line in problems:
            print(f"kvtier: cleanup: {line}", file=sys.stderr)


def phase(name: str) -> None:
    """Test hook: announce ``name`` and wait there when ``$KVTIER_TEST_SIGNAL_AT`` names it."""
    if os.environ.get(HOOK_ENV) != name:
        return
    print(f"kvtier-phase {name}", file=sys.stderr, flush=True)
    time.sleep(30)
