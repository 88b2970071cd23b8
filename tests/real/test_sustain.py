"""The replayer's own ceiling (real/sustain.py) and the emulation scale held below it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from real import _rawring
from real.capacity import Rates
from real.errors import RealError
from real.sustain import LOOP_HEADROOM, replayer_scale, sustainable_iops

RAW_OK, RAW_WHY = _rawring.available()


@dataclass
class Group:
    read_gbps: float
    write_gbps: float
    read_iops: float
    write_iops: float


class Source:
    """A profile whose every SSD is the same group."""

    def __init__(self, group: Group) -> None:
        self.group = group

    def ssd(self, name: str) -> Group:
        return self.group


SRC = Source(Group(read_gbps=7.0, write_gbps=5.0, read_iops=1e6, write_iops=5e5))
STORE = Rates(read_bps=20e9, write_bps=10e9, read_iops=2e6, write_iops=1e6)


def test_scale_is_held_below_the_replayer_by_hand():
    """4 SSDs demand 28 GB/s, 20 GB/s, 4M and 2M IOPS.  The store alone allows
    0.8 x min(20/28, 10/20, 2/4, 1/2) = 0.4; a replayer of 200K IOPS, asked for half
    of it (LOOP_HEADROOM), allows 0.5 x 200K / 4M = 0.025 for reads (0.05 for
    writes): 0.025 wins; asked for 0.8 of it, 0.04."""
    assert LOOP_HEADROOM == 0.5
    scale = replayer_scale(SRC, 4, STORE, 200e3)
    assert scale == pytest.approx(0.025)
    # the scaled devices' aggregate read IOPS sit exactly at the loop's headroom
    assert scale * 4 * SRC.group.read_iops == pytest.approx(0.5 * 200e3)
    assert replayer_scale(SRC, 4, STORE, 200e3, loop_headroom=0.8) == pytest.approx(0.04)


def test_a_fast_replayer_leaves_the_store_scale():
    """10M IOPS: 0.5 x 10M / 4M = 1.25 > 0.4, so the store's 0.4 stands; headroom 0.5
    gives 0.5 x min(...) = 0.25 from the store and 1.25 from the replayer."""
    assert replayer_scale(SRC, 4, STORE, 10e6) == pytest.approx(0.4)
    assert replayer_scale(SRC, 4, STORE, 10e6, headroom=0.5) == pytest.approx(0.25)


def test_write_iops_can_bind():
    """Writes demand 4 x 1M = 4M, reads 4 x 0.1M = 0.4M: 0.5 x 100K / 4M = 0.0125."""
    src = Source(Group(read_gbps=7.0, write_gbps=5.0, read_iops=1e5, write_iops=1e6))
    assert replayer_scale(src, 4, STORE, 100e3) == pytest.approx(0.0125)


@pytest.mark.parametrize("bad", [0.0, -5.0, float("nan")])
def test_replayer_iops_must_be_positive(bad):
    with pytest.raises(RealError, match="replayer_iops must be positive"):
        replayer_scale(SRC, 4, STORE, bad)


@pytest.mark.skipif(not RAW_OK, reason=f"raw ring unavailable: {RAW_WHY}")
def test_sustainable_iops_measures_and_leaves_nothing(direct_dir):
    before = sorted(direct_dir.iterdir())
    iops = sustainable_iops(direct_dir, qd=16, seconds=0.05)
    assert 1e3 < iops < 1e8  # a real rate: verified reads finished in a finite time
    assert 1e3 < sustainable_iops(direct_dir, qd=16, seconds=0.05, n_dev=3) < 1e8
    assert sorted(direct_dir.iterdir()) == before


@pytest.mark.skipif(not RAW_OK, reason=f"raw ring unavailable: {RAW_WHY}")
def test_sustainable_iops_on_given_devices(direct_dir):
    """On targets made elsewhere (the emulation's loop devices): filled, read, kept."""
    from real.targets import Target

    paths = [direct_dir / f"d{k}.img" for k in range(2)]
    for p in paths:
        with open(p, "wb") as f:
            f.truncate(64 << 20)
    targets = {f"ssd{k}": Target(f"ssd{k}", str(p), 64 << 20) for k, p in enumerate(paths)}
    iops = sustainable_iops(direct_dir, qd=16, seconds=0.05, n_dev=2, targets=targets)
    assert 1e3 < iops < 1e8 and all(p.exists() for p in paths)


def test_random_read_plan_reads_every_device_at_once():
    """20,000 I/Os over 4 devices: one op each, 5,000 aligned 4 KiB extents, no
    dependencies (all at once)."""
    from real.sustain import random_read_plan

    plan = random_read_plan(20_000, 4096, 64 << 20, 32, n_dev=4)
    assert plan.column("src").to_pylist() == ["ssd0", "ssd1", "ssd2", "ssd3"]
    assert plan.column("n_ios").to_pylist() == [5000] * 4
    assert all(not d for d in plan.column("depends_on").to_pylist())
    ext = [x for e in plan.column("extents").to_pylist() for x in e]
    assert len(ext) == 20_000
    assert all(x["offset"] % 4096 == 0 and x["length"] == 4096 for x in ext)
    # every device's span is the whole 64 MiB, whatever the seed (files made once fit all)
    for seed in (0, 1):
        p = random_read_plan(20_000, 4096, 64 << 20, 32, seed=seed, n_dev=4)
        for e in p.column("extents").to_pylist():
            assert max(x["offset"] + x["length"] for x in e) == 64 << 20


@pytest.mark.parametrize("kw", [{"qd": 0}, {"qd": 8, "io_bytes": 1000}, {"qd": 8, "seconds": 0.0}])
def test_sustainable_iops_rejects_bad_arguments(tmp_path, kw):
    with pytest.raises(RealError, match="sustainable_iops"):
        sustainable_iops(tmp_path, **kw)


def test_emulation_scale_by_meter(monkeypatch, tmp_path):
    """fio's rates say nothing of the replayer: its ceiling is measured and binds
    (0.025 as above); the replayer meter's rates already include it (store's 0.4)."""
    from real import sustain

    calls = []
    monkeypatch.setattr(
        sustain,
        "sustainable_iops",
        lambda d, qd, seconds, n_dev, targets: calls.append((d, qd, n_dev)) or 200e3,
    )
    scale, ceiling = sustain.emulation_scale(SRC, 4, STORE, 0.8, tmp_path, "fio")
    assert (scale, ceiling) == (pytest.approx(0.025), 200e3)
    # measured where the devices live, at validation's QD, over its 4 devices at once
    assert calls == [(tmp_path, 32, 4)]
    scale, ceiling = sustain.emulation_scale(SRC, 4, STORE, 0.8, tmp_path, "replayer")
    assert (scale, ceiling) == (pytest.approx(0.4), None) and len(calls) == 1
