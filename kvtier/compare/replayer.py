"""How the design validation drives the replayer, and how it models it.

Pacing.  The design replays are paced I/O by I/O in user space (:func:`paced`), inside
the emulation's throttle: see the note above it.

The replayer in the model.  Until 2026-11-25 a paced device issued one I/O at a time
(its token buckets, the op whose turn it was, a one-I/O batch), where an unpaced one
hands a round's I/Os to the ring as arrays.  Measured then on the design plans
(``--emulate h20-8ssd``, 4 devices, loaded 2-core machine; wall time of the replay
loop's parts, wrapped and timed per call):

=========  =====  ===  =======  ========  =======  ========  ========================
design     I/Os   ops  wall ms  issue ms  wait ms  complete  issue us/I/O (1-I/O batch)
=========  =====  ===  =======  ========  =======  ========  ========================
PQCache    2,612  160  250      156       70       19        60 (52)
Swarm      3,016  168  313      154       123      31        51 (42)
=========  =====  ===  =======  ========  =======  ========  ========================

So the model charged the paced path's own per-I/O cost (:func:`real.validate.engine_costs`
with ``paced=True``: the calibration plan's QD64 step, every device through the pacer
at limits that never bind; :func:`paced_costs`, :func:`design_profile`).  Now a paced
round is one batch too (then ``Pacer.admit``: the device's bucket of device time
handed out max-min between its ops, each op's I/Os covered by its credit queued
together; since 2026-12-02 the pacer holds an op's end instead): the engine-cost
plan's QD64 step (4 devices x 4,000 4 KiB reads on /dev/shm files, limits that
never bind, medians of 3, load 5) went from **118 us** per
I/O paced (109-128; unpaced 4.2) to **13 us** (8-20; unpaced 4.3).  The paced
measurement stays: where it is no dearer than the batched one :func:`paced_costs`
adds nothing.  The hardware profiles users simulate are not touched.

Small designs (2026-11-25, four runs on a quiet machine): the model was slower than the
replay by +41-46% (InfLLM), +44% (PQCache), +9-31% (Swarm), +1.7% (No Cluster).  Per op,
the bottleneck devices' fetches ran faster than their rate: PQCache's 33 x 4 KiB on one
device, 1.27 ms at 25,962 IOPS, took 0.63-1.03 ms.  Two mechanisms, both fixed:

* The pacer's bucket filled while a device was idle (and started full), so an op after a
  compute phase spent up to 5 ms of banked device time at the backing store's speed.
  Idle time now banks nothing (:mod:`real._pacing`): a device starts its work empty, as
  the simulator's fluid device does.
* The per-I/O cost the model charges was measured inside the emulation's kernel
  throttle, whose 100 ms slices held the cost plan back: 7.1-7.7 us/I/O paced, where
  the throttle alone allows no less (:func:`real.validate.engine_costs`).  It is now
  measured outside.

What is left (see :mod:`kvtier.compare.designs` for the runs):

* The paced per-I/O cost is measured at limits that never bind, where a round admits a
  device's whole queue depth.  At the devices' real limits an IOPS-bound op is admitted
  a few I/Os per round, and each round costs the loop about as much: PQCache's replay
  spent 27 us of process CPU per I/O (load 2-4, 2026-11-25) against 17.4 us modelled,
  and the small designs (PQCache, Swarm) came out 10-60% slower than the model.
  Measured 2026-11-24 (Swarm's design plan, 4 emulated devices at scale 0.028, the
  replay loop's parts timed per call, load 1-2): the loop is CPU-bound (process CPU
  = makespan, ~31 us per I/O against 6.8-7.0 modelled); a device's paced issue costs
  ~150 us a call (max-min 60, in-flight count 30, queueing 40) and a round's
  verification ~450 us over 3-4 devices, while the ops' copy and compute timers
  (0.06-0.27 ms modelled) fire 1-2.8 ms late behind them.  Two levers were tried:
  - reads of 2-32 blocks verified as one batch per device (was one Python or numpy
    check per read; Swarm's I/Os are 1-19 blocks): Swarm's CPU 98-100 -> 88-91 ms,
    median step 15.4-15.8 -> 13.9-14.4 ms, same run, same devices.  Kept.
  - rounds (a token-bound op waits until 0.5 ms of device time is affordable, its last
    I/O still issued when the one-at-a-time pacer issues it): ~10% less CPU but no
    shorter steps (the burst queues behind itself on the device).  Not kept.
  - per-op in-flight counts skipped where no op's queue depth is below the device's:
    Swarm's CPU 88-91 -> 74-78 ms.  Kept.
  Paired runs (base tree / this one, alternating, load 1.3-3) still gave Swarm -35 to
  -42% / -39% and PQCache -17 to -19% / -19 to -21%: the loop's CPU fell by a quarter
  and the step times did not move beyond the noise.  What the records show instead: the
  copy and compute ops, pure timers, end late -- median copy 0.50 ms against 0.064
  modelled, CPU compute 1.22 against 0.24, GPU compute 0.84 against 0.27 (one run);
  timer lateness in the harness median 352 us, p90 1.1 ms, and the loop's waits are
  mostly entered with their deadline already past (the loop is behind its timers).
  Still open: why the loop lags its timers once its CPU is below the makespan (the
  round's submit and wait cost ~130 us even at a zero timeout).  A long op at binding
  limits cannot measure the per-round cost, since a saturated loop gathers I/Os until
  it keeps up with the devices' rate; layers of 16 I/Os per device at limits that never
  bind can, and since 2026-11-29 the model charges it (:func:`real.validate.engine_costs`,
  ``round_us``, once per op: 57-151 us batched, 64-177 us paced, 4 devices, against
  5-6 us per I/O).  On a plain-file layered plan that binds the loop
  (``test_design_costs``, 12 tries, each costs and replays measured together) the
  model gives a median 1.01 of the replay's time (0.80-1.11), against 0.73 (0.59-0.83)
  for the same costs without the round; CI failed at 0.47.  On the design plans it
  moved little, as their steps are mostly the paced devices' time, not the loop's:
  three paired runs (base / rounds, alternating, ``--emulate h20-8ssd --designs
  default``, load 1-2),
  step error Swarm -38, -23, -38 / -24, -29, -29%; PQCache -17, -4, -16 / -20, -21,
  -25%; InfLLM +1, -1, +1 / -1, -1, 0%; No Cluster -2 (x3) / -2, -2, -3%; Kendall's tau
  1.00 in all six.  The model was still 20-30% fast for Swarm and PQCache, with the
  loop's rounds paid.  Then the copy and compute ops went on their own clock
  (:mod:`real.scheduler`: a timer's end no longer waits for the loop to notice it);
  six paired replays on /dev/shm at the emulation's limits, median step error
  PQCache -14.5 -> -7%, InfLLM -1.6 -> +0.2%, Swarm -30 -> -28%, and three paired
  emulated runs (load 1-2) Swarm -27, -22, -43 / -28, -37, -12%, PQCache -10, -17,
  -32 / +1, -30, -14%: the machine's swings are as large as the change there.  The
  day's whole change against its start, three more paired emulated runs: Swarm -28,
  -27, -36 / -26, -33, -34%; PQCache -10, -15, -24 / -22, -23, -13%; InfLLM +1, 0,
  -2 / +1, +1, +1%; No Cluster -2 / -2%; tau 1.00 in all six.
  Swarm's gap is the loop at binding limits (/dev/shm, paced at the emulation's
  limits, 2026-11-29): the pacer admitted its 96 I/O ops in 422 device rounds over
  126 passes of the loop (PQCache: 88 ops, 329 rounds, 128 passes), as a paced op is
  admitted the few I/Os its tokens cover each pass; the model counts one round per
  op.  The process spent 86-98 ms of CPU on a 73 ms replay (on /dev/shm that includes
  io_uring's workers copying the data), where the model charges the loop 26 ms.
  Pacing at completion instead of issue (every I/O of an op issued at once, each
  completion held until its paced time) would give the loop one round per op, as
  the model and a real SSD's queue have it.  Built 2026-12-02 (:mod:`real._pacing`:
  an op's I/Os go out as an unpaced op's, its end is held to its share of the
  device's time, counted from when it could start); measurements in
  ``docs/real-backend.md``, "Pacing at completion".

* No Cluster's fetches (fixed 2026-11-25).  It reads 8 MB prefetches in 1 MiB I/Os
  beside its 4 KiB fetches on the same devices; the old pacer took a device's ops in
  turn, so a 1 MiB I/O waiting for its tokens held the fetch's small I/Os behind it
  (fetch ops 61 ms real against 18 ms simulated).  The bucket is now shared max-min
  (:mod:`real._pacing`): fetch ops 12.9 ms against 14.5 ms simulated.
* The replay is one CPU-bound thread, so another process's load stretches it, and a
  copy/compute op's end (a timer checked between rounds) fires late while the thread
  is busy or descheduled: 0.27 ms attention ops lasted 2-18 ms at load 6-10 on 2 cores.
  The calibration catches the load of its own moment only.
"""

