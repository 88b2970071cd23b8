"""Units.  The engine's single clock unit is the float second; bandwidths are
bytes per second.  Convert only at the edges (profile loading, reports)."""

from __future__ import annotations

KB = 1_000
MB = 1_000_000
GB = 1_000_000_000
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

US = 1e-6  # one microsecond in seconds
MS = 1e-3
NS = 1e-9


def gbps(x: float) -> float:
    """GB/s (10^9 bytes per second, as datasheets use) to bytes per second."""
    return x * GB


def us(x: float) -> float:
    """Microseconds to seconds."""
    return x * US


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"
