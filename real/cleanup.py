"""What the real backend creates, registered so that it is always removed.

Every resource a run creates -- a loop device, a blkio cgroup, a backing or
data file, a directory, a fio process group -- is added to this process's
:data:`REGISTRY` the moment it exists, and dropped when its owner removes it.
Whatever is left when the command ends (normally, by an error, or by SIGINT,
SIGTERM or SIGHUP, see :mod:`real._signals`) is removed by
:meth:`Registry.release_all`, newest first.

The marker: the registry mirrors itself into a small JSON state file,
``<runtime dir>/run-<pid>.json`` (``runtime_dir()``: ``$KVTIER_RUNTIME_DIR``,
else ``/run/kvtier`` as root, else ``/tmp/kvtier-<uid>``), holding the pid, its
start time (so a reused pid is not mistaken for the run) and one entry per
resource with what identifies it exactly: a loop device and its backing file,
a file's device and inode, a cgroup's path, a process group and its leader's
start time.  The names carry a marker too (``kvtier-emu-<pid>-<k>``,
``kvtier-<pid>-<k>`` cgroups), but removal goes by the state file only.

``kvtier real cleanup`` (:func:`stale_runs`, :func:`reclaim`) reads the state
files of runs whose process is gone (a SIGKILL, a power cut) and removes
exactly what they list -- after checking each entry still is what was
recorded -- never anything by a name pattern and never what a live run holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNTIME_ENV = "KVTIER_RUNTIME_DIR"
# kinds whose removal lives with the code that makes them (``loop``: :mod:`real.blkio`)
REMOVERS: dict[str, Callable[[dict[str, Any]], bool]] = {}
KINDS = ("proc", "cgroup", "loop", "file", "tree", "dir")


def runtime_dir() -> Path:
    """Where state files live (created on first use, mode 0700)."""
    env = os.environ.get(RUNTIME_ENV)
    if env:
        return Path(env)
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/kvtier")
    return Path(f"/tmp/kvtier-{os.getuid()}")


def start_time(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot (None when it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(pid: int, start: int | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (zombies count as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X") and start_time(pid) == start


class Registry:
    """This process's live resources and their state file (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[int, dict[str, Any]] = {}
        self._next = 0
        self._pid = os.getpid()

    @property
    def state_file(self) -> Path:
        return runtime_dir() / f"run-{self._pid}.json"

    def add(self, kind: str, **info: Any) -> int:
        """Record a resource that now exists; returns its id (for :meth:`drop`)."""
        assert kind in KINDS, kind
        with self._lock:
            if os.getpid() != self._pid:  # a forked child starts with nothing of its own
                self._items, self._pid = {}, os.getpid()
            rid = self._next
            self._next += 1
            self._items[rid] = {"kind": kind, **info}
            self._save()
            return rid

    def drop(self, rid: int | None) -> None:
        """The owner removed resource ``rid`` itself."""
        with self._lock:
            if rid is not None and self._items.pop(rid, None) is not None:
                self._save()

    def forget(self, kind: str, **match: Any) -> None:
        """Drop every ``kind`` entry whose fields equal ``match`` (its owner removed it)."""
        with self._lock:
            gone = [
                k
                for k, v in self._items.items()
                if v["kind"] == kind and all(v.get(f) == x for f, x in match.items())
            ]
            for k in gone:
                del self._items[k]
            if gone:
                self._save()

    def held(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(v) for v in self._items.values()]

    def release_all(self) -> list[str]:
        """Remove everything still registered, newest first; the problems, one line each."""
        problems = []
        with self._lock:
            for rid in sorted(self._items, reverse=True):
                try:
                    remove(self._items[rid])
                except OSError as exc:
                    problems.append(f"{describe(self._items[rid])}: {exc}")
                del self._items[rid]
            self._save()
        return problems

    def _save(self) -> None:
        path = self.state_file
        if not self._items:
            with contextlib.suppress(OSError):
                path.unlink()
            return
        doc = {
            "pid": self._pid,
            "start": start_time(self._pid),
            "resources": [self._items[k] for k in sorted(self._items)],
        }
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)


REGISTRY = Registry()


# ---- identifying and removing one resource ----------------------------------------------
def file_id(path: str | Path) -> dict[str, Any]:
    """The entry fields that identify a file or directory: path, device, inode."""
    st = os.stat(path)
    return {"path": str(path), "st_dev": st.st_dev, "st_ino": st.st_ino}


def _same_file(entry: dict[str, Any]) -> bool:
    try:
        st = os.lstat(entry["path"])
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (entry["st_dev"], entry["st_ino"])


def describe(entry: dict[str, Any]) -> str:
    kind = entry["kind"]
    if kind == "proc":
        return f"process group {entry['pgid']}"
    if kind == "loop":
        return f"loop device {entry['dev']} (backing {entry['backing']})"
    return f"{kind} {entry['path']}"


def group_members(pgid: int, leader_start: int | None) -> list[int]:
    """Live processes of process group ``pgid`` -- unless ``pgid`` now names a new group."""
    leader = start_time(pgid)
    if leader is not None and leader != leader_start:
        return []  # the pid was reused: not our group
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(d.name))
    return out


def kill_group(pgid: int, leader_start: int | None, grace_s: float = 1.0) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_members(pgid, leader_start):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + grace_s
        while group_members(pgid, leader_start) and time.monotonic() < deadline:
            time.sleep(0.02)


def remove(entry: dict[str, Any]) -> bool:
    """Remove one recorded resource if it is still the one recorded; True if removed."""
    kind = entry["kind"]
    if kind == "proc":
        kill_group(entry["pgid"], entry.get("start"))
        return True
    if kind == "cgroup":
        return _remove_cgroup(Path(entry["path"]))
    if kind in REMOVERS:
        return REMOVERS[kind](entry)
    if not _same_file(entry):
        return False
    if kind == "file":
        os.unlink(entry["path"])
    elif kind == "tree":
        shutil.rmtree(entry["path"])
    else:
        try:
            os.rmdir(entry["path"])
        except OSError:  # not empty: something else lives there now
            return False
    return True


def _remove_cgroup(path: Path) -> bool:
    """Move the members of cgroup ``path`` to its parent and delete it."""
    if not path.is_dir():
        return False
    procs = path / "cgroup.procs"
    with contextlib.suppress(OSError):
        for pid in procs.read_text().split():
            with contextlib.suppress(OSError):
                (path.parent / "cgroup.procs").write_text(pid)
    path.rmdir()
    return True


# ---- runs that died -----------------------------------------------------------------------
@dataclass(frozen=True)
class RunState:
    """One state file: the run's pid, whether it still runs, what it holds."""

    file: Path
    pid: int
    live: bool
    resources: list[dict[str, Any]]


def runs(where: Path | None = None) -> list[RunState]:
    """Every state file in the runtime directory (unreadable ones are skipped)."""
    where = where or runtime_dir()
    out = []
    for f in sorted(where.glob("run-*.json")) if where.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
            pid = int(doc["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(RunState(f, pid, alive(pid, doc.get("start")), list(doc["resources"])))
    return out


def stale_runs(where: Path | None = None) -> list[RunState]:
    """The state files of runs whose process is gone."""
    return [r for r in runs(where) if not r.live]


def reclaim(run: RunState) -> Iterator[tuple[dict[str, Any], bool]]:
    """Remove what the dead ``run`` listed, newest first: ``(entry, removed)`` per entry."""
    for entry in reversed(run.resources):
        try:
            done = remove(entry)
        except (OSError, subprocess.SubprocessError):
            done = False
        yield entry, done
    run.file.unlink(missing_ok=True)
