"""Tensor-parallel serving (``tp: N``): one rank of Megatron-style TP, simulated exactly.

**The mechanism** (Megatron-LM, Shoeybi et al. 2019, §3; vLLM's
``ColumnParallelLinear``/``RowParallelLinear``): each of the N ranks (GPUs
``gpu0..gpu{N-1}`` of the profile) holds 1/N of every weight matrix (q/o by
query heads, k/v by KV heads, gate/up/down by the MLP width, the embedding
and output head by vocabulary rows) and 1/N of every layer's KV heads, so it
does 1/N of every layer's FLOPs and HBM traffic.  When the model has fewer KV
heads than ranks (N > kv_heads), each rank keeps one KV head, replicated
N / kv_heads times, as vLLM does (``QKVParallelLinear``: "replicate KV heads
when tp_size > num_kv_heads").  Each layer ends its attention and its MLP
with an all-reduce of the layer's activations, ``tokens x hidden x dtype``
bytes (the message); vLLM does not overlap it with compute.  kvtier simulates
a layer's all-reduces after each iteration's compute as a copy from ``gpu0``
to its neighbour ``gpu1`` over NVLink, so they hold the rank's NVLink port and
share it (max-min) with any KV copy on that port.  How long they last alone
comes from one of two sources, as the GPU step time does (:mod:`sim.hw.measured`):

**Measured** (the step is timed by aiconfigurator-core on a GPU the library
measured, not a derived sibling card): the library's measured all-reduce of
the message at ``tp`` ranks, :meth:`sim.hw.measured.MeasuredStep.allreduce_ms`
(for vLLM the table ``systems/data/<system>/comm/vllm/<version>/
custom_allreduce_perf.parquet``: vLLM's all-reduce as served under CUDA
graphs), ``T`` seconds for the call's ``2 x layers`` all-reduces.  The copy
carries ``(T - lat) x r`` bytes, ``r`` the achievable rate of the route
``gpu0 -> gpu1`` (its narrowest link: 450 x 0.85 = 382.5 GB/s on an H100's
NVLink port) and ``lat`` the route's latency (0: no profile cites an NVLink
latency), so alone it lasts ``lat + (T - lat) x r / r = T``, the measured time
exactly; beside a KV copy on the port it gets its max-min share and stretches
as a transfer holding the port would.  Its bytes are the port occupancy the
measurement implies, not the ring's wire bytes (:func:`allreduce_bytes`); the
plan's op says so by its ``allreduce`` tag.  The alternative, the wire bytes
at ``r`` plus the rest of ``T`` as a fixed latency, has no non-negative
latency where the measured all-reduce beats ``r``: Llama-3.1-70B's
8,192-token message at tp 8 is 1.75 x 134.2 MB = 234.9 MB a rank on the
wire, 0.614 ms at 382.5 GB/s, where vLLM 0.24.0's table on h100_sxm gives
0.577 ms (407 GB/s, 0.90 of NVLink's 450).  Occupancy overstates how much of
the port a latency-bound decode all-reduce holds (4.5 us at tp 2 for a 16 KiB
message): a KV copy on the same port would stretch it, where vLLM's one-shot
kernel is bound by its barriers; no shipped design moves KV over NVLink with
``tp > 1``.

**Roofline** (any other GPU): NCCL's ring all-reduce.  A ring sends and
receives ``2 (N-1)/N`` of the message per rank (reduce-scatter then
all-gather, N-1 steps each: Patarasuk & Yuan, "Bandwidth optimal all-reduce
algorithms for clusters of workstations", JPDC 2009; NCCL's "busbw" = algbw x
2(N-1)/N, NCCL tests' PERFORMANCE.md), :func:`allreduce_bytes`, copied at the
route's rate and followed by its **latency term**, NCCL's own cost model
(``src/graph/tuning.cc``, ``ncclTopoTuneModel``): ``nsteps = 2 (N-1)`` steps,
``baseLat + nsteps x hwLat``, with, for the ring over NVLink and the LL
protocol NCCL picks for small messages, ``baseLat`` = 3.6 us and ``hwLat``
= 0.47 us a step (NVIDIA/nccl, tuning.cc, commit 01afd20a: the
``baseLat``/``hwLat`` tables, "Latencies in us").  Llama-3.1-70B (80 layers,
2 all-reduces each) pays 160 x (3.6 + 2 (N-1) x 0.47) us of it a decode step,
0.73 ms at N = 2, 1.03 ms at N = 4 and 1.63 ms at N = 8 (``test_serving_tp``).
The LL protocol's lower bandwidth (NCCL: busBw / 4) is not modelled.  TP over
PCIe only is refused (the ring would share the KV path's switches, which the
per-rank view below does not model).

*Which regime the ring stands for.*  vLLM (``vllm/distributed/
device_communicators/custom_all_reduce.py``, ``CustomAllreduce``) runs its own
kernel at 2, 4, 6 or 8 ranks in one node, fully NVLink-connected (or 2 PCIe
GPUs), for messages under ``max_size`` = 8 MiB (``should_custom_ar``; less
with symmetric memory); larger messages go to NCCL.  The kernel
(``csrc/custom_all_reduce.cuh``, ``CustomAllreduce::allreduce``) is one-shot
(each rank reads all N-1 peers' whole buffers between two barriers) at 2
ranks always and, fully connected, under 512 KiB at up to 4 ranks or 256 KiB
at up to 8; two-shot (reduce-scatter then all-gather, the ring's ``2 (N-1)/N``
bytes) above.  A decode's messages (16 KiB a token at hidden 8,192) are
one-shot, whose latency barely grows with N; the ring model stands for NCCL's
regime, the prefill messages of 8 MiB and more (1,024 tokens at hidden 4,096).
Against the covered GPUs' measured vLLM tables (``analysis/tp_allreduce.py``;
docs/compute-time.md, "The all-reduce measured"; the ring at each system's
NVLink figure x 0.85), one ring all-reduce is 0.31-1.18x of the measured at
8 MiB and more: 0.59-1.18x on H100/H200 SXM (0.59-0.80x at tp 2, where the
measured moves the ring's bytes at 0.41-0.67 of NVLink, not the profile's
0.85; 0.72-0.90x at tp 4; 0.92-1.18x at tp 8), 0.42-0.85x on A100,
0.31-0.87x on B200.  For a decode's one-token message
it is 0.64-2.00x: on H100/H200 0.98-1.04x at tp 2, 1.34-1.35x at tp 4 and
1.93-2.00x at tp 8 (NCCL's ring latency grows with the steps, the one-shot
kernel's barely does), 0.86-1.62x on A100, 0.64-1.30x on B200.

**Why one rank is enough.**  The ranks run in lock-step: every iteration
each rank computes the same batch on its shard, loads and stores the same
blocks' 1/N slices, and waits for the others at every all-reduce.  Their
demands on every shared resource are therefore identical and simultaneous,
and under max-min fair sharing (:mod:`sim.hw.flownet`) N identical flows on
a resource get exactly 1/N of it each, or less only where another resource
of their own path binds first, which the single rank sees the same way.  So
rank 0 alone, on a machine where every *shared* resource has the capacity its
share gives it, moves exactly what it moves among the N.  :func:`rank_profile`
builds that machine: every DRAM module and SSD (each rank's KV slice of a
block lives on every tier device) keeps 1/N of its capacity, bandwidth and
IOPS (and of its queue); the CPU keeps 1/N of its cores; every link keeps
1/c of its bandwidth, c = the number of ranks whose host paths (to every
DRAM module and SSD) cross it: ``dram0.bus`` and ``ssdK.pcie`` 1/N, a PCIe
switch uplink shared by two GPUs 1/2, a GPU's own x16 link and NVLink port
1/1.  This is exact while the ranks' streams stay symmetric; it would not be
for asymmetric placements (a device serving only some ranks), which no
design here makes.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hwprofiles import HardwareProfile
from sim.hw.machine import Machine
from sim.models import ModelCard
from sim.registry import Unsupported

__all__ = [
    "TensorParallel", "allreduce_bytes", "allreduce_latency_s", "rank_card", "rank_kv_heads",
    "rank_profile",
]  # fmt: skip

# NCCL's ring all-reduce latency over NVLink, LL protocol (module docstring): seconds
NCCL_BASE_LAT_S = 3.6e-6  # baseLat[Ring][LL]
NCCL_STEP_LAT_S = 0.47e-6  # hwLat[NVLINK][Ring][LL], per step


def rank_kv_heads(card: ModelCard, tp: int) -> int:
    """KV heads one rank holds: ``kv_heads / tp``, or 1 (replicated) when tp > kv_heads."""
    if tp <= card.kv_heads:
        if card.kv_heads % tp:
            raise Unsupported(f"tp {tp} does not divide {card.name}'s {card.kv_heads} KV heads")
        return card.kv_heads // tp
    if tp % card.kv_heads:
        raise Unsupported(f"tp {tp} is not a multiple of {card.name}'s {card.kv_heads} KV heads")
    return 1


def rank_card(card: ModelCard, tp: int) -> ModelCard:
    """The share of ``card`` one of ``tp`` ranks holds and computes (module docstring)."""
    if tp == 1:
        return card
    for what, n in (("query heads", card.q_heads), ("MLP width", card.intermediate_size)):
        if n % tp:
            raise Unsupported(f"tp {tp} does not divide {card.name}'s {what} ({n})")
    kv = rank_kv_heads(card, tp)
    vocab = math.ceil(card.vocab_size / tp)
    emb = vocab * card.hidden_size * (1 if card.tied_embeddings else 2)
    # replicated KV heads: each rank also holds the k/v projections of its copy
    extra_kv = 2 * card.hidden_size * card.head_dim * (kv - card.kv_heads / tp)
    layer = card.layer_params / tp + extra_kv
    total = (card.layers * layer + emb) / 1e9
    return dataclasses.replace(
        card, name=f"{card.name} (tp {tp} rank)", q_heads=card.q_heads // tp, kv_heads=kv,
        intermediate_size=card.intermediate_size // tp, vocab_size=vocab, params_total_b=total,
        params_active_b=card.params_active_b * total / card.params_total_b,
    )  # fmt: skip


def allreduce_bytes(card: ModelCard, tokens: int, tp: int, layers: int = 1) -> float:
    """Bytes one rank sends (and receives) for ``layers`` layers' all-reduces of
    ``tokens`` tokens: 2 per layer x ``2 (tp-1)/tp`` x tokens x hidden x dtype."""
    return layers * 2 * 2 * (tp - 1) / tp * tokens * card.hidden_size * card.dtype_bytes


def allreduce_latency_s(tp: int, count: int = 1) -> float:
    """Latency of ``count`` ring all-reduces over ``tp`` ranks (NCCL's model):
    ``count x (baseLat + 2 (tp-1) x hwLat)``; 0 for one rank."""
    if tp <= 1:
        return 0.0
    return count * (NCCL_BASE_LAT_S + 2 * (tp - 1) * NCCL_STEP_LAT_S)


def _host_links(m: Machine, profile: HardwareProfile, gpus: Sequence[str]) -> Counter:
    """Link name -> how many of the ranks on ``gpus`` have host paths (to every DRAM
    module and SSD, both directions) that cross it."""
    count: Counter = Counter()
    for gpu in gpus:
        used = set()
        for dev in (*profile.dram_names, *profile.ssd_names):
            for a, b in ((gpu, dev), (dev, gpu)):
                used.update(n.rstrip("<>") for n in m.route_names(a, b))
        count.update(used)
    return count


def rank_profile(
    profile: HardwareProfile, tp: int, groups: Sequence[Sequence[str]] | None = None
) -> HardwareProfile:
    """The machine one rank of ``tp`` sees: each shared resource at its share.

    ``groups``: the GPUs of each tensor-parallel instance on the machine (several
    behind a router: :mod:`sim.scenarios.serving_routed`), rank 0 first; default one
    instance on ``gpu0..gpu{tp-1}``.  Only each instance's rank 0 is simulated, so a
    link its ranks' host paths cross ``c`` times keeps ``1/c`` of its bandwidth; the
    rank 0s of several instances then share it in the flow network as their ``c``
    ranks each would (a switch uplink under two 2-GPU instances: 4 real flows at 1/4
    each, 2 rank-0 flows on a half link).  That holds when every instance crossing a
    link crosses it with as many ranks (a placement whose groups align with the
    switches); a link crossed by one instance's 2 ranks and another's 1 is refused."""
    if tp == 1:
        return profile
    if tp > profile.gpu.count:
        have = profile.gpu.count
        raise Unsupported(f"tp {tp} needs {tp} GPUs, profile {profile.name} has {have}")
    groups = [list(profile.gpu_names[:tp])] if groups is None else [list(g) for g in groups]
    m = Machine(profile)
    kinds = {ln.name: ln.kind for ln in profile.topology.links}
    crossings: dict[str, set[int]] = {}
    for g in groups:
        ring = m.route_names(g[0], g[1])
        if any(kinds[n.rstrip("<>")] != "nvlink" for n in ring):
            raise Unsupported(
                f"tp {tp}: no NVLink path between {g[0]} and {g[1]} on {profile.name}"
            )
        for name, c in _host_links(m, profile, g).items():
            crossings.setdefault(name, set()).add(c)
    uneven = sorted(n for n, cs in crossings.items() if len(cs) > 1)
    if uneven:
        raise Unsupported(f"tp {tp}: the instances cross {uneven[0]} with unequal rank counts")
    count = {n: cs.pop() for n, cs in crossings.items()}
    links = tuple(
        dataclasses.replace(ln, gbps=ln.gbps / count[ln.name]) if count.get(ln.name, 1) > 1 else ln
        for ln in profile.topology.links
    )
    dram = tuple(
        dataclasses.replace(d, capacity_gib=d.capacity_gib / tp, gbps=d.gbps / tp)
        for d in profile.dram
    )
    ssds = tuple(_ssd_share(s, tp) for s in profile.ssds)
    cpu = dataclasses.replace(profile.cpu, cores=profile.cpu.cores / tp)
    return dataclasses.replace(
        profile, name=f"{profile.name} (tp {tp} rank)", dram=dram, ssds=ssds, cpu=cpu,
        topology=dataclasses.replace(profile.topology, links=links),
    )  # fmt: skip


def _ssd_share(s: Any, tp: int) -> Any:
    return dataclasses.replace(
        s, capacity_gib=s.capacity_gib / tp, read_gbps=s.read_gbps / tp,
        write_gbps=s.write_gbps / tp, read_iops=s.read_iops / tp, write_iops=s.write_iops / tp,
        max_queue_depth=max(1, s.max_queue_depth // tp),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TensorParallel:
    """Rank 0's all-reduces: a copy to ``peer`` after compute (module docstring),
    timed by the library's measured all-reduce where ``measured`` is set (a
    :class:`sim.hw.measured.MeasuredStep` of the GPU the library measured), by
    NCCL's ring (:func:`allreduce_bytes`, :func:`allreduce_latency_s`) otherwise."""

    tp: int
    card: ModelCard  # the full model (its hidden size sets the message)
    gpu: str = "gpu0"
    peer: str = "gpu1"
    measured: Any = None  # MeasuredStep whose all-reduces time these, or None: the ring

    def timed_by(self, step: Any) -> TensorParallel:
        """This rank with its all-reduces timed by ``step``, the run's measured step
        time (None: the roofline); a derived sibling card (``step.peaks``) keeps
        the ring: the library measured its all-reduce on the other card's fabric."""
        measured = step if step is not None and step.peaks is None else None
        return dataclasses.replace(self, measured=measured)

    def message(self, machine: Machine, tokens: int, layers: int) -> tuple[int, float]:
        """``layers`` layers' all-reduces of ``tokens`` tokens as the copy from
        :attr:`gpu` to :attr:`peer` that carries them on ``machine`` and the latency
        that follows it: (bytes, seconds) (module docstring: measured or the ring)."""
        if self.measured is not None:
            rate = min(machine.net.capacity[r] for r in machine.route(self.gpu, self.peer))
            secs = self.measured.allreduce_ms(tokens) / 1e3 * 2 * layers
            return round((secs - machine.route_latency_s(self.gpu, self.peer)) * rate), 0.0
        nbytes = int(allreduce_bytes(self.card, tokens, self.tp, layers))
        return nbytes, allreduce_latency_s(self.tp, 2 * layers)

    def alone_s(self, machine: Machine, tokens: int, layers: int) -> float:
        """How long :meth:`allreduce` of ``tokens`` tokens over ``layers`` layers lasts
        with nothing else on the route: its latency, :meth:`message`'s bytes at the
        route's rate, then the message's latency (what a quick estimate prices,
        :func:`sim.limits.offered_load`)."""
        nbytes, lat = self.message(machine, tokens, layers)
        rate = min(machine.net.capacity[r] for r in machine.route(self.gpu, self.peer))
        return machine.route_latency_s(self.gpu, self.peer) + nbytes / rate + lat

    def allreduce(self, ops: Any, after: int, tokens: int, layers: int, step: int, layer: int):
        """Submit the all-reduces of ``layers`` layers after op ``after``: (op, event
        that fires when they have ended)."""
        nbytes, lat = self.message(ops.machine, tokens, layers)
        op, ev = ops.submit(
            "copy", self.gpu, self.peer, nbytes=nbytes, depends_on=[after], step=step,
            layer=layer, tag="allreduce",
        )  # fmt: skip
        if lat <= 0:
            return op, ev
        return op, ops.env.process(_then_wait(ops.env, ev, lat, op))


def _then_wait(env: Any, ev: Any, seconds: float, op: int):
    """A simpy process: wait for ``ev``, then ``seconds``; its value is ``op``."""
    yield ev
    yield env.timeout(seconds)
    return op


def rank_params(p: Any) -> Any:
    """Serving params ``p`` as one rank of ``p.tp`` sees them: ``design_params``'
    ``cpu_gib``/``ssd_gib`` are the machine's KV capacities, 1/N of each per rank."""
    if p.tp == 1:
        return p
    dp = {k: (v / p.tp if k in ("cpu_gib", "ssd_gib") else v) for k, v in p.design_params.items()}
    return dataclasses.replace(p, design_params=dp)
