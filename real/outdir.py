"""One run per output directory: a lock, and no silent mixing with another run's results.

:func:`claim` is called before any work starts, so an unusable ``--out``
fails first, in one line: it creates the directory (a file in the way, a
read-only mount or a missing parent is reported), takes an exclusive
``fcntl`` lock on ``<out>/.kvtier.lock`` for the whole run (a second
concurrent run into the same directory is refused, naming the pid holding
it), and refuses a directory that already holds something -- another run's
results -- unless ``force`` (``--force``: this run's files overwrite theirs;
files of theirs this run does not write stay).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from real.errors import RealError

LOCK = ".kvtier.lock"


@contextlib.contextmanager
def claim(out: str | Path, *, force: bool = False, flag: str = "--out") -> Iterator[Path]:
    """``out``, created and locked for this run while the block runs."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RealError(f"{flag} {out}: cannot write there: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise RealError(f"{flag} {out}: cannot lock: {exc.strerror}") from None
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RealError(
                f"{flag} {out}: another kvtier run (pid {holder}) is writing there; "
                "wait for it or choose another directory"
            ) from None
        others = sorted(p.name for p in out.iterdir() if p.name != LOCK)
        if others and not force:
            raise RealError(
                f"{flag} {out} already holds results ({', '.join(others[:3])}"
                f"{', ...' if len(others) > 3 else ''}); pass --force to overwrite them "
                "or choose another directory"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield out
    finally:
        os.close(fd)  # releases the lock
