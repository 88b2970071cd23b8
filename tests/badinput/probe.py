"""Hostile-user probes over every entry point: run them, count the outcomes.

``python -m tests.badinput.probe [--timeout S] [--only SUBSTR] [-v]`` runs each
probe of :data:`tests.badinput.probes.PROBES` in a forked child (imported once,
so a probe costs its own work, not an interpreter start) in a fresh directory,
with a wall-clock limit and an address-space limit, and sorts the outcome:

* ``clean``: exit 2, exactly one ``kvtier: error:`` line naming the needle;
* ``unnamed``: exit 2 and one line, but the needle (flag, key, file) is absent;
* ``traceback``: exit 1 (``internal error``), a ``Traceback``, or a crash;
* ``accepted``: exit 0 -- the bad value ran (a silently wrong answer);
* ``hang``: still running at the limit (killed);
* ``other``: anything else (several lines, another status).

It prints one line per probe that is not ``clean`` (all with ``-v``) and the
counts.  The probes that are cheap are corpus cases too (see cases.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.badinput.probes import PROBES
from tests.badinput.test_corpus import _materialise

MEMORY_LIMIT = 6 * 2**30  # bytes of address space a probe may map


def _child(argv: list[str], files: dict, where: Path, err_path: Path) -> None:
    """Run ``kvtier argv`` in ``where``; never returns (``os._exit``)."""
    from kvtier.cli.main import main

    status = 70
    try:
        os.setsid()  # the probe's own process group, killed as one on a hang
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        _materialise(files, where)
        os.chdir(where)
        fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        sys.stdout = os.fdopen(1, "w")
        status = main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the outcome, not a failure of the probe
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
            sys.stdout.flush()
        os._exit(status)


def run_probe(argv: str, files: dict, timeout: float) -> tuple[str, int | None, str, float]:
    """(outcome without the needle check, status, stderr, seconds) of one probe."""
    with tempfile.TemporaryDirectory(prefix="kvtier-probe-") as tmp:
        where, err_path = Path(tmp) / "run", Path(tmp) / "stderr"
        where.mkdir()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(argv.split(), files, where, err_path)
        status, outcome = None, ""
        while True:
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(wstatus)
                break
            if time.monotonic() - t0 > timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                outcome = "hang"
                break
            time.sleep(0.02)
        err = err_path.read_text(errors="replace") if err_path.exists() else ""
        return outcome or _classify(status, err), status, err, time.monotonic() - t0


def _classify(status: int | None, err: str) -> str:
    if "Traceback" in err or status == 1 or (status is not None and status < 0):
        return "traceback"
    if status == 0:
        return "accepted"
    one_line = err.count("\n") == 1 and err.startswith("kvtier: error: ")
    return "clean" if status == 2 and one_line else "other"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per probe")
    ap.add_argument("--only", default="", help="run the probes whose id contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line for every probe")
    args = ap.parse_args(argv)
    from kvtier.cli.main import build_parser

    build_parser()  # import every sub-command once, before forking
    counts: collections.Counter[str] = collections.Counter()
    for pid, cmd, files, needle in PROBES:
        if args.only not in pid:
            continue
        outcome, status, err, secs = run_probe(cmd, files, args.timeout)
        if outcome == "clean" and needle not in err:
            outcome = "unnamed"
        counts[outcome] += 1
        if args.verbose or outcome != "clean":
            last = (err.strip().splitlines() or [""])[-1][:150]
            print(f"{outcome:9} {pid:28} rc={status} {secs:5.1f}s kvtier {cmd}\n          {last}")
    total = sum(counts.values())
    print(f"{total} probes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if counts["clean"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
