"""fio's side of the fio engine (:mod:`real.fioreplay`): its input and output files.

* :func:`fio_waves`: a plan's ops as *waves* -- groups fio runs one after
  another, each op of a wave depending on exactly the whole previous one;
* :func:`turn_order` / :func:`write_iolog`: the iolog (v2) of one node's I/Os,
  in the order the Python engine issues them;
* :func:`pad_offsets`: where each node's pad I/Os go (fio 3.33 neither counts
  nor verifies the last ``iodepth - 1`` completions of an iolog);
* :func:`fill_fio`: a target written with fio's verify headers;
* :func:`completions` / :func:`match_completions`: fio's per-I/O completion log
  read back and checked against the plan's I/Os;
* :func:`children_cpu_s`: fio's CPU, measured from outside.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from kvtier.contracts.plan import depends_csr
from real._blocks import BLOCK
from real.datafile import IOLayout
from real.errors import RealError
from real.fio import run_fio
from real.targets import Target

PADS_PER_SLOT = 2
SLICE_S = 0.1  # cgroup v1 blk-throttle's slice (throtl_slice = HZ / 10)
FILL_BS = 1 << 20
VERIFY = {"verify": "crc32c", "verify_interval": BLOCK, "verify_state_save": 0}


def fio_waves(plan: pa.Table) -> list[np.ndarray] | str:
    """The plan's ops (row indices) as waves in run order, or why they are not waves.

    Waves are the ops of one ``step`` value, in increasing order: the first
    depends on nothing, and every op of each later one on every op of the one
    before and nothing else -- so running the waves one after another (one fio
    run each) keeps every dependency and adds no barrier the plan lacks."""
    step = plan.column("step").to_numpy()
    values, wave = np.unique(step, return_inverse=True)
    ptr, deps = depends_csr(plan)
    count = np.diff(ptr)
    size = np.bincount(wave, minlength=len(values))
    prev_size = np.concatenate([[0], size[:-1]])[wave]
    owner = np.repeat(np.arange(plan.num_rows), count)
    pairs = np.unique(owner * plan.num_rows + deps) if len(deps) else deps
    ok = (
        np.array_equal(count, prev_size)
        and (wave[deps] == wave[owner] - 1).all()
        and len(pairs) == len(deps)
    )
    if not ok:
        return (
            "ops depend on other ops beyond the whole previous step "
            "(fio keeps no barrier between I/Os)"
        )
    order = np.argsort(wave, kind="stable")
    return np.split(order, np.cumsum(size)[:-1])


def lead_in(target: Target, write: bool, io_bytes: int) -> tuple[int, int]:
    """(count, bytes) of the pad I/Os that open a throttled node's log: as many as one
    :data:`SLICE_S` of the limit that binds I/Os of ``io_bytes`` (IOPS or bytes/s
    over ``io_bytes``) lets through, rounded down (one more would wait for the next
    slice, whose credit the plan would then get), each ``io_bytes`` long; (0, 0) on
    an unthrottled target.

    cgroup v1 blk-throttle lets a group dispatch ``rate x elapsed`` rounded *up* to
    its slice, so a stream that starts a fresh slice -- every fio run does, after the
    idle start-up -- gets one slice of I/O at once (measured: IOPS steps 17-25% and
    1 MiB write steps 17-26% shorter than the throttle's rate).  The Python engine
    runs steps back to back and only its first step (the warm-up) gets that credit;
    the lead-in spends it, and the wave's clock starts when the lead-in is done."""
    lim = target.limits
    iops, bps = (lim.write_iops, lim.write_bps) if write else (lim.read_iops, lim.read_bps)
    rates = [r for r in (iops, bps / io_bytes if bps else 0) if r > 0]
    if target.pacing or not rates:
        return 0, 0
    return math.floor(SLICE_S * min(rates)), io_bytes  # one more would wait a slice


def pad_offsets(
    layout: IOLayout, targets: Mapping[str, Target], room: Mapping[str, int] | None = None
) -> dict[str, int] | str:
    """Per node, where fio's pad I/Os go (``room[node]`` bytes, default one 4 KiB
    block): just past the plan's extent (a regular file grows to hold them), or, where
    a device ends there, the first run of blocks no plan I/O touches; a string says
    which node has none."""
    need, pads = layout.extents(), {}
    for k, node in enumerate(layout.nodes):
        t, span = targets.get(node), (room or {}).get(node, BLOCK)
        if t is None or t.kind == "file" or need[node] + span <= t.size:
            pads[node] = need[node]
            continue
        mine = layout.io_node == k
        edges = np.zeros(t.size // BLOCK + 1, np.int64)
        np.add.at(edges, layout.offset[mine] // BLOCK, 1)
        np.add.at(edges, (layout.offset[mine] + layout.length[mine]) // BLOCK, -1)
        free = np.concatenate([[0], np.cumsum(np.cumsum(edges)[:-1] == 0)])
        w = span // BLOCK
        runs = np.flatnonzero(free[w:] - free[:-w] == w)
        if not len(runs):
            return f"{node}: no {span // BLOCK} blocks the plan leaves untouched (fio's pads)"
        pads[node] = int(runs[0]) * BLOCK
    return pads


def turn_order(layout: IOLayout, k: int) -> np.ndarray:
    """Indices of node ``k``'s I/Os in the Python engine's order: its ops (all
    started at once) take turns, one I/O each, in op order."""
    ops = np.nonzero(layout.node == k)[0]
    counts = layout.first[ops + 1] - layout.first[ops]
    idx = np.concatenate([np.arange(layout.first[j], layout.first[j + 1]) for j in ops])
    turn = idx - np.repeat(layout.first[ops], counts)
    op = np.repeat(ops, counts)
    return idx[np.lexsort((op, turn))]


def write_iolog(path: Path, file: str, write: bool, off: np.ndarray, length: np.ndarray) -> None:
    """A fio v2 iolog: ``file`` opened, then one line per (offset, length)."""
    act = "write" if write else "read"
    pairs = zip(off.tolist(), length.tolist(), strict=True)
    body = "\n".join(f"{file} {act} {o} {n}" for o, n in pairs)
    path.write_text(f"fio version 2 iolog\n{file} add\n{file} open\n{body}\n")


def fill_fio(target: Target, size: int, work: Path) -> None:
    """Write ``size`` bytes (a multiple of 4 KiB) of ``target`` with fio verify headers."""
    bs = min(FILL_BS, size & -size)
    args = [
        f"--name=fill_{target.node}",
        f"--filename={target.path}",
        "--rw=write",
        f"--bs={bs}",
        f"--size={size}",
        "--direct=1",
        "--ioengine=psync",
        "--do_verify=0",
        *(f"--{k}={v}" for k, v in VERIFY.items()),
    ]
    run_fio(args, work / f"fill_{target.node}.json", cwd=work)


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's reaped children so far.

    Around one :func:`run_fio` this is fio's whole CPU: its io-wq workers are
    threads of fio's process and count here, while fio's own ``usr_cpu`` /
    ``sys_cpu`` leave them out (measured on tmpfs with ``force_async``: 1.4 us
    per 4 KiB read reported against 3.7 us here)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def completions(path: Path, pad_off: int, lead: int = 0) -> tuple[pd.DataFrame, float]:
    """fio's per-I/O completion log of one job, pads left out (time_s, offset, length),
    and when the ``lead`` lead-in pads were done (the ``lead``-th pad completion; 0.0
    without): the throttle serves a group first in, first out, so they finish first."""
    cols = ["ms", "clat_ns", "ddir", "length", "offset", "prio"]
    df = pd.read_csv(path, header=None, names=cols, usecols=range(5), skipinitialspace=True)
    df = df.assign(time_s=df["ms"] / 1e3)
    pad = df["offset"] == pad_off
    started = float(np.sort(df.loc[pad, "time_s"].to_numpy())[lead - 1]) if lead else 0.0
    return df[~pad], started


def match_completions(
    lay: IOLayout, k: int, done: pd.DataFrame, end: np.ndarray, node: str
) -> None:
    """Check fio completed exactly node ``k``'s plan I/Os; set each op's end (max over
    its I/Os) in ``end``."""
    mine = np.nonzero(lay.io_node == k)[0]
    p_off, p_len = lay.offset[mine], lay.length[mine]
    f_off, f_len = done["offset"].to_numpy(np.int64), done["length"].to_numpy(np.int64)
    p_ord = np.lexsort((mine, p_len, p_off))
    f_ord = np.lexsort((done["time_s"].to_numpy(), f_len, f_off))
    if len(f_off) != len(p_off) or not (
        np.array_equal(p_off[p_ord], f_off[f_ord]) and np.array_equal(p_len[p_ord], f_len[f_ord])
    ):
        raise RealError(
            f"{node}: fio completed {len(f_off)} I/Os, not the plan's {len(p_off)} "
            "(offsets and lengths differ; an I/O missing from fio's log was not verified "
            "either: fio 3.33 skips its last iodepth - 1 completions, pads or not; first "
            f"plan I/O missing: offset {first_missing(p_off, p_len, f_off, f_len)})"
        )
    op_of_io = np.repeat(np.arange(len(lay.node)), np.diff(lay.first))
    np.maximum.at(end, op_of_io[mine[p_ord]], done["time_s"].to_numpy()[f_ord])


def first_missing(
    p_off: np.ndarray, p_len: np.ndarray, f_off: np.ndarray, f_len: np.ndarray
) -> int:
    """Offset of the first plan I/O (by offset) that fio's completion log holds fewer
    times than the plan does (-1: none missing; fio did extra I/Os)."""
    plan = pd.Series(1, index=pd.MultiIndex.from_arrays([p_off, p_len])).groupby(level=[0, 1]).sum()
    done = pd.Series(1, index=pd.MultiIndex.from_arrays([f_off, f_len])).groupby(level=[0, 1]).sum()
    short = plan.sub(done.reindex(plan.index, fill_value=0)) > 0
    return int(short[short].index[0][0]) if short.any() else -1
