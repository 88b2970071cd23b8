"""Emulated SSDs: the scale, the scaled profile, kernel throttling, pacing fallback, cleanup."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import pytest

from hwprofiles import load_profile
from real import blkio
from real import emulate as emulate_mod
from real.capacity import Rates, check_limits, scale_for
from real.emulate import emulate
from real.errors import RealError
from real.profile_yaml import scaled_profile, write_scaled_profile

MIB = 1 << 20
NO_THROTTLE = blkio.throttle_unavailable()
needs_throttle = pytest.mark.skipif(
    NO_THROTTLE is not None, reason=f"kernel throttling unavailable: {NO_THROTTLE}"
)
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")


def _shm_or(tmp_path: Path) -> Path:
    """/dev/shm when it takes O_DIRECT files (fast, no disk), else the test's tmp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path


def _leftovers(es: emulate_mod.EmulatedSet) -> list[str]:
    """Anything of ``es`` still on the system after it closed."""
    left = [dev for dev, backing in es.loops if blkio.loop_backing(dev) == str(backing)]
    if es.group is not None and es.group.path.exists():
        left.append(str(es.group.path))
    if es.workdir.exists():
        left.append(str(es.workdir))
    return left


def test_one_scale_fits_every_rate_with_headroom() -> None:
    h20 = load_profile("h20-8ssd")  # per SSD: 6.9 / 4.1 GB/s, 1.1M / 200K IOPS
    sustained = Rates(read_bps=20e9, write_bps=10e9, read_iops=1e6, write_iops=1e6)
    # demand of 2 SSDs: 13.8e9, 8.2e9, 2.2e6, 0.4e6; read IOPS binds: 0.5 * 1e6 / 2.2e6
    assert scale_for(h20, 2, sustained, headroom=0.5) == pytest.approx(0.5 / 2.2)
    assert scale_for(h20, 2, Rates(1e12, 1e12, 1e9, 1e9)) == 1.0


def test_scaled_profile_loads_and_keeps_latency_and_links(tmp_path: Path) -> None:
    h20 = load_profile("h20-8ssd")
    scaled = scaled_profile(h20, 3, 0.01, 64 * MIB)
    path = tmp_path / f"{scaled.name}.yaml"
    back = write_scaled_profile(
        h20,
        scaled,
        path,
        scale=0.01,
        held_by="test",
        sustainable=None,
        backing=tmp_path,
    )
    assert back.name == "h20-8ssd-emu3" and back.ssd_names == ("ssd0", "ssd1", "ssd2")
    ssd = back.ssd("ssd2")
    assert ssd.read_gbps == pytest.approx(0.069) and ssd.write_iops == 2000
    assert ssd.read_latency_us == 80 and ssd.max_queue_depth == 128
    assert ssd.capacity_gib == pytest.approx(1 / 16)
    assert {ln.name for ln in back.topology.links if "ssd" in ln.name} == {
        "ssd0.pcie",
        "ssd1.pcie",
        "ssd2.pcie",
    }
    text = path.read_text()
    assert "6.9 x scale 0.01 (emulated)" in text
    numeric = [ln for ln in text.splitlines() if re.search(r":\s+[\d.]+\s*([,}]|$|  #)", ln)]
    assert len(numeric) > 40 and all("  # " in ln for ln in numeric)  # every number is cited


