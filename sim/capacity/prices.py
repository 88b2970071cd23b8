"""Per-unit prices and the cost of a machine.

A price table (YAML, ``hwprofiles/prices/default.yaml`` ships one) has::

    currency: USD
    platform:     {usd, source, date, kind}      # the server without GPU/DRAM/SSDs
    gpu:          {<gpu.model>: {usd, source, date, kind}, ...}
    dram_per_gib: {usd, source, date, kind}
    ssd:          {<canonical SSD model>: {usd, source, date, kind}, ...}
    ssd_slot:     {usd, source, date, kind}      # per SSD: lanes, bay, cabling

Every entry names its source and date, and may say what kind of price it is
(:data:`KINDS`: a vendor's list price, a street price, one derived from cloud
rates, or assumed).  ``kind: assumed``, or a source starting with "assumed",
marks a number nobody could cite, and the plan says which of those its
answer used.  A user table given after the shipped one
replaces the entries it names.  Mistakes (an unknown key, a negative price, a
missing source) are one :class:`PriceError` line naming the file, line and key.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwprofiles import HardwareProfile
from hwprofiles.loader import read_yaml
from sim.capacity.variants import canonical
from sim.config import ConfigError

DEFAULT_PRICES = Path(__file__).resolve().parents[2] / "hwprofiles" / "prices" / "default.yaml"
_SINGLE = ("platform", "dram_per_gib", "ssd_slot")
_BY_MODEL = ("gpu", "ssd")
_TOP = ("currency", *_SINGLE, *_BY_MODEL)
_ENTRY = ("usd", "source", "date", "kind")
_REQUIRED = ("usd", "source", "date")
KINDS = ("list", "street", "cloud-derived", "assumed")


class PriceError(ConfigError):
    """A price table is malformed; the message is one line for the user."""


@dataclass(frozen=True)
class Price:
    usd: float
    source: str
    date: str
    kind: str = ""  # one of KINDS, or "" when the table does not say

    @property
    def assumed(self) -> bool:
        return self.kind == "assumed" or self.source.lower().startswith("assumed")


@dataclass(frozen=True)
class Prices:
    """Resolved price table: ``entries`` maps ``platform``, ``dram_per_gib``,
    ``ssd_slot``, ``gpu/<model>`` and ``ssd/<model>`` to their :class:`Price`."""

    currency: str
    entries: dict[str, Price]

    def get(self, key: str) -> Price:
        if key not in self.entries:
            known = ", ".join(k for k in self.entries if k.startswith(key.split("/")[0]))
            raise PriceError(f"no price for {key} (the table has: {known})")
        return self.entries[key]


def _entry(raw: Any, where: Any, key: str) -> Price:
    if not isinstance(raw, dict):
        raise where.error(key, f"must be a mapping of {', '.join(_ENTRY)}")
    unknown = sorted(set(raw) - set(_ENTRY))
    if unknown:
        raise where.error(
            f"{key}.{unknown[0]}", f"unknown key (expected one of: {', '.join(_ENTRY)})"
        )
    for name in _REQUIRED:
        if name not in raw:
            raise where.error(key, f"missing required key '{name}'")
    usd = raw["usd"]
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 <= usd < math.inf:
        raise where.error(f"{key}.usd", f"must be a number >= 0, got {usd!r} (and finite)")
    if not isinstance(raw["source"], str) or not raw["source"].strip():
        raise where.error(f"{key}.source", "must name where the number comes from (or 'assumed')")
    if not isinstance(raw["date"], datetime.date | str):
        raise where.error(f"{key}.date", f"must be a date (YYYY-MM-DD), got {raw['date']!r}")
    kind = raw.get("kind", "")
    if kind and kind not in KINDS:
        raise where.error(f"{key}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return Price(float(usd), raw["source"].strip(), str(raw["date"]), kind)


def read_prices(path: str | Path) -> tuple[str | None, dict[str, Price]]:
    """(currency or None, entries) of one price file, validated."""
    data, where = read_yaml(Path(path), error=PriceError)
    if not isinstance(data, dict):
        raise where.error("", "a price table must be a mapping")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise where.error(unknown[0], f"unknown key (expected one of: {', '.join(_TOP)})")
    entries: dict[str, Price] = {}
    for key in _SINGLE:
        if key in data:
            entries[key] = _entry(data[key], where, key)
    for key in _BY_MODEL:
        models = data.get(key) or {}
        if not isinstance(models, dict):
            raise where.error(key, "must be a mapping of model -> {usd, source, date}")
        for model, raw in models.items():
            entries[f"{key}/{model}"] = _entry(raw, where, f"{key}.{model}")
    currency = data.get("currency")
    if currency is not None and not isinstance(currency, str):
        raise where.error("currency", f"must be a string, got {currency!r}")
    return currency, entries


def load_prices(*overrides: str | Path) -> Prices:
    """The shipped table with each of ``overrides``' entries replacing its own."""
    currency, entries = read_prices(DEFAULT_PRICES)
    for path in overrides:
        cur, more = read_prices(path)
        if cur is not None and cur != currency:
            raise PriceError(f"{path}: currency {cur} differs from the shipped table's {currency}")
        entries.update(more)
    return Prices(currency or "USD", entries)


