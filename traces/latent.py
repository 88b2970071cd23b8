"""The latent-group model behind synthetic access traces: its parameters and draws.

The model (all sizes are per layer and KV-head group; nothing is O(N^2)):

* **Latent groups.** ``G = round(N * memberships_mean / group_size)`` groups,
  each with a random unit centroid ``c_g`` in ``dim`` dimensions.  Group ``g``
  has popularity ``p_g ~ (g + 1) ** -popularity_skew`` (Zipf).
* **Memberships.** Every entry draws a membership count ``m >= 1`` from a
  Zipf-Mandelbrot law ``P(m) ~ (m + c) ** -(membership_tail + 1)`` on
  ``1..G``, with the shift ``c`` solved so that the mean is
  ``memberships_mean``: most entries belong to one group, a heavy tail
  belongs to many (tens at N = 20K; cf. Swarm Fig. 5a, where some entries
  take part in more than 20 co-activation relationships).  It then joins
  ``m`` distinct groups drawn with weight ``sqrt(p_g)``: popular groups are
  larger (with the defaults the largest holds ~5x ``group_size`` at N = 4K
  and ~100x at N = 1M), yet none holds a fixed share of the context, as it
  would with weight ``p_g`` (~15% of all entries in the top group).
  Memberships are a sparse ``(N + steps) x G`` matrix.
* **Keys.** ``k_i = sqrt(structure) * u_i + sqrt(1 - structure) * xi_i`` with
  ``u_i`` the normalised sum of its groups' centroids and ``xi_i ~ N(0, I/dim)``
  (unit expected norm).  Entries without a group (decode tokens when
  ``new_token_groups`` is false) get pure noise of the same expected norm,
  ``k_i ~ N(0, I/dim)``.
* **Queries.** ``active_groups`` distinct groups are drawn by popularity at step
  0; at every later step each is replaced, with probability ``drift``, by a
  group not currently active (drawn by popularity), so the mix drifts over the
  decode.  ``q_t = sqrt(structure) * normalise(sum of active centroids) +
  sqrt(1 - structure + noise**2) * zeta_t`` with ``zeta_t ~ N(0, I/dim)``:
  ``noise`` is per-step jitter on top of the drift.
* **Position** (``positional > 0``): keys gain ``8`` columns of slow
  sinusoids of the token position (0.5..4 cycles per context, random
  phases, mean squared norm ``positional``) where every query is 0.  Scores
  and selections are exactly those of ``positional = 0``; only the key
  geometry changes -- nearby tokens look alike, as rotary position
  embeddings make them -- so methods that cluster keys by distance
  (PQCache's k-means) see position, while co-activation does not.

Randomness: one :class:`numpy.random.SeedSequence` per ``(seed, layer,
head)``, spawned into independent streams (centroids, prefix memberships,
prefix key noise, decode memberships, decode key noise, active-group schedule,
query noise), so runs are reproducible bit for bit and the prefix keys do not
depend on ``steps``.

:func:`build_world` draws all of one ``(layer, head)``; :mod:`traces.generator`
scores and selects from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_KEY_BLOCK = 1 << 16  # entries per block when building keys or scoring
_REDRAWS = 16  # rounds of redrawing duplicate group memberships
_STREAMS = 7
_POS_DIMS = 8  # columns of the positional key part
_POS_STREAM = 1 << 20  # spawn key of its stream (the other streams stay as they were)


@dataclass(frozen=True)
class GeneratorParams:
    """Shape of the co-activation structure (see the module docstring)."""

    dim: int = 64  # scoring-vector dimension (not the model's head_dim)
    group_size: float = 64.0  # mean entries per latent group
    memberships_mean: float = 1.3  # mean latent groups per entry; heavy tail
    membership_tail: float = 2.0  # Pareto exponent of the membership-count tail
    popularity_skew: float = 1.1  # Zipf exponent of group popularity
    active_groups: int = 8  # groups mixed into one query
    drift: float = 0.05  # per-step probability that each active group is replaced
    structure: float = 0.9  # 0 = keys and queries pure noise, 1 = keys set by their groups
    noise: float = 0.3  # per-step query noise on top of the drift
    new_token_groups: bool = True  # decode tokens join groups like the prefix did
    positional: float = 0.0  # energy of a slowly varying positional key part no query probes

    def __post_init__(self) -> None:
        checks = {
            "dim": self.dim >= 1,
            "group_size": self.group_size > 0,
            "memberships_mean": self.memberships_mean >= 1,
            "membership_tail": self.membership_tail > 0,
            "popularity_skew": self.popularity_skew >= 0,
            "active_groups": self.active_groups >= 1,
            "drift": 0 <= self.drift <= 1,
            "structure": 0 <= self.structure <= 1,
            "noise": self.noise >= 0,
            "positional": self.positional >= 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"GeneratorParams: out of range: {', '.join(bad)}")


def membership_pmf(mean: float, tail: float, k_max: int) -> np.ndarray:
    """``P(count = k)`` for ``k = 1..k_max``: Zipf-Mandelbrot with the given mean.

    A mean beyond what ``k_max`` groups allow is capped (the law tends to uniform).
    """
    k = np.arange(1, k_max + 1, dtype=np.float64)
    if k_max == 1 or mean <= 1:
        return np.eye(1, k_max).ravel()

    def pmf(c: float) -> np.ndarray:
        w = np.exp(-(tail + 1.0) * np.log(k + c))
        return w / w.sum()

    lo, hi = -1.0 + 1e-12, 1.0
    while _mean(pmf(hi), k) < mean and hi < 1e9:
        lo, hi = hi, hi * 4
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _mean(pmf(mid), k) < mean else (lo, mid)
    return pmf(hi)


def _mean(pmf: np.ndarray, k: np.ndarray) -> float:
    return float(np.sum(pmf * k))  # not ``pmf @ k``: a BLAS call per bisection step is slow


@dataclass
class World:
    """Everything random about one (layer, head): groups, keys, queries."""

    memberships: sp.csr_matrix  # (N + steps) x G, bool
    keys: np.ndarray  # (N + steps) x dim, float32
    active: np.ndarray  # steps x active groups, int32
    queries: np.ndarray  # steps x dim, float32


def build_world(
    p: GeneratorParams, n: int, steps: int, g: int, seed: int, layer: int, head: int
) -> World:
    """The random world of ``(layer, head)``: ``g`` groups over ``n`` prefix
    entries and ``steps`` decode steps, drawn from the streams of ``(seed,
    layer, head)`` (see the module docstring)."""
    seq = np.random.SeedSequence(seed, spawn_key=(layer, head))
    r_cent, r_mem, r_key, r_mem_new, r_key_new, r_sched, r_query = (
        np.random.default_rng(s) for s in seq.spawn(_STREAMS)
    )
    centroids = r_cent.standard_normal((g, p.dim))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    popularity = np.arange(1, g + 1, dtype=np.float64) ** -p.popularity_skew
    popularity /= popularity.sum()
    pmf = membership_pmf(p.memberships_mean, p.membership_tail, g)
    size_w = np.sqrt(popularity)
    members = [draw_memberships(r_mem, n, pmf, size_w)]
    new = steps if p.new_token_groups else 0
    members.append(draw_memberships(r_mem_new, new, pmf, size_w))
    if new < steps:
        members.append(sp.csr_matrix((steps - new, g), dtype=bool))
    memberships = sp.vstack(members, format="csr")
    keys = np.empty((n + steps, p.dim), dtype=np.float32)
    r_key.standard_normal(dtype=np.float32, out=keys[:n])
    r_key_new.standard_normal(dtype=np.float32, out=keys[n:])
    mix_keys(keys, memberships, centroids, p.structure)
    active = schedule(r_sched, popularity, min(p.active_groups, g), steps, p.drift)
    mix = centroids[active].sum(axis=1)
    mix /= np.maximum(np.linalg.norm(mix, axis=1, keepdims=True), 1e-300)
    zeta = r_query.standard_normal((steps, p.dim)) / np.sqrt(p.dim)
    queries = np.sqrt(p.structure) * mix + np.sqrt(1 - p.structure + p.noise**2) * zeta
    if p.positional > 0:  # extra key columns; queries are 0 there, so scores are unchanged
        pos_seq = np.random.SeedSequence(seed, spawn_key=(layer, head, _POS_STREAM))
        pos = positional_keys(np.random.default_rng(pos_seq), n + steps, n, p.positional)
        keys = np.hstack([keys, pos])
        queries = np.hstack([queries, np.zeros((steps, _POS_DIMS))])
    keys.flags.writeable = False
    return World(memberships, keys, active, queries.astype(np.float32))


def draw_memberships(
    rng: np.random.Generator, n: int, pmf: np.ndarray, weights: np.ndarray
) -> sp.csr_matrix:
    """n x G boolean memberships: a count from ``pmf`` per entry, distinct groups by ``weights``.

    Duplicate draws are redrawn up to ``_REDRAWS`` times, each round touching
    only the entries that still have one; any left are dropped (only entries
    in a large share of all groups can be affected).
    """
    g = len(weights)
    counts = np.searchsorted(_cdf(pmf), rng.random(n), side="right") + 1
    rows = np.repeat(np.arange(n), counts)
    cdf = _cdf(weights)
    groups = np.searchsorted(cdf, rng.random(len(rows)), side="right")
    pending = np.repeat(counts > 1, counts)  # positions of entries that may hold duplicates
    dup = np.zeros(len(rows), dtype=bool)
    for attempt in range(_REDRAWS + 1):
        pos = np.flatnonzero(pending)
        r, gr = rows[pos], groups[pos]
        gr = gr[np.lexsort((gr, r))]  # rows stay in order: sorts groups within each entry
        groups[pos] = gr
        d = np.zeros(len(pos), dtype=bool)
        d[1:] = (r[1:] == r[:-1]) & (gr[1:] == gr[:-1])
        if not d.any():
            break
        if attempt == _REDRAWS:
            dup[pos[d]] = True
            break
        groups[pos[d]] = np.searchsorted(cdf, rng.random(int(d.sum())), side="right")
        pending[:] = False
        pending[np.isin(rows, r[d])] = True
    rows, groups = rows[~dup], groups[~dup]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    data = np.ones(len(groups), dtype=bool)
    return sp.csr_matrix((data, groups.astype(np.int32), indptr), shape=(n, g))


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    cdf[-1] = 1.0
    return cdf


def mix_keys(
    keys: np.ndarray, memberships: sp.csr_matrix, centroids: np.ndarray, structure: float
) -> None:
    """In place: standard-normal ``keys`` -> ``sqrt(s) * u + sqrt(1 - s) * xi`` (see docstring)."""
    dim = keys.shape[1]
    grouped = np.diff(memberships.indptr) > 0
    for lo in range(0, len(keys), _KEY_BLOCK):
        hi = min(len(keys), lo + _KEY_BLOCK)
        u = memberships[lo:hi].astype(np.float64) @ centroids
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
        has = grouped[lo:hi, None]
        scale = np.where(has, np.sqrt((1 - structure) / dim), np.sqrt(1 / dim))
        block = keys[lo:hi] * scale + np.where(has, np.sqrt(structure) * u, 0.0)
        keys[lo:hi] = block.astype(np.float32)


def positional_keys(rng: np.random.Generator, n: int, context: int, energy: float) -> np.ndarray:
    """``n x _POS_DIMS`` float32: sinusoids of position with 0.5..4 cycles per
    context and random phases, mean squared norm ``energy``.  Keys of nearby
    positions are close whatever their groups (cf. rotary embeddings), which
    misleads clustering on key geometry but not selection."""
    freq = rng.uniform(0.5, 4.0, _POS_DIMS) / max(context, 1)
    phase = rng.uniform(0, 2 * np.pi, _POS_DIMS)
    pos = np.arange(n, dtype=np.float64)[:, None]
    return (np.sqrt(2 * energy / _POS_DIMS) * np.cos(2 * np.pi * freq * pos + phase)).astype(
        np.float32
    )


def schedule(
    rng: np.random.Generator, popularity: np.ndarray, n_active: int, steps: int, drift: float
) -> np.ndarray:
    """steps x n_active distinct groups; each slot is replaced w.p. ``drift`` per step."""
    cdf = _cdf(popularity)
    current: list[int] = []
    for _ in range(n_active):
        current.append(draw_excluding(rng, cdf, popularity, current))
    out = np.empty((steps, n_active), dtype=np.int32)
    replace = rng.random((steps, n_active)) < drift
    can_replace = n_active < len(popularity)
    for t in range(steps):
        if t and can_replace:
            for j in np.flatnonzero(replace[t]):
                current[j] = draw_excluding(rng, cdf, popularity, current)
        out[t] = current
    return out


def draw_excluding(
    rng: np.random.Generator, cdf: np.ndarray, popularity: np.ndarray, exclude: list[int]
) -> int:
    """One group by popularity, not in ``exclude`` (rejection, then an exact fallback)."""
    for _ in range(64):
        g = int(np.searchsorted(cdf, rng.random(), side="right"))
        if g not in exclude:
            return g
    w = popularity.copy()
    w[exclude] = 0.0
    return int(np.searchsorted(_cdf(w), rng.random(), side="right"))


def score(keys: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """float64 ``q @ keys[:n].T`` in blocks of entries (bounded memory)."""
    out = np.empty((len(q), n), dtype=np.float64)
    for lo in range(0, n, _KEY_BLOCK):
        hi = min(n, lo + _KEY_BLOCK)
        out[:, lo:hi] = q @ keys[lo:hi].astype(np.float64).T
    return out