from __future__ import annotations

import dataclasses

from hwprofiles import HardwareProfile


# The emulated devices' throttle (cgroup v1 blk-throttle) enforces its rates over time
# slices (100 ms by default: the budget is the rate times the elapsed time rounded up to
# the slice), not I/O by I/O.  A design whose reads come in bursts between compute phases
# -- InfLLM reads ~1.8 MB per device per step, then computes -- stays under the average
# and its bursts run at the backing store's speed (measured: 1.3-1.8 GB/s over 4 devices
# throttled to 1.1 GB/s, step errors of +180-300%).  A real SSD has no such credit, so the
# design replays are also paced in user space (real._pacing: each op's end held to its
# share of the device's time, which banks no idle time) at the same limits, inside the
# throttle.  (Until 2026-12-02 the pacer held each I/O back with token buckets of 5 ms.)
def paced(targets: dict, profile: HardwareProfile | None = None, scale: float = 1.0) -> dict:
    """``targets`` held to their own limits by the replayer too (where they have any),
    times ``scale`` (:func:`pace_scale`; every rate at least 1), each with the access
    latency of its SSD in ``profile`` (the profile the replayed plan is simulated on:
    the pacer holds an op to ``L`` after its paced finish as the simulator's latency
    phase does, :mod:`real._pacing`); without a profile, none."""

    def held(t):
        lim = t.limits
        slow = dataclasses.replace(
            lim,
            **{
                f: max(1, round(getattr(lim, f) * scale)) if getattr(lim, f) else 0
                for f in ("read_bps", "write_bps", "read_iops", "write_iops")
            },
        )
        lat = (0.0, 0.0)
        if profile is not None and t.node in profile.ssd_names:
            g = profile.ssd(t.node)
            lat = (g.read_latency_us * 1e-6, g.write_latency_us * 1e-6)
        return dataclasses.replace(t, pacing=True, limits=slow, latency_s=lat)

    return {k: held(t) if not t.limits.unlimited else t for k, t in targets.items()}


