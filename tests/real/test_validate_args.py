"""``kvtier real validate``: its argument checks and its verdict.

Bad values exit 2 with one line naming the flag before anything runs (no I/O:
``--hw`` with a directory that need not exist); the verdict is driven with a
hand-made error table: a missed target names the regime and its error and
fails the run (exit 1) unless ``--informational``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from kvtier.cli import validate as cli
from kvtier.cli.main import main
from kvtier.cli.validate_args import check_args, regimes_arg, scale_arg
from kvtier.compare import regimes
from kvtier.compare.validation import Validation
from real.errors import RealError
from real.validate import REGIMES, TARGET_MEDIAN_ERROR

BASE = ["real", "validate", "--hw", "h20-8ssd", "--no-fio"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--steps", "0"),
        ("--n", "0"),
        ("--step-s", "-0.1"),
        ("--step-s", "0"),
        ("--scale", "0"),
        ("--scale", "nan"),
        ("--scale", "1.5"),
        ("--seed", "-1"),
        ("--regimes", "bogus"),
        ("--regimes", ","),
        ("--regimes", "iops,bogus"),
    ],
)
def test_bad_value_exits_2_naming_the_flag(flag, value, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main([*BASE, f"{flag}={value}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvtier: error:"), err
    assert flag in err and "Traceback" not in err
    assert not out.exists()  # refused before the output was even made


def test_types_accept_the_edges() -> None:
    assert scale_arg("1") == 1.0 and scale_arg("1e-3") == 1e-3
    assert regimes_arg(" iops , write ") == ("iops", "write")
    assert regimes_arg(",".join(REGIMES)) == tuple(REGIMES)


def _args(**kw) -> argparse.Namespace:
    base = {"n": 4, "steps": 5, "step_s": 0.3, "scale": None, "seed": 0, "regimes": "iops"}
    base |= {"no_fio": True, "install_fio": False}
    return argparse.Namespace(**(base | kw))


@pytest.mark.parametrize(
    "kw, flag",
    [
        ({"steps": 0}, "--steps"),
        ({"step_s": math.nan}, "--step-s"),
        ({"scale": 0.0}, "--scale"),
        ({"seed": -1}, "--seed"),
        ({"regimes": ""}, "--regimes"),
    ],
)
def test_check_args_refuses_library_built_values(kw, flag) -> None:
    with pytest.raises(RealError, match=flag):
        check_args(_args(**kw))


def test_check_args_without_fio_names_the_package_and_no_fio(monkeypatch) -> None:
    from real import fio

    monkeypatch.setattr(fio, "fio_binary", lambda: None)
    check_args(_args(no_fio=True))  # --no-fio: nothing needs fio (the replayer measures)
    with pytest.raises(RealError, match=r"fio.*--no-fio"):
        check_args(_args(no_fio=False))


def _result(**medians: float) -> dict:
    return {"by_regime": {k: {"median": v} for k, v in medians.items()}}


def test_verdict_names_each_missed_regime_and_its_error() -> None:
    line, ok = regimes.verdict(_result(latency=0.5, iops=0.12, bandwidth=0.04, write=0.10), False)
    assert not ok  # iops at 12% misses the 10% target
    assert "iops 12.0%" in line and "bandwidth" not in line and "write" not in line
    assert "latency" not in line  # the latency regime is reported, not judged
    line, ok = regimes.verdict(_result(iops=0.12), True)
    assert ok and "iops 12.0%" in line and "informational" in line
    assert regimes.verdict(_result(iops=TARGET_MEDIAN_ERROR, write=0.0), False)[1]
    assert not regimes.verdict(_result(bandwidth=math.nan), False)[1]  # no number is no pass


class _Rec:
    stats: dict = {"notes": []}

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)


@pytest.mark.parametrize("informational, status", [(False, 1), (True, 0)])
def test_missed_target_exits_1_unless_informational(
    informational, status, tmp_path, monkeypatch
) -> None:
    """The command's status from a hand-made table through ``report_regimes``."""
    import pandas as pd
    from rich.console import Console

    from hwprofiles import load_profile

    monkeypatch.setattr(regimes, "write_plan", lambda plan, path: None)
    monkeypatch.setattr(regimes, "write_report", lambda result, out, meta: None)
    monkeypatch.setattr("real.replay.write_results", lambda records, out: None)
    by = {
        k: {"steps": 5, "real_gbps": 1.0, "sim_gbps": 1.0, "median": m, "p90": m, "max": m}
        | {"bias": m}
        for k, m in (("latency", 0.3), ("iops", 0.12), ("bandwidth", 0.03))
    }
    result = {"by_regime": by, "bytes": pd.DataFrame({"match": [True]}), "plan": None}
    result["fio"] = {"skipped": "--no-fio"}
    args = argparse.Namespace(
        out=str(tmp_path), seed=0, emulate=None, pace=None, hw="h20-8ssd", n=4
    )
    args.informational = informational
    console = Console(record=True, width=200)
    profile = load_profile("h20-8ssd")
    run = Validation(result, _Rec(), _Rec(), profile, None, None, 0, 1.0, 0.0, ((0.0,), (0.0,)))
    ok = cli.report_regimes(run, args, console)
    assert (0 if ok else 1) == status  # cmd_validate's `return 0 if ok else 1`
    text = console.export_text()
    assert "iops 12.0%" in text and "bandwidth 3" not in text


def test_rate_plan_steps_move_what_they_say() -> None:
    """Each measurement step by hand: 2 devices, a 4 MiB region, 8 random blocks."""
    from real.capacity import RATE_STEPS, rate_plan

    plan = rate_plan(2, 4 << 20, random_ios=8, qd1_ios=3).to_pandas()
    by = plan.groupby("step").agg(
        bytes=("bytes", "sum"), ios=("n_ios", "sum"), ops=("op_id", "size")
    )
    assert list(by.index) == list(range(len(RATE_STEPS)))
    assert by["bytes"].tolist() == [8 << 20, 8 << 20, 16 * 4096, 16 * 4096, 3 * 4096, 3 * 4096]
    assert by["ios"].tolist() == [8, 8, 16, 16, 3, 3]  # 1 MiB sequential, 4 KiB random
    assert by["ops"].tolist() == [2, 2, 2, 2, 1, 1]  # QD1 latency: ssd0 alone


def test_no_fio_emulation_measures_with_the_replayer(tmp_path, monkeypatch) -> None:
    """Without fio, ``meter='replayer'`` still picks a scale: the one that fits the
    profile's devices into the rates the replayer measured (80% headroom)."""
    from real import fio
    from real.capacity import scale_for
    from real.emulate import emulate

    monkeypatch.setattr(fio, "fio_binary", lambda: None)
    with pytest.raises(RealError, match="--scale"):
        emulate("h100-2dimm-2ssd", 1, where=tmp_path, size=8 << 20, mode="pacing")
    with emulate(
        "h100-2dimm-2ssd", 2, where=tmp_path, size=8 << 20, mode="pacing", meter="replayer"
    ) as es:
        r = es.sustainable
        assert r is not None and min(r.read_bps, r.write_bps, r.read_iops, r.write_iops) > 0
        assert r.read_latency_us > 0 and r.write_latency_us > 0
        assert es.scale == scale_for(es.source, 2, r) <= 1
        # the limit is the scaled profile's IOPS, truncated: within one of the product
        assert abs(es.targets[0].limits.read_iops - es.source.ssds[0].read_iops * es.scale) < 1
