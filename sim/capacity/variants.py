"""Hardware variants derived from a base profile, every one a valid profile.

A variant changes what a buyer can change on a server: the SSD model and how
many of them, and the host DRAM modules (count and GiB each).  It is built on
the base profile's YAML data, not on its dataclasses: the SSD group is
replaced by the chosen model's group (its figures copied from the shipped
profile that describes that drive), and each new SSD / DRAM module gets a
copy of the links the base's first SSD / module has (``ssd0.pcie`` between
``ssd0`` and ``sw0`` becomes ``ssd3.pcie`` between ``ssd3`` and ``sw0``), so
the new devices hang off the same switch and share its upstream link, as
drives added to a server's slots do.  The result is written as YAML and read
back through :func:`hwprofiles.load_profile`, so every evaluated machine
passes the loader's checks and can be saved and inspected.

A variant may also keep only the base's first ``gpus`` GPUs (its GPU model is
the base's): the links of the others are dropped, and the point serves with
tensor parallelism over the ``gpus`` it keeps (:mod:`sim.serving.execute.tp`); it
pays for those GPUs only.  ``gpus`` 0 keeps the base's GPUs as they are
(and serves on ``gpu0``, as before GPU count was a dimension).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hwprofiles import HardwareProfile, list_profiles, load_profile
from hwprofiles.loader import PROFILE_DIR, read_yaml, resolve_yaml
from sim.config import ConfigError


@dataclass(frozen=True)
class Hardware:
    """What a variant changes on the base profile."""

    ssd_model: str  # canonical SSD model name (see :func:`ssd_catalog`)
    ssds: int  # number of SSDs of that model
    dram_modules: int  # host DRAM modules (each linked like the base's dram0: behind its channel)
    dram_gib: float  # capacity of one module
    gpus: int = 0  # GPUs kept (gpu0..), serving with tensor parallelism over them; 0 = base's

    @property
    def dram_total_gib(self) -> float:
        return self.dram_modules * self.dram_gib


def canonical(model: str) -> str:
    """An SSD model without its parenthesised note: ``Samsung PM9A3 3.84 TB U.2
    (assumed)`` -> ``Samsung PM9A3 3.84 TB U.2``."""
    return model.split(" (")[0].strip()


@functools.cache
def ssd_catalog() -> dict[str, dict[str, Any]]:
    """Canonical SSD model -> its group's YAML fields (``count`` dropped), from
    the shipped profiles, the first profile (by name) describing a model wins."""
    out: dict[str, dict[str, Any]] = {}
    for name in list_profiles():
        data, _ = read_yaml(PROFILE_DIR / f"{name}.yaml")
        for group in data.get("ssds", []):
            key = canonical(group["model"])
            out.setdefault(key, {k: v for k, v in group.items() if k != "count"})
    return out


def resolve_ssd(text: str) -> str:
    """The catalog model that ``text`` names: exactly, or as the one model
    containing it (case-insensitive), e.g. ``PM9A3``; otherwise a ConfigError."""
    models = list(ssd_catalog())
    if text in models:
        return text
    hits = [m for m in models if text.lower() in m.lower()]
    if len(hits) == 1:
        return hits[0]
    why = "matches several" if hits else "matches none"
    raise ConfigError(f"SSD model '{text}' {why} of the shipped ones: {'; '.join(models)}")


def _relink(links: list[dict], old: set[str], template: str, names: list[str]) -> list[dict]:
    """``links`` without those touching ``old`` nodes, plus, for each of
    ``names``, a copy of every link of ``template`` with that name swapped in."""
    kept = [lk for lk in links if not set(lk["between"]) & old]
    model = [lk for lk in links if template in lk["between"]]
    for name in names:
        for lk in model:
            new = copy.deepcopy(lk)
            new["name"] = lk["name"].replace(template, name)
            new["between"] = [name if n == template else n for n in lk["between"]]
            kept.append(new)
    return kept


def variant_data(base: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    """The base profile's YAML data with ``hw``'s SSDs and DRAM modules."""
    data = copy.deepcopy(base)
    data.pop("defs", None)  # anchors are already expanded
    old_ssds = {f"ssd{i}" for i in range(sum(g["count"] for g in data["ssds"]))}
    old_dram = {m["name"] for m in data["dram"]}
    dram0 = data["dram"][0]
    drams = [f"dram{i}" for i in range(hw.dram_modules)]
    data["dram"] = [{**dram0, "name": n, "capacity_gib": hw.dram_gib} for n in drams]
    data["ssds"] = [{**ssd_catalog()[hw.ssd_model], "count": hw.ssds}]
    links = data["topology"]["links"]
    links = _relink(links, old_ssds, "ssd0", [f"ssd{i}" for i in range(hw.ssds)])
    data["topology"]["links"] = _relink(links, old_dram, dram0["name"], drams)
    # an assumption about an item of a list the variant rebuilt (the base's DRAM module
    # size, a link by its index) no longer names what it did: the buyer chose those
    rebuilt = ("dram[", "ssds[", "topology.links[", "gpu.count")
    kept = [a for a in data.get("assumptions", []) if not str(a["field"]).startswith(rebuilt)]
    if "assumptions" in data:
        data["assumptions"] = kept
    slug = "".join(c if c.isalnum() else "-" for c in hw.ssd_model.lower()).strip("-")
    if hw.gpus:
        data["topology"]["links"] = _keep_gpus(data, hw.gpus)
    data["name"] = f"{base['name']}--{hw.ssds}x-{slug}--{hw.dram_modules}x{hw.dram_gib:g}gib"
    data["name"] += f"--{hw.gpus}gpu" if hw.gpus else ""
    data["description"] = (
        f"{base['name']} with {hw.ssds} x {hw.ssd_model} and "
        f"{hw.dram_modules} x {hw.dram_gib:g} GiB DRAM (derived by kvtier plan)"
    )
    return data


def _keep_gpus(data: dict[str, Any], n: int) -> list[dict]:
    """The links without those of GPUs ``n`` and up; sets the GPU count to ``n``."""
    have = data["gpu"]["count"]
    if not 1 <= n <= have:
        raise ConfigError(f"gpus: {n} GPUs asked of {data['name']}, which has {have}")
    data["gpu"]["count"] = n
    gone = {f"gpu{i}" for i in range(n, have)}
    return [lk for lk in data["topology"]["links"] if not set(lk["between"]) & gone]


def base_data(base: str | Path) -> dict[str, Any]:
    """The YAML data of a base profile (by name or path), checked by the loader."""
    load_profile(base)
    data, _ = read_yaml(resolve_yaml(base, PROFILE_DIR, "hardware profile"))
    return data


def gpu_model(base: str | Path) -> str:
    """The GPU model of a base profile (every variant of it keeps that model)."""
    return str(base_data(base)["gpu"]["model"])


def derive(base: str | Path, hw: Hardware, out_dir: str | Path) -> HardwareProfile:
    """Write the variant ``hw`` of ``base`` to ``out_dir/<name>.yaml`` and load it
    back through the profile loader (which validates it)."""
    data = variant_data(base_data(base), hw)
    path = Path(out_dir) / f"{data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_profile(path)
