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
bytes; a ring all-reduce sends and receives ``2 (N-1)/N`` of those bytes per
rank (reduce-scatter then all-gather, N-1 steps each: Patarasuk & Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations",
JPDC 2009; NCCL's "busbw" = algbw x 2(N-1)/N, NCCL tests' PERFORMANCE.md).
The all-reduce is simulated as a copy of those bytes from ``gpu0`` to its
ring neighbour ``gpu1`` over NVLink after each iteration's compute (vLLM
does not overlap it with compute), followed by its **latency term**, NCCL's
own cost model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``): a ring
all-reduce takes ``nsteps = 2 (N-1)`` steps, and its latency is
``baseLat + nsteps x hwLat``, with, for the ring over NVLink and the LL
protocol NCCL picks for small messages, ``baseLat`` = 3.6 us and ``hwLat``
= 0.47 us a step (NVIDIA/nccl, tuning.cc, commit 01afd20a: the
``baseLat``/``hwLat`` tables, "Latencies in us").  Decode all-reduces are
small (8 sequences x 8192 x 2 B = 128 KiB), so the latency is their
cost: Llama-3.1-70B (80 layers, 2 all-reduces each) pays
160 x (3.6 + 2 (N-1) x 0.47) us a decode step, 0.73 ms at N = 2, 1.03 ms at
N = 4 and 1.63 ms at N = 8 (``test_serving_tp``), against a 4-rank H20
decode step of about 10 ms (35 GB of weights a rank at 4 TB/s).  The LL
protocol's lower bandwidth (NCCL: busBw / 4) is not modelled: the copy
moves at NVLink's rate.  TP over PCIe only is refused (the ring would share
the KV path's switches, which the per-rank view below does not model).

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
    """Rank 0's all-reduces: a copy of :func:`allreduce_bytes` to ``peer`` after compute."""

    tp: int
    card: ModelCard  # the full model (its hidden size sets the message)
    gpu: str = "gpu0"
    peer: str = "gpu1"

    def allreduce(self, ops: Any, after: int, tokens: int, layers: int, step: int, layer: int):
        """Submit the all-reduces of ``layers`` layers after op ``after``: (op, event
        that fires when the copy has ended and the all-reduces' latency has passed)."""
        nbytes = allreduce_bytes(self.card, tokens, self.tp, layers)
        op, ev = ops.submit(
            "copy", self.gpu, self.peer, nbytes=int(nbytes), depends_on=[after], step=step,
            layer=layer, tag="allreduce",
        )  # fmt: skip
        lat = allreduce_latency_s(self.tp, 2 * layers)
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