def pace_scale(profile: HardwareProfile, per_io_us: float, headroom: float) -> float:
    """The share of the emulated devices' rates the paced replays are held to, so that
    the replay loop is at most ``headroom`` busy issuing and reaping at the devices' full
    aggregate IOPS: ``min(1, headroom x ceiling / demand)`` over reads and writes, with
    ``ceiling = 1 / per_io_us`` the paced loop's own I/O rate (its QD64 stream through the
    pacer, :func:`real.validate.engine_costs` with ``paced=True``) and ``demand`` the sum of
    the devices' ``read_iops`` (``write_iops``).

    Why: the emulation's scale holds the devices' aggregate 4 KiB IOPS at
    ``real.sustain.LOOP_HEADROOM`` of the replayer's *batched* ceiling, which the IOPS
    regime (unpaced, kernel-throttled) runs at; the designs replay through the pacer,
    whose per-I/O cost is higher (12.1 against 4.3 us on the emulated loop devices,
    2026-12-03), so at the same rates an IOPS-heavy design had the loop busy more than
    the devices: Swarm's static routing, 6,204 I/Os over 4 devices, 4.2 ms of modelled
    loop CPU a layer against 3.7 ms of device time, replayed 6-11% slower than modelled
    where the model puts the devices, not the loop, on its critical path."""
    if not per_io_us > 0:
        return 1.0
    ceiling = 1e6 / per_io_us
    scale = 1.0
    groups = [profile.ssd(n) for n in profile.ssd_names]
    for demand in (sum(g.read_iops for g in groups), sum(g.write_iops for g in groups)):
        if demand > 0:
            scale = min(scale, headroom * ceiling / demand)
    return scale