def test_refusals_leave_nothing(tmp_path: Path) -> None:
    with pytest.raises(RealError, match="must be 1..8"):
        emulate("h20-8ssd", 9, where=tmp_path, scale=0.1)
    with pytest.raises(RealError, match="mode must be"):
        emulate("h20-8ssd", 1, where=tmp_path, scale=0.1, mode="fast")
    with pytest.raises(RealError, match="GiB needed"):
        emulate("h20-8ssd", 2, where=tmp_path, size=1 << 50, scale=0.1)
    with pytest.raises(RealError, match="cannot throttle"):
        emulate("h20-8ssd", 1, where=tmp_path, scale=0.1, mode="throttle", cgroup_root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_pacing_fallback_without_throttling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvtier.real")
    nowhere = tmp_path / "no-cgroup-here"
    with emulate("h20-8ssd", 2, where=tmp_path, size=MIB, scale=0.01, cgroup_root=nowhere) as es:
        assert es.mode == "pacing" and es.cgroup is None
        assert [t.kind for t in es.targets] == ["file", "file"]
        assert all(t.pacing and t.created for t in es.targets)
        assert es.targets[0].limits.read_bps == 69_000_000
        assert es.targets[1].limits.write_iops == 2000
        assert all(Path(t.path).stat().st_size == MIB for t in es.targets)
        assert es.profile is not None and es.profile.ssd("ssd1").read_iops == 11000
    [record] = caplog.records
    assert "paced by the replayer" in record.getMessage()
    assert "\n" not in record.getMessage()
    assert _leftovers(es) == [] and list(tmp_path.iterdir()) == []


def test_cleanup_after_an_exception_in_pacing_mode(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        emulate("h20-8ssd", 2, where=tmp_path, size=MIB, scale=0.1, mode="pacing") as es,
    ):
        raise RuntimeError("boom")
    assert _leftovers(es) == [] and list(tmp_path.iterdir()) == []


@needs_throttle
@needs_fio
def test_throttled_loop_devices_hold_their_limits(tmp_path: Path) -> None:
    # 0.0075 x h20-8ssd: 51.75 MB/s read, 8250 read IOPS per device
    where = _shm_or(tmp_path)
    with emulate("h20-8ssd", 2, where=where, size=64 * MIB, scale=0.0075, out=tmp_path) as es:
        assert es.mode == "throttle" and es.cgroup is not None
        assert all(t.kind == "loop" and not t.pacing for t in es.targets)
        assert all(blkio.loop_dio(t.path) for t in es.targets)
        kernel = es.group.limits()
        dev = blkio.dev_number(es.targets[0].path)
        assert kernel[dev] == {
            "read_bps": 51_750_000,
            "write_bps": 30_750_000,
            "read_iops": 8250,
            "write_iops": 1500,
        }
        checks = check_limits(es.targets, es.cgroup, tmp_path / "check", 1.0, iops=False)
        assert [c.node for c in checks] == ["ssd0", "ssd1"]
        for c in checks:  # physics: no more than the limit (plus the first queue's burst)
            assert 0 < c.measured <= c.limit * 1.05 + c.burst, c.line()
        with es.joined():
            assert es.group.members() == [os.getpid()]
        assert es.group.members() == []
    assert _leftovers(es) == []
    assert (tmp_path / "check" / "check-read.json").exists()


@needs_throttle
def test_cleanup_after_an_exception_in_throttle_mode(tmp_path: Path) -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        emulate("h20-8ssd", 2, where=tmp_path, size=MIB, scale=0.1) as es,
    ):
        es.join()
        assert len(es.loops) == 2 and es.group.path.exists()
        raise KeyboardInterrupt  # Ctrl-C
    assert _leftovers(es) == [] and list(tmp_path.iterdir()) == []
    assert f"kvtier-{os.getpid()}" not in Path("/proc/self/cgroup").read_text()


@needs_throttle
def test_failure_while_building_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[emulate_mod.EmulatedSet] = []
    real_init = emulate_mod.EmulatedSet.__init__

    def spy(self: emulate_mod.EmulatedSet, *args: object) -> None:
        real_init(self, *args)
        built.append(self)

    def refuse(self: blkio.ThrottleGroup, dev: str, limits: object) -> None:
        raise RealError("injected: cannot write the limit")

    monkeypatch.setattr(emulate_mod.EmulatedSet, "__init__", spy)
    monkeypatch.setattr(blkio.ThrottleGroup, "limit", refuse)
    with pytest.raises(RealError, match="injected"):
        emulate("h20-8ssd", 2, where=tmp_path, size=MIB, scale=0.1)
    [es] = built
    assert len(es.loops) == 2 and _leftovers(es) == [] and list(tmp_path.iterdir()) == []
