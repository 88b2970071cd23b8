"""Calibration: the fit recovers known devices from fio-shaped JSON; a real fio file parses;
a tiny real sweep on temporary files writes a loadable profile."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from hwprofiles import load_profile
from real import fio
from real.calibrate import QUICK, Sweep, calibrate, dir_targets, fit_all, sweep_points
from real.calibrate_fit import calibrated_profile, fit_device, group_devices, saturating_depth
from real.errors import RealError
from real.profile_yaml import write_profile

DATA = Path(__file__).parent / "data"
KIB, MIB = 1 << 10, 1 << 20
FULL_GRID = Sweep(
    (4 * KIB, 16 * KIB, 128 * KIB, MIB, 2 * MIB), (1, 2, 4, 8, 16, 32, 64), 1.0, MIB, True
)


@dataclasses.dataclass(frozen=True)
class Device:
    """A textbook SSD: rate = min(IOPS, bw / bs, QD / latency) I/Os per second."""

    bw: float
    iops: float
    latency_us: float

    def ios_per_s(self, bs: int, qd: int) -> float:
        return min(self.iops, self.bw / bs, qd / (self.latency_us * 1e-6))


READ = Device(bw=2e9, iops=300_000, latency_us=50)  # saturates 4 KiB reads at QD 15
WRITE = Device(bw=1e9, iops=100_000, latency_us=20)  # ... 4 KiB writes at QD 2


def _direction(rate: float, bs: int, qd: int) -> dict:
    """fio's per-direction JSON for ``rate`` I/Os per second over 1 s (Little's law latency)."""
    if rate == 0:
        return {"io_bytes": 0, "bw_bytes": 0, "iops": 0.0, "runtime": 0, "total_ios": 0}
    clat_ns = qd / rate * 1e9
    return {
        "io_bytes": int(rate * bs),
        "bw_bytes": int(rate * bs),
        "iops": rate,
        "runtime": 1000,
        "total_ios": int(rate),
        "clat_ns": {"mean": clat_ns},
        "lat_ns": {"mean": clat_ns + 1000},
    }


def fio_doc(rw: str, bs: int, qd: int, files: list[str], cap_bps: float = 0.0) -> dict:
    """A fio JSON document: one job per file, each a READ/WRITE device; ``cap_bps`` is a
    link shared by all jobs (split evenly)."""
    dev = READ if "read" in rw else WRITE
    rate = dev.ios_per_s(bs, qd)
    if cap_bps:
        rate = min(rate, cap_bps / len(files) / bs)
    jobs = []
    for i, f in enumerate(files):
        d = _direction(rate, bs, qd)
        zero = _direction(0, bs, qd)
        jobs.append(
            {
                "jobname": f"ssd{i}",
                "error": 0,
                "job options": {"name": f"ssd{i}", "filename": f},
                "read": d if "read" in rw else zero,
                "write": zero if "read" in rw else d,
            }
        )
    return {"global options": {"rw": rw, "bs": str(bs), "iodepth": str(qd)}, "jobs": jobs}


def synthetic_runs(n: int, sweep: Sweep, cap_bps: float = 0.0):
    alone: list[list[fio.FioRun]] = [[] for _ in range(n)]
    together = []
    for p in sweep_points(n, sweep):
        files = [f"/dev/loop{i}" for i in p.devices]
        run = fio.summarize(fio_doc(p.rw, p.bs, p.iodepth, files, cap_bps), p.filename(n))
        (alone[p.devices[0]] if len(p.devices) == 1 else together).append(run)
    return alone, together


def test_the_fit_recovers_a_known_device() -> None:
    alone, _ = synthetic_runs(1, FULL_GRID)
    fit = fit_device(alone[0])
    assert fit.read_gbps == pytest.approx(2.0)
    assert fit.write_gbps == pytest.approx(1.0)
    assert fit.read_iops == pytest.approx(300_000)
    assert fit.write_iops == pytest.approx(100_000)
    assert fit.read_latency_us == pytest.approx(50)
    assert fit.write_latency_us == pytest.approx(20)
    assert fit.max_queue_depth == 16  # 4 KiB reads: 16 x 20K/s >= 90% of 300K, 8 x 20K/s is not
    assert fit.sources["read_latency_us"] == "ssd0-randread-4k-qd1.json"
    assert fit.sources["read_iops"] == "ssd0-randread-4k-qd16.json"  # the first at the plateau
    # 2 GB/s from 128 KiB at QD1 on; ties go to the first, shallowest point
    assert fit.sources["read_gbps"] == "ssd0-randread-128k-qd1.json"


def test_saturating_depth_by_hand() -> None:
    runs = [
        fio.summarize(fio_doc("randread", 4 * KIB, qd, ["/dev/x"]), f"qd{qd}") for qd in (1, 4, 32)
    ]
    # rates 20K, 80K, 300K: 90% of 300K needs QD 32
    assert saturating_depth(runs) == 32
    assert saturating_depth(runs, saturation=0.25) == 4
    assert saturating_depth(runs[:1]) is None


def test_deep_queues_are_left_out_of_the_bandwidth_plateau() -> None:
    """A throttled device lets a first queue of 16 MiB through at once: over 1 s that reads
    as 8% above its rate; the fit keeps to points with at most 8 MiB queued."""
    runs = [
        fio.summarize(fio_doc(rw, 4 * KIB, 1, ["/dev/x"]), f"{rw}-qd1")
        for rw in ("randread", "randwrite")
    ]
    shallow = fio.summarize(fio_doc("randread", 512 * KIB, 8, ["/dev/x"]), "qd8")
    deep = fio.summarize(fio_doc("randread", 512 * KIB, 32, ["/dev/x"]), "qd32")
    inflated = dataclasses.replace(deep.read, bw_bps=deep.read.bw_bps * 1.08)
    fit = fit_device([*runs, shallow, dataclasses.replace(deep, read=inflated)], fallback=None)
    assert fit.sources["read_gbps"] == "qd8" and fit.read_gbps == pytest.approx(2.0)


def test_quick_sweep_devices_borrow_latency_and_depth_from_the_first() -> None:
    alone, together = synthetic_runs(3, QUICK)
    assert [len(a) for a in alone] == [18, 4, 4] and len(together) == 4
    fits, upstream = fit_all(alone, together)
    assert fits[2].read_latency_us == pytest.approx(50)
    assert fits[2].max_queue_depth == fits[0].max_queue_depth == 32  # QUICK: QD 1, 8, 32
    assert fits[2].sources["read_latency_us"] == "ssd0-randread-4k-qd1.json"
    assert fits[2].read_iops == pytest.approx(300_000)
    assert upstream is not None and not upstream.limited
    assert upstream.read_gbps == pytest.approx(6.0)


def test_a_shared_upstream_link_is_found_and_written(tmp_path: Path) -> None:
    alone, together = synthetic_runs(2, FULL_GRID, cap_bps=3e9)  # 2 x 2 GB/s behind 3 GB/s
    fits, upstream = fit_all(alone[:1] + [synthetic_runs(2, FULL_GRID)[0][1]], together)
    assert upstream is not None and upstream.limited
    assert upstream.read_gbps == pytest.approx(3.0) and upstream.alone_read_gbps == pytest.approx(4)
    assert group_devices(fits) == [[0, 1]]
    base = load_profile("h20-8ssd")
    profile, comments = calibrated_profile(fits, upstream, base, "mine", [1.5, 1.5])
    back = write_profile(profile, tmp_path / "mine.yaml", ["test"], comments, "as in base")
    assert back.name == "mine" and back.ssd_names == ("ssd0", "ssd1")
    ssd = back.ssd("ssd1")
    assert (ssd.read_gbps, ssd.write_iops, ssd.read_latency_us) == (2.0, 100_000, 50)
    assert back.link("ssdsw.up").gbps == pytest.approx(3.0)
    assert back.link("ssd1.link").between == ("ssd1", "ssdsw")
    assert "ssdsw" in back.topology.switches
    assert not [ln for ln in back.topology.links if "pcie" in ln.name and "ssd" in ln.name]
    text = (tmp_path / "mine.yaml").read_text()
    assert "read_iops: 300000  # fio, mean of ssd{0,1}-randread-4k-qd16.json" in text
    assert "shared upstream: all at once read 3 GB/s vs 4 alone" in text


def test_devices_that_differ_get_their_own_groups() -> None:
    alone, _ = synthetic_runs(1, FULL_GRID)
    fast = fit_device(alone[0])
    slow = dataclasses.replace(fast, read_gbps=fast.read_gbps / 2)
    assert group_devices([fast, fast, slow, slow, fast]) == [[0, 1], [2, 3], [4]]


def test_missing_points_are_a_clear_error() -> None:
    run = fio.summarize(fio_doc("randread", 4 * KIB, 1, ["/dev/x"]), "r.json")
    with pytest.raises(RealError, match="no write points"):
        fit_device([run])
    run = fio.summarize(fio_doc("randread", MIB, 8, ["/dev/x"]), "r.json")
    with pytest.raises(RealError, match="no QD1 1048576-byte read point"):
        fit_device([run])


def test_a_real_fio_json_file_parses() -> None:
    doc = fio.load_fio_json(DATA / "fio-randread-4k-qd1.json")
    run = fio.summarize(doc, "fio-randread-4k-qd1.json")
    assert (run.rw, run.bs, run.iodepth, run.is_read) == ("randread", 4096, 1, True)
    assert run.filenames == ("/dev/shm/kt-fixture",)
    assert run.read.total_ios == 19746 and run.read.io_bytes == 19746 * 4096
    assert run.read.bw_bps == 268703043 and run.read.iops == pytest.approx(65601.328904)
    assert run.read.clat_mean_us == pytest.approx(11.790329788)
    assert run.read.runtime_s == pytest.approx(0.301)
    assert run.write.total_ios == 0


def test_fio_sizes() -> None:
    assert [fio.parse_size(s) for s in ("4096", "4k", "1M", "2MiB", "1GiB")] == [
        4096,
        4096,
        MIB,
        2 * MIB,
        1 << 30,
    ]


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_a_tiny_real_sweep_on_temporary_files(tmp_path: Path) -> None:
    tiny = Sweep((4 * KIB, 128 * KIB), (1, 4), 0.2, 8 * MIB, False)
    with dir_targets([tmp_path], tiny.size) as targets:
        cal = calibrate(targets, tmp_path / "out", sweep=tiny, profile_path=tmp_path / "t.yaml")
        data_file = Path(targets[0].path)
        assert data_file.exists()  # fio laid it out
    assert not data_file.exists()  # removed afterwards
    assert cal.profile.name == "t" and cal.profile.ssd_names == ("ssd0",)
    fit = cal.fits[0]
    assert fit.read_gbps > 0 and fit.write_iops > 0 and fit.read_latency_us > 0
    assert fit.max_queue_depth in (1, 4)
    names = sorted(p.name for p in (tmp_path / "out" / "fio").iterdir())
    assert len(names) == 8 and "ssd0-randread-4k-qd1.json" in names
    assert (tmp_path / "out" / "calibration.json").exists()