def slowed(profile: HardwareProfile, scale: float) -> HardwareProfile:
    """``profile`` with every SSD group's bandwidth and IOPS times ``scale`` (the paced
    replays' share of the emulated rates, :func:`pace_scale`); latencies unchanged."""
    if scale >= 1.0:
        return profile
    ssds = tuple(
        dataclasses.replace(
            g,
            read_gbps=g.read_gbps * scale,
            write_gbps=g.write_gbps * scale,
            read_iops=g.read_iops * scale,
            write_iops=g.write_iops * scale,
        )
        for g in profile.ssds
    )
    return dataclasses.replace(profile, ssds=ssds)


PACED_COST_IOS = 500  # the paced engine-cost plan: 8 x 500 I/Os per device at QD64


def designs_paced(dev) -> bool:
    """Whether the design replays go through the user-space pacer (:func:`paced`):
    targets with limits (emulated, or files paced by ``--pace``)."""
    if dev.targets is not None:
        return any(not t.limits.unlimited for t in dev.targets.values())
    return bool(dev.pacing and dev.limits is not None and not dev.limits.unlimited)


def paced_costs(costs: dict, paced: dict) -> dict:
    """The replayer's costs on the paced path, from the unpaced measurement ``costs``
    and the paced one ``paced`` (its per-I/O and round times; both from
    :func:`real.validate.engine_costs`).  A QD1 I/O is issue + device + reap, one I/O
    in one round; pacing changes only the issue, by what it adds to one I/O and its
    round (the two measurements' difference, never below 0), so each QD1 latency grows
    by that.  The QD1 times are not measured through the pacer itself: a few hundred
    QD1 I/Os on a loaded machine caught stalls (2.6 ms against 0.77 ms), where the
    differences average over thousands of I/Os and dozens of rounds."""

    def one(c: dict) -> float:  # one I/O in a round of its own
        return c.get("per_io_net_us", c["per_io_us"]) + c.get("round_us", 0.0)

    extra = max(0.0, one(paced) - one(costs))
    return (
        costs
        | paced
        | {
            "read_latency_us": costs["read_latency_us"] + extra,
            "write_latency_us": costs["write_latency_us"] + extra,
            "paced_extra_us": extra,
        }
    )


def design_profile(dev, engine: str, costs: dict | None) -> tuple[HardwareProfile, dict | None]:
    """The profile the designs are simulated on, and the replayer costs it holds.

    ``costs``: the replayer as measured for the regime steps
    (:func:`real.validate.engine_costs`), None when the model keeps the profile's own
    figures (``--no-engine-costs``).  Paced design replays go through the pacer, whose
    per-I/O cost was several times the batched path's while it issued one I/O at a time
    (see the module doc), so the replayer's per-I/O time is measured again on that path
    and :func:`paced_costs` model it (nothing added where it is no dearer).  The paced
    replays and this profile run the devices at :func:`pace_scale` of their emulated
    rates (``costs["pace_scale"]``), so the loop has the same headroom over them as the
    regime steps have over the batched path."""
    if costs is None or not designs_paced(dev):
        return dev.profile, costs
    from real.sustain import LOOP_HEADROOM
    from real.validate import engine_costs, with_engine_costs

    n_ssd = len(dev.targets) if dev.targets is not None else len(dev.profile.ssd_names)
    # outside the kernel's throttle, as the batched measurement (real.validate.engine_costs)
    measured = engine_costs(dev, engine, n_ssd, n=PACED_COST_IOS, paced=True)
    model = paced_costs(costs, measured)
    scale = pace_scale(dev.profile, measured["per_io_us"], LOOP_HEADROOM)
    model = model | {"pace_scale": scale}
    return slowed(with_engine_costs(dev.profile, model), scale), model
