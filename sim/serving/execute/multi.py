"""Several serving instances in one simulation: one machine, one flow network.

An *instance* is one serving engine (:class:`sim.serving.execute.engine.Engine`):
its own model, GPU, design, scheduler, block manager and request stream.
:func:`run_instances` builds one :class:`sim.hw.machine.Machine` for all of
them, starts every engine's processes on its simpy environment, runs it once
and collects each engine's records under its instance name.  Contention is
not modelled by a rule but comes from the structure: every engine's ops are
flows on the same network, so two instances loading from host memory share
the one host link their routes cross, and engines on one GPU would share its
compute flow (one instance per GPU is required here).

Roles (seed 002, SwiftCache):

* ``solo`` — a plain instance;
* ``worker`` — lends ``lend_bytes`` of its GPU's KV memory to the master (its
  own ``cfg.gpu_blocks`` is what it keeps);
* ``master`` — gets (when some worker lends) a ``peer`` tier above its design's tiers
  (:func:`sim.serving.build.peer_tier`) over the workers' lent bytes, so its
  offloads and reloads of borrowed blocks are GPU-to-GPU copies on the
  profile's NVLink route instead of the PCIe host link.

**HBM of NVLink copies** (:class:`PeerHbm`).  A GPU-to-GPU copy reads the
source GPU's HBM and writes the destination's, so each one issued by any
engine is charged to both endpoint GPUs as an HBM-bound kernel of its bytes
(``hbm_bytes = nbytes``, no FLOPs) sharing the GPU's compute flow: a lending
worker's own kernels slow down while the master streams its blocks (seed 002
§5.2 calls it "a negligible fraction of GPU memory bandwidth"; here it is
whatever the bytes make it).  The copy's own time is the link's; the charges
are separate flows and are not in any engine's records (``stats['peer_hbm_gb']``).

**SMs of NVLink copies** (``copy_sm_share``).  Seed 002 moves KV between GPUs with
torch.distributed (§4), whose NCCL send/recv kernels run one CTA per channel and do
not share an SM with other kernels (NVIDIA/nccl issues 689, 1098).  While a copy runs
its kernels hold ``copy_sm_share`` of each endpoint GPU's SMs: a flow on that GPU's
compute resource capped at the share, lasting the copy's time alone on its route
(NCCL serialises one peer's sends on one stream), so a kernel beside it runs on the
rest of the GPU (``stats['peer_sm_s']``: GPU-seconds held).  0: no SM is held, as
a copy-engine transfer (``cudaMemcpyPeerAsync``) would.

**Layer stream cache** (``Instance.lsc``, :mod:`sim.serving.execute.streaming`).  A
master with ``lsc`` splits its own blocks into the LSC and the regular cache
by Eq. 3-5 beside the workers' ``stream_bytes`` (whole master blocks, Eq. 2),
admits on ``N_RC + N_LSC`` blocks, and streams what lies beyond the regular
cache over the workers' links layer by layer in every iteration.

Requests reach instances by model (:func:`split_by_model`): a trace with a
``model`` column is cut into one stream per model; an instance may also be
given its own trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.hw.machine import Machine
from sim.models import ModelCard
from sim.serving.build import build_engine, gpu_blocks, peer_tier
from sim.serving.designs import DesignParams
from sim.serving.execute.engine import Engine, EngineConfig
from sim.serving.execute.gcpolicy import relaxed_gc
from sim.serving.execute.lending import ElasticSpec, Lending
from sim.serving.execute.online import OnlineOps
from sim.serving.execute.streaming import LayerStream, PeerRegion
from sim.serving.execute.tp import TensorParallel
from sim.serving.metrics import ServingRecords
from sim.serving.requests import Request
from sim.serving.swift.coordinator import MasterBlockTable
from sim.serving.swift.lsc import StreamSizing, layer_block_bytes, size_from_blocks
from sim.serving.swift.meu import block_bytes, model_elastic_unit
from sim.serving.swift.stream import master_sizing

ROLES = ("solo", "master", "worker")


@dataclass
class Instance:
    """One serving engine of a multi-instance run.

    Attributes:
        name: unique label; the records come back under it.
        card: the model it serves.
        design: its offload design (tiers below the GPU, transfer policy).
        cfg: its engine configuration; ``cfg.gpu`` is the GPU it runs on.
        requests: its request stream.
        preload: requests whose KV is placed in its tiers before the run.
        role: ``solo``, ``master`` or ``worker`` (module docstring).
        lend_bytes: a worker's KV bytes lent to the master (at the start).
        stream_bytes: a worker's KV bytes (outside ``lend_bytes`` and its own
            ``cfg.gpu_blocks``) holding whole blocks the master streams, Eq. 2.
        lsc: a master with a layer stream cache: its ``cfg.gpu_blocks`` full-layer
            blocks are split into the LSC and the regular cache by Eq. 3-5
            beside the workers' ``stream_bytes``, and it admits on ``N_RC + N_LSC``.
        lsc_slots: the master's KV memory in single-layer slots (Eq. 3's
            ``K_master``, not always a multiple of the layers); 0 takes
            ``cfg.gpu_blocks`` full-layer blocks.
        lsc_shared: a master whose LSC streams from the blocks the workers lend
            (seed 002's one elastic region per worker): Eq. 2's ``C_worker``
            is each worker's lent bytes, and the running batch's streamed KV
            takes its room from the peer tier (:class:`~sim.serving.execute.streaming.PeerRegion`);
            False keeps a separate ``stream_bytes`` area.
        elastic: a worker's Algorithm 1 at run time (:mod:`sim.serving.execute.lending`);
            None keeps ``lend_bytes`` lent for the whole run.
        tiers: its design's offload tiers and SSD bounce map, built for it by
            :mod:`sim.fleet.scopes` (a node's or the fleet's, the same objects
            in every instance that shares them); None builds its own.
    """

    name: str
    card: ModelCard
    design: DesignParams
    cfg: EngineConfig
    requests: list[Request]
    preload: list[Request] = field(default_factory=list)
    role: str = "solo"
    lend_bytes: float = 0.0
    elastic: ElasticSpec | None = None  # a worker's elastic cache at run time; None = fixed
    stream_bytes: float = 0.0  # a worker's KV bytes holding the master's streamed blocks
    lsc: bool = (
        False  # a master streams through a layer stream cache (sim.serving.execute.streaming)
    )
    lsc_slots: int = 0  # a master's own single-layer slots, Eq. 3; 0 = cfg.gpu_blocks x layers
    lsc_shared: bool = False  # the LSC streams from the workers' lent region (one per worker)
    tiers: tuple | None = None  # (offload tiers, bounce map) shared with others; None: its own
    tp: TensorParallel | None = None  # rank 0 of a tensor-parallel instance (its all-reduces)


def check_instances(instances: Sequence[Instance]) -> None:
    """Unique names and GPUs, known roles, at most one master; raises ValueError."""
    seen_name: set[str] = set()
    seen_gpu: dict[str, str] = {}
    for inst in instances:
        if inst.role not in ROLES:
            raise ValueError(f"instance {inst.name}: role must be one of {ROLES}")
        if inst.name in seen_name:
            raise ValueError(f"two instances named {inst.name!r}")
        if inst.cfg.gpu in seen_gpu:
            other = seen_gpu[inst.cfg.gpu]
            raise ValueError(f"instances {other!r} and {inst.name!r} both on {inst.cfg.gpu}")
        seen_name.add(inst.name)
        seen_gpu[inst.cfg.gpu] = inst.name
    if sum(inst.role == "master" for inst in instances) > 1:
        raise ValueError("at most one master instance")


def lent_bytes(worker: Instance, master: Instance | None) -> float:
    """Bytes ``worker`` lends at the start: ``lend_bytes``, rounded down to whole
    elastic units of the pair when it is elastic (what :class:`Lending` starts from)."""
    if worker.elastic is None or master is None:
        return worker.lend_bytes
    mb, wb = master.cfg.block_tokens, worker.cfg.block_tokens
    unit = model_elastic_unit(master.card, worker.card, mb, wb)
    units = gpu_blocks(worker.lend_bytes, worker.card, wb) // unit.meu_worker
    return float(units * unit.meu_master * block_bytes(master.card, mb))


def build_instances(profile: HardwareProfile, instances: Sequence[Instance]) -> list[Engine]:
    """One engine per instance, all on one new machine of ``profile``."""
    check_instances(instances)
    machine = Machine(profile)
    master = next((i for i in instances if i.role == "master"), None)
    lent = {i.cfg.gpu: lent_bytes(i, master) for i in instances if i.role == "worker"}
    engines = []
    for inst in instances:
        above, cfg, sizing = [], inst.cfg, None
        if inst.role == "master" and any(b > 0 for b in lent.values()):
            b = inst.cfg.block_tokens
            above = [peer_tier(profile, inst.card, inst.design, b, inst.cfg.gpu, lent)]
        if inst.role == "master" and inst.lsc:
            sizing, k = stream_sizing(inst, instances)
            cfg = replace(cfg, gpu_blocks=sizing.max_blocks)
        e = build_engine(profile, inst.card, inst.design, cfg, inst.requests, inst.preload,
                         machine=machine, above=above, own=inst.tiers, tp=inst.tp)  # fmt: skip
        if sizing is not None and sizing.n_lsc:
            gpus = [w for w in k if k[w]]
            e.stream = LayerStream(e, sizing.n_rc, sizing.n_lsc, gpus,
                                   [k[w] / sum(k.values()) for w in gpus])  # fmt: skip
            if inst.lsc_shared and above:
                e.stream.region = PeerRegion(above[0])
        engines.append(e)
    return engines


def stream_sizing(
    master: Instance, instances: Sequence[Instance]
) -> tuple[StreamSizing, dict[str, int]]:
    """Eq. 2-5 for an ``lsc`` master: its split, and each worker GPU's ``K_i``
    (full-layer master blocks in its ``stream_bytes``)."""
    card, b = master.card, master.cfg.block_tokens
    full = layer_block_bytes(card, b) * card.layers
    workers = [i for i in instances if i.role == "worker"]
    if master.lsc_shared:  # C_worker: the elastic region the worker lends at the start
        k = {i.cfg.gpu: int(lent_bytes(i, master) // full) for i in workers}
    else:
        k = {i.cfg.gpu: int(i.stream_bytes // full) for i in workers}
    if master.lsc_slots:
        return size_from_blocks(master.lsc_slots, list(k.values()), card.layers), k
    return master_sizing(master.cfg.gpu_blocks, card.layers, list(k.values())), k


def start_lending(instances: Sequence[Instance], engines: list[Engine]) -> dict[str, Lending]:
    """A :class:`~sim.serving.execute.lending.Lending` for each elastic worker that lends
    to the run's master (by instance name), started on the machine's clock."""
    roles = [i.role for i in instances]
    if "master" not in roles:
        return {}
    master = engines[roles.index("master")]
    peer = [t for t in master.mgr.tiers if t.name == "peer"]
    if not peer:
        return {}
    table, out = MasterBlockTable(), {}
    for inst, e in zip(instances, engines, strict=True):
        if inst.role == "worker" and inst.elastic is not None and inst.lend_bytes > 0:
            lent = gpu_blocks(inst.lend_bytes, inst.card, inst.cfg.block_tokens)
            out[inst.name] = lend = Lending(e, master, peer[0], table, inst.elastic, lent, engines)
            region = master.stream.region if master.stream is not None else None
            if region is not None:  # the region starts from the MEU-rounded lend
                lend.region = region
                region.set_lent(inst.cfg.gpu, peer[0].capacity[lend.dev])
            lend.start()
    return out


def lending_stats(lending: Lending) -> dict[str, float]:
    """What one worker's elastic cache did over the run."""
    return {"resizes": len(lending.resizes), "resize_copied_gb": lending.copied_bytes / 1e9,
            "lent_blocks_end": lending.cache.lent_units * lending.cache.p.meu_worker}  # fmt: skip


class PeerHbm:
    """Charges a GPU-to-GPU copy's bytes to both endpoint GPUs' HBM, and its NCCL
    kernels' ``sm_share`` of their SMs for its time (module docstring): ``Mover.on_copy``
    of every engine on the machine."""

    def __init__(self, machine: Machine, sm_share: float = 0.0):
        if not 0 <= sm_share < 1:
            raise ValueError(f"copy_sm_share must be in [0, 1), got {sm_share}")
        self.ops = OnlineOps(machine, keep_plan=False)
        self.gpus = frozenset(machine.profile.gpu_names)
        self.sm_share = sm_share
        self.bytes: dict[str, float] = {}  # GPU -> bytes charged (read or written)
        self.sm_s: dict[str, float] = {}  # GPU -> GPU-seconds its SMs were held

    def __call__(self, src: str, dst: str, nbytes: int) -> None:
        if src not in self.gpus or dst not in self.gpus or nbytes <= 0:
            return
        m = self.ops.machine
        held = 0.0
        if self.sm_share > 0:  # the copy's time alone on its route, at the share
            alone_s = nbytes / min(m.net.capacity[r] for r in m.route(src, dst))
            held = self.sm_share * alone_s
        for gpu in (src, dst):  # read on one, write on the other
            self.ops.submit("compute", "", gpu, hbm_bytes=float(nbytes), tag="peer_hbm")
            self.bytes[gpu] = self.bytes.get(gpu, 0.0) + nbytes
            if held:
                m.gpu_net.start([(m.gpu_res[gpu], 1.0)], held, cap=self.sm_share)
                self.sm_s[gpu] = self.sm_s.get(gpu, 0.0) + held


def charge_peer_copies(engines: Sequence[Engine], sm_share: float = 0.0) -> PeerHbm:
    """One :class:`PeerHbm` on the engines' machine, hooked to each one's mover."""
    charge = PeerHbm(engines[0].ops.machine, sm_share)
    for e in engines:
        e.offload.mover.on_copy = charge
    return charge


def run_instances(
    profile: HardwareProfile,
    instances: Sequence[Instance],
    stats: dict | None = None,
    copy_sm_share: float = 0.0,
) -> dict[str, ServingRecords]:
    """Serve every instance's requests together; records by instance name.
    ``stats`` (if given) gets each elastic worker's :func:`lending_stats`;
    ``copy_sm_share``: the SMs an NVLink copy holds on each end (:class:`PeerHbm`)."""
    engines = build_instances(profile, instances)
    lendings = start_lending(instances, engines)
    charge = charge_peer_copies(engines, copy_sm_share)
    for e in engines:
        e.start()
    with relaxed_gc():
        engines[0].env.run()
    if stats is not None:
        stats.update({name: lending_stats(x) for name, x in lendings.items()})
        stats["peer_hbm_gb"] = {g: b / 1e9 for g, b in sorted(charge.bytes.items())}
        if charge.sm_share:
            stats["peer_sm_s"] = dict(sorted(charge.sm_s.items()))
        for inst, e in zip(instances, engines, strict=True):
            if e.stream is not None:
                stats[f"{inst.name}_lsc"] = {"n_rc": e.stream.n_rc, "n_lsc": e.stream.n_lsc,
                                             "loaded_gb": e.stream.loaded / 1e9,
                                             "stored_gb": e.stream.stored / 1e9,
                                             "iterations": e.stream.iterations}  # fmt: skip
    return {inst.name: e.collect() for inst, e in zip(instances, engines, strict=True)}


def split_by_model(table: pa.Table, models: Sequence[str]) -> dict[str, pa.Table]:
    """The rows of a request table with a ``model`` column, one table per model
    of ``models`` (a row naming another model is an error: no instance serves it)."""
    if "model" not in table.schema.names:
        raise ValueError("the request table has no 'model' column to dispatch on")
    col = np.asarray(table.column("model").to_pylist(), dtype=object)
    unknown = sorted(set(col) - set(models))
    if unknown:
        raise ValueError(f"no instance serves model(s) {unknown}")
    meta = table.schema.metadata
    out = {}
    for m in models:
        rows = table.take(pa.array(np.flatnonzero(col == m)))
        out[m] = rows.drop_columns(["model"]).replace_schema_metadata(meta)
    return out
