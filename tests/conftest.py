"""Fixtures shared by every test directory (the real backend and the serving replays)."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def direct_dir(tmp_path: Path):
    """A directory whose filesystem accepts O_DIRECT: tmp_path, else a fresh one
    in /dev/shm (removed afterwards); skips where neither does."""
    try:
        os.close(os.open(tmp_path / "probe", os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600))
        (tmp_path / "probe").unlink()
        yield tmp_path
        return
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    if not Path("/dev/shm").is_dir():
        pytest.skip("no filesystem here accepts O_DIRECT")
    shm = Path("/dev/shm") / f"kvtier-test-{uuid.uuid4().hex}"
    shm.mkdir()
    try:
        yield shm
    finally:
        shutil.rmtree(shm, ignore_errors=True)
