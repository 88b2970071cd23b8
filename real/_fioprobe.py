"""Whether a throttled node's lead-in pads are needed: fio's own ceiling, measured.

A node's lead-in (:func:`real._fiolog.lead_in`) spends the one slice of credit
cgroup v1 blk-throttle grants a fresh run, ``floor(SLICE_S x R)`` pad I/Os at
the binding limit ``R``.  That credit only shortens a run that could go faster
than ``R``: a stream whose own ceiling ``C`` (fio issuing, reaping and
verifying I/Os on this machine) is below ``R`` never meets the throttle, so it
runs at ``C`` with or without the credit, and the pads -- plus the as many
closing pads that follow the plan's I/Os -- are pure cost.  At scale 1 of
``h20-8ssd`` (1.1M IOPS per device) that was 110K pads each way against 200K
plan I/Os, about half of the fio engine's CPU (``python -m real.bench_iops``).

:func:`probe_rates` measures ``C``: one fio run, one job per probed node, all
at once as in a wave, each doing :data:`PROBE_IOS` of its lead-in pads (same
offset, size, direction, queue depth and verification).  Fewer than a slice's
credit, so the throttle lets every one through at once and the run measures
fio, not the limit.  :func:`lead_needed` keeps the lead-in where ``C`` comes
within :data:`MARGIN` of ``R`` (the throttle binds, or might on a faster
moment) and drops it otherwise.  Nodes whose lead-in is not more than
:data:`PROBE_IOS` are never probed: the probe would cost as much as the pads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from real._fiolog import SLICE_S, VERIFY, write_iolog
from real.fio import job_args, run_fio
from real.targets import Target

PROBE_IOS = 10_000  # pads per probed node; below every probed node's slice credit
MARGIN = 1.25  # keep the lead-in unless fio's ceiling is this far below the limit


def lead_needed(limit_rate: float, fio_rate: float, margin: float = MARGIN) -> bool:
    """Whether a node throttled at ``limit_rate`` I/Os per second needs its lead-in,
    fio having reached ``fio_rate`` on it unthrottled: True unless even ``margin``
    times that falls short of the limit (the throttle would never hold an I/O)."""
    return fio_rate * margin >= limit_rate


def probe_rates(
    probes: Mapping[str, tuple[int, int, bool, int]],
    targets: Mapping[str, Target],
    work: Path,
    force_async: Mapping[str, bool],
) -> dict[str, float]:
    """fio's I/Os per second per node of ``probes`` (node -> (pad offset, I/O bytes,
    write, queue depth)): :data:`PROBE_IOS` verified pad I/Os per node, all nodes in
    one run, each node's count over its job's runtime."""
    jobs = []
    for node, (off, size, write, qd) in probes.items():
        log = work / f"probe_{node}.iolog"
        write_iolog(
            log,
            targets[node].path,
            write,
            np.full(PROBE_IOS, off, np.int64),
            np.full(PROBE_IOS, size, np.int64),
        )
        job = {"name": node, "read_iolog": log, "iodepth": qd, "do_verify": 0}
        if force_async[node]:
            job["force_async"] = 1
        jobs.append(job)
    glob = {"ioengine": "io_uring", "direct": 1, "replay_no_stall": 1, "thread": 1}
    glob |= {"disable_lat": 1, "disable_slat": 1, **VERIFY}
    doc = run_fio(job_args(glob, jobs), work / "probe.json", cwd=work)
    rates = {}
    for j in doc.get("jobs", []):
        ios = j["read"]["total_ios"] + j["write"]["total_ios"]
        rates[j["jobname"]] = ios / max(j["job_runtime"], 1) * 1e3
    return rates


def limit_rate(lead: int) -> float:
    """The binding limit (I/Os per second) a lead-in of ``lead`` pads was sized from."""
    return lead / SLICE_S


def drop_idle_leads(
    waves: list, nodes, targets: Mapping[str, Target], work: Path, force_async: Mapping[str, bool]
) -> dict[str, float]:
    """Probe, per node, its largest lead-in over the ``waves`` (:class:`real.fioreplay.Wave`)
    if over :data:`PROBE_IOS`, and set to (0, 0) every wave's lead-in of the same direction
    and I/O size where :func:`lead_needed` says the throttle would never hold an I/O.
    Returns fio's measured I/Os per second per probed node."""
    probes: dict[str, tuple[int, int, bool, int]] = {}
    for node in nodes:
        mine = [w for w in waves if w.lead.get(node, (0, 0))[0] > PROBE_IOS]
        if mine:
            w = max(mine, key=lambda w: w.lead[node][0])
            probes[node] = (w.pads[node], w.lead[node][1], _writes(w, node), w.qd[node])
    ceiling = probe_rates(probes, targets, work, force_async) if probes else {}
    for node, (_, size, write, _) in probes.items():
        for w in waves:
            count, nbytes = w.lead.get(node, (0, 0))
            same = nbytes == size and write == _writes(w, node)
            if same and count and not lead_needed(limit_rate(count), ceiling[node]):
                w.lead[node] = (0, 0)
    return ceiling


def _writes(w, node: str) -> bool:
    """Whether ``node``'s ops in wave ``w`` write (a node is only read or only written)."""
    return bool(w.write[w.layout.node == list(w.layout.nodes).index(node)].any())