def bill(profile: HardwareProfile, prices: Prices) -> dict[str, float]:
    """The machine's cost by part (platform, gpu, dram, ssd, ssd_slot); sum = total."""
    n_ssd = sum(g.count for g in profile.ssds)
    return {
        "platform": prices.get("platform").usd,
        "gpu": profile.gpu.count * prices.get(f"gpu/{profile.gpu.model}").usd,
        "dram": sum(m.capacity_gib for m in profile.dram) * prices.get("dram_per_gib").usd,
        "ssd": sum(g.count * prices.get(f"ssd/{canonical(g.model)}").usd for g in profile.ssds),
        "ssd_slot": n_ssd * prices.get("ssd_slot").usd,
    }


def used_keys(profile: HardwareProfile) -> list[str]:
    """The price entries :func:`bill` reads for ``profile``."""
    keys = ["platform", f"gpu/{profile.gpu.model}", "dram_per_gib", "ssd_slot"]
    return keys + [f"ssd/{canonical(g.model)}" for g in profile.ssds]


HOURS_A_YEAR = 365 * 24
# The machine's purchase price spread evenly (straight line) over this many years of
# service: an assumption, plausible 3-5 (``kvtier plan --amortise-years``).  No power,
# cooling or hosting term: the price table cites no $/kWh or colocation price.
AMORTISE_YEARS = 3.0


def add_hourly(df: Any, years: float = AMORTISE_YEARS) -> Any:
    """``df`` with ``usd_per_hour``: ``cost_usd`` over ``years`` x 8,760 hours (the
    purchase price alone, amortised; see :data:`AMORTISE_YEARS`)."""
    if not years > 0:
        raise ConfigError(f"--amortise-years: must be > 0, got {years}")
    return df.assign(usd_per_hour=df["cost_usd"] / (years * HOURS_A_YEAR))


def add_costs(df: Any, base: str | Path, prices: Prices) -> Any:
    """``df`` (one row per point: ssd_model, ssds, dram_modules, dram_gib, and ``base``
    where a plan spans several base profiles; ``base`` otherwise) with ``cost_usd`` and
    ``assumed_prices`` (the assumed entries its bill used)."""
    import tempfile

    from sim.capacity.variants import Hardware, base_data, derive

    costs, assumed = [], []
    with tempfile.TemporaryDirectory(prefix="kvtier-bill-") as tmp:
        for r in df.itertuples():
            gpus = int(getattr(r, "gpus", 0) or 0)
            hw = Hardware(r.ssd_model, int(r.ssds), int(r.dram_modules), float(r.dram_gib), gpus)
            kind = getattr(r, "base", None)
            kind = kind if isinstance(kind, str) and kind else base
            if max(gpus, int(getattr(r, "replicas", 0) or 0)) > base_data(kind)["gpu"]["count"]:
                costs.append(math.nan)  # more GPUs than the base has: no such machine (unfit)
                assumed.append("")
                continue
            profile = derive(kind, hw, tmp)
            parts = bill(profile, prices)
            if not math.isfinite(sum(parts.values())):  # finite prices, an overflowing product
                raise PriceError(
                    f"{profile.name}: its cost overflows ({', '.join(used_keys(profile))} "
                    f"x the parts' counts and GiB: {parts})"
                )
            costs.append(sum(parts.values()))
            assumed.append(",".join(k for k in used_keys(profile) if prices.get(k).assumed))
    return df.assign(cost_usd=costs, assumed_prices=assumed)
