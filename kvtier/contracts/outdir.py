"""One run per output directory: a lock, and no silent mixing with another run's results.

Every command that writes a results directory (``kvtier sim``, ``sweep``,
``real replay``/``validate``/``calibrate``/``emulate``) calls :func:`claim`
before any work starts, so an unusable ``--out`` fails first, in one line:

* it creates the directory (a file in the way, a read-only mount or a
  missing parent is reported);
* it takes an exclusive ``fcntl`` lock on ``<out>/.kvtier.lock`` for the
  whole run: a second concurrent run into the same directory is refused,
  naming the pid holding it (the kernel drops the lock when the holder's
  process ends, even when it is killed, so a crash never leaves it stale);
* it refuses a directory that already holds something -- another run's
  results -- unless ``force`` (``--force``: this run's files overwrite theirs;
  files of theirs this run does not write stay).  A deterministic command
  passes ``run``, a digest of everything that decides its results
  (:func:`run_id`); a directory last written by the *same* run (the same
  command, inputs and seed) is then reused without ``--force``, since the
  rerun writes the same files with the same contents.  Measurements
  (``kvtier real ...``) pass none: a rerun measures anew, so it never
  overwrites an earlier measurement silently.

The lock file records ``{"pid": ..., "run": ..., "label": ...}`` of the last
run that claimed the directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvtier.contracts.validate import InputError

LOCK = ".kvtier.lock"


def run_id(**parts: Any) -> str:
    """A digest of ``parts`` (JSON, keys sorted): equal exactly when the parts are."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _previous(fd: int) -> dict[str, Any]:
    """What the lock file says of the last run (``{}`` when empty or unreadable)."""
    text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:  # an older lock file held just the pid
        return {"pid": text} if text else {}
    return doc if isinstance(doc, dict) else {}


def _lock(fd: int, shown: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise InputError(f"{shown}: cannot lock: {exc.strerror}") from None
        holder = _previous(fd).get("pid") or "?"
        raise InputError(
            f"{shown}: another kvtier run (pid {holder}) is writing there; "
            "wait for it or choose another directory"
        ) from None


@contextlib.contextmanager
def claim(
    out: str | Path,
    *,
    force: bool = False,
    flag: str = "--out",
    run: str | None = None,
    label: str = "",
) -> Iterator[Path]:
    """``out``, created and locked for this run while the block runs.

    ``run``: this run's :func:`run_id` (None: any earlier content is another
    run's); ``label``: a few words naming the run in a later refusal."""
    out = Path(out)
    shown = f"{flag} {out}"
    made = _missing(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InputError(f"{shown}: cannot write there: {exc.strerror}") from None
    try:
        _lock(fd, shown)
    except BaseException:
        os.close(fd)
        raise
    try:
        yield _claimed(fd, out, shown, force, run, label)
    except BaseException:
        _unmake(out, made)  # a run that failed before writing anything leaves no directory
        raise
    finally:
        os.close(fd)  # releases the lock


def _missing(out: Path) -> list[Path]:
    """``out`` and its ancestors that do not exist yet, deepest first."""
    made = []
    for path in (out, *out.parents):
        if path.exists() or path.is_symlink():
            break
        made.append(path)
    return made


def _unmake(out: Path, made: list[Path]) -> None:
    """Remove the directories :func:`claim` created when they hold only the lock."""
    if not made or any(p.name != LOCK for p in out.iterdir()):
        return
    with contextlib.suppress(OSError):
        (out / LOCK).unlink()
        for path in made:
            path.rmdir()


def _claimed(fd: int, out: Path, shown: str, force: bool, run: str | None, label: str) -> Path:
    """Refuse another run's results (unless ``force``); record this run in the lock file."""
    before = _previous(fd)
    others = sorted(p.name for p in out.iterdir() if p.name != LOCK)
    same = run is not None and before.get("run") == run
    if others and not same and not force:
        what = f" of another run ({before['label']})" if before.get("label") else ""
        raise InputError(
            f"{shown} already holds results{what}: {', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}; pass --force to overwrite them "
            "or choose another directory"
        )
    doc = {"pid": os.getpid(), "run": run, "label": label}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(doc) + "\n").encode(), 0)
    return out


__all__ = ["LOCK", "claim", "run_id"]
