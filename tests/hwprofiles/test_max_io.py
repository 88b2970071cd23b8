"""The SSD's maximum transfer size: required, positive, one clean error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwprofiles import list_profiles, load_profile
from tests.hwprofiles.test_loader import MINIMAL, assert_points_at, load_error

LINE = "    max_io_kib: 1280\n"


def test_every_shipped_ssd_has_a_max_io_of_whole_4k_blocks():
    for name in list_profiles():
        for g in load_profile(name).ssds:
            assert g.max_io_kib > 0 and g.max_io_kib % 4 == 0, name


def test_missing_max_io_names_the_key(tmp_path: Path):
    assert LINE in MINIMAL
    msg, path = load_error(tmp_path, MINIMAL.replace(LINE, ""))
    assert_points_at(msg, path, None, "ssds[0]", "missing required key 'max_io_kib'")


@pytest.mark.parametrize("bad", ["0", "-4", "1.5", "big"])
def test_bad_max_io_names_file_line_and_key(tmp_path: Path, bad: str):
    text = MINIMAL.replace(LINE, f"    max_io_kib: {bad}\n")
    msg, path = load_error(tmp_path, text)
    line = text.splitlines().index(f"    max_io_kib: {bad}") + 1
    assert_points_at(msg, path, line, "ssds[0].max_io_kib")
