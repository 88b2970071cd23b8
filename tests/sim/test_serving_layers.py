"""The layers of sim.serving and sim.fleet: every module is in one; clock-free ones load no clock.

``pyproject.toml``'s contract "serving policies decide without a clock" names
the clock-free packages and modules; ``lint-imports`` checks their imports.
Here, independently of import-linter: every module of ``sim.serving`` and
``sim.fleet`` is
either covered by that contract or is one of the parts that own time (the
``execute`` package and the named top-level tools), so a new module cannot
fall between the layers unnoticed; and importing every clock-free module in
a fresh interpreter loads neither simpy nor any executor.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import sim.fleet
import sim.serving

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "serving policies decide without a clock: no simpy, no executors"
TIMED_PACKAGES = ("sim.serving.execute",)
TIMED_MODULES = {
    "sim.serving.build",
    "sim.serving.bench",
    "sim.serving.baseline",
    "sim.fleet.routed",
    "sim.fleet.disagg",
    "sim.fleet.scopes",
}


def _contract() -> dict:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in cfg["tool"]["importlinter"]["contracts"] if c["name"] == CONTRACT]
    return contract


def _modules() -> list[str]:
    return sorted(
        m.name
        for pkg in (sim.serving, sim.fleet)
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
        if not m.ispkg
    )


def _under(module: str, names) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def test_every_serving_module_is_in_a_layer() -> None:
    free = _contract()["source_modules"]
    mods = _modules()
    assert len(mods) > 40  # the whole package was walked
    loose = [
        m
        for m in mods
        if not _under(m, free) and not _under(m, TIMED_PACKAGES) and m not in TIMED_MODULES
    ]
    assert loose == []
    both = [m for m in mods if _under(m, free) and _under(m, TIMED_PACKAGES)]
    assert both == []
    assert {"sim.serving.tiers", "sim.serving.policy", "sim.fleet.router"} <= set(
        free
    )  # packages, not module lists


def test_the_clock_free_modules_load_no_clock() -> None:
    contract = _contract()
    free = [m for m in _modules() if _under(m, contract["source_modules"])]
    forbidden = contract["forbidden_modules"]
    code = (
        "import importlib, sys\n"
        f"for m in {free!r}: importlib.import_module(m)\n"
        f"bad = {forbidden!r}\n"
        "print(sorted(m for m in sys.modules if any(m == b or m.startswith(b + '.') for b in bad)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert len(free) > 30
    assert out.stdout.strip() == "[]"
