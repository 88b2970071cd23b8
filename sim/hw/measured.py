"""GPU step time from measured kernel tables (aiconfigurator-core), roofline elsewhere.

kvtier's default GPU time is a roofline (:meth:`sim.hw.machine.Machine.gpu_seconds`:
``max(flops / (peak x tensor efficiency), bytes / (HBM x hbm efficiency))``, the
efficiencies the profile's assumptions).  ``gpu_time: measured`` (a serving
scenario's key, :class:`GpuTime`) times each engine iteration from NVIDIA's
``aiconfigurator-core`` instead: per framework and version, its wheel ships
kernel tables measured on real GPUs (GEMM, context and generation attention,
NCCL, MoE) and a compiled per-step estimator, the one NVIDIA Dynamo's mocker
uses for its step times.

**What the library offers** (aiconfigurator-core 0.12.0, read in its
site-packages: ``sdk/engine.py``, ``sdk/rust_engine_step.py``,
``sdk/backends/base_backend.py``, ``sdk/perf_database.py``,
``systems/query_versions.yaml``):

* ``EngineHandle.compile(hf_id, system, framework, backend_version=None)``
  builds the model's op lists from its bundled ``model_configs/<org>--<name>_config.json``
  and binds them to the tables of ``systems/data/<system>/<op>/<framework>/<version>``
  (1.3 s for Llama-3.1-8B on this machine, 0.01 s for the next model once a
  system's tables are loaded).  A version must be one of the *queryable slots*
  of ``query_versions.yaml`` (for h100_sxm, vllm: ``0.24.0`` current and
  ``0.27.0`` next; for a100_sxm, vllm: ``0.14.0``); any other raises
  ``ValueError``.  ``systems/h100_pcie.yaml``, ``a100_pcie.yaml``, ``l4.yaml`` and
  ``a30.yaml`` are estimate-only (no data directory): not measured.
* Every latency is in milliseconds.  ``predict_prefill_latency(bs, isl,
  prefix)``: a whole prefill of ``bs`` sequences of ``isl`` tokens, ``prefix``
  of them cached (``isl`` includes the prefix; ``prefix >= isl`` raises).
  ``decode_step_latency(bs, isl, osl)``: one decode step of ``bs`` sequences
  at ``isl + osl // 2 + 1`` keys.
* ``mixed_step_breakdown(ctx_tokens, gen_tokens, isl, osl, prefix)`` returns
  (total, shared non-attention, context attention, decode attention) of one
  continuous-batching step in three passes (the Python
  ``_get_mix_step_latency`` it mirrors): (1) every non-attention op (GEMMs,
  norms, activations, the output head) over ``ctx_tokens + gen_tokens`` tokens
  as one sequence; (2) context attention of ``ceil(ctx_tokens / isl)``
  sequences of ``isl`` tokens after ``prefix`` cached ones, divided by
  ``ceil(isl / ctx_tokens)`` (a chunked prefill's attention spread evenly over
  its chunks; in 0.12.0 the divisor counts the whole ``isl``'s chunks even when
  ``prefix > 0``, so a 512-token chunk after 130,560 cached tokens gets 1/256
  of its attention, 0.21 ms of 54 ms); (3) decode attention of ``gen_tokens``
  sequences at ``isl + osl // 2 + 1`` keys.  ``mixed_step_latency`` is the
  total (3-15 us a call here).
* A shape its tables lack raises ``PerfDataNotAvailableError`` (gpt-oss-20b on
  a100_sxm: no sliding-window attention).  Loading a database logs warnings
  ("low-fidelity fallback rows") through :mod:`logging`; they are silenced here.

**One kvtier iteration** (:meth:`sim.serving.execute.engine.Engine._iterate`:
prefill chunks of ``c_i`` new tokens after ``p_i`` cached ones, and ``n``
decodes after ``k_j`` cached tokens each) is priced from the three components,
each asked for with arguments that make its pass exactly that part:

* shared: ``mixed_step_breakdown(T, 0, T, 1, 0)[1]``, ``T = sum c_i + n``: every
  token through the GEMMs once, as one batch (what batching buys);
* each chunk: ``mixed_step_breakdown(p + c, 0, p + c, 1, p)[2]``: one sequence
  of ``p + c`` tokens, ``p`` cached, done in one chunk (``ceil((p + c) / (p +
  c)) = 1``: nothing amortised), i.e. the chunk's ``c`` queries over its ``p +
  c`` keys.  Each chunk is its own query (vLLM runs one varlen kernel for the
  whole batch: a kernel floor per extra chunk is an overstatement);
* decodes: ``mixed_step_breakdown(0, n, k, 1, 0)[3]`` at the batch's mean
  context ``k = round(sum k_j / n)`` (the tables are per batch and length;
  decode attention reads every key once, so the mean carries the batch's
  total): ``k + 1`` keys each, the new token's own included, as kvtier counts.

So a lone prefill is ``predict_prefill_latency(1, p + c, p)`` and a decode-only
batch ``mixed_step_latency(0, n, k, 1, 0)`` (the tests hold both).

**One sparse-decode layer** (the ``sparse_decode``, ``swarm`` and ``kvdrive``
kinds: per (step, layer) one GPU op over the batch, each sequence attending its
selected entries, gathered into HBM, and its new token) is
:func:`decode_layer_seconds`: the decode-only step of the batch at the entries
each sequence attends (``k_j`` = its selection; KVDrive's less those MagicPIG
attends on the CPU), divided by the model's layers.  The library has no call
for a sparse attention over ``k`` gathered entries; its generation attention
at ``k`` keys is used (an assumption: the gathered entries are contiguous in
HBM by the time attention runs, as the designs copy them into a buffer; a
kernel reading them scattered in place would be slower), and the step's
GEMMs and output head are spread evenly over the layers.

**Tensor parallelism** (a serving run's ``tp: N``, :mod:`sim.serving.execute.tp`:
kvtier simulates rank 0 of N, its compute on its shard and, after it, each
layer's two all-reduces as a copy over NVLink).  The estimator compiled with
``tp_size=N`` (``EngineHandle.compile``'s keyword, passed to
``build_model_config``) times one rank: its GEMMs at 1/N of the weights, its
attention at 1/N of the heads, and, among the shared ops, the model's
all-reduces from the library's measured collective tables
(``systems/data/<system>/comm/<framework>/<version>``: ``CustomAllReduce``
ops named ``context_ar_1`` and ``context_ar_2``, one of each a layer, and
``context_embedding_ar``, one an iteration, for the vocabulary-parallel
embedding; ``context_p2p`` is pipeline parallelism's, 0 at ``pp = 1``).  kvtier
takes the rank's measured step *less* the two per-layer all-reduces
(:data:`LAYER_ALLREDUCES` x layers x :meth:`MeasuredStep.allreduce_ms`, the
same op evaluated alone: ``tests/sim/test_measured_tp.py`` holds it equal to
``context_ar_1 + context_ar_2`` of ``mixed_step_breakdown_per_op``), since
its all-reduces are simulated beside the compute, whose bytes share NVLink
with the run's other flows; on the GPU the library measured they last
:meth:`MeasuredStep.allreduce_ms` alone (a derived sibling card keeps
kvtier's NCCL ring model: the tables measured the other card's fabric).  The
embedding's all-reduce, which kvtier does not simulate, stays in the measured
step.  At ``tp = 1`` the library's all-reduce ops are 0 and none is
subtracted.  A MoE model is not measured at ``tp > 1``: the library requires
``moe_tp x moe_ep = tp`` and then folds the layer's all-reduce into its MoE
dispatch ops (``context_moe_pre_dispatch``/``post_dispatch``), which cannot
be told apart from their compute; ``auto`` keeps the roofline for it, saying so.

**Which GPUs** (:data:`SYSTEMS`): a profile's ``gpu.model`` is matched against
one row per GPU the database measured; a PCIe card whose SXM sibling is
measured derives from it by a stated rule (:data:`DERIVED`): the SXM's
measured time times the ratio of the two cards' rooflines for the same
iteration, datasheet peaks on both sides (the profile's ``bf16_tflops`` and
``hbm_gbps``, the library's ``bfloat16_tc_flops`` and ``mem_bw`` for the SXM)
and kvtier's FLOPs and HBM bytes of the iteration: a compute-bound prefill on
an H100 PCIe takes 989 / 756 = 1.31x the SXM's, a memory-bound decode 3350 /
2000 = 1.68x.  Every other GPU (H20, L20, RTX 4090, GB10) and every model the
library has no config for stays on the roofline, and the run says so
(:func:`resolve`'s source, written to ``run.json``).

**Which version** (:func:`default_version`): the framework's queryable version
nearest at or above the one the seeds ran (seed 004 s V-A: "vLLM v0.13.0";
h100_sxm and h200_sxm have 0.24.0, a100_sxm 0.14.0); SGLang and TRT-LLM, which
no seed names, take the system's current slot.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hwprofiles import HardwareProfile
from sim.models import ModelCard

PACKAGE = "aiconfigurator-core"

# the framework version each seed ran, which the default version is nearest to
SEED_VERSIONS = {"vllm": "0.13.0"}  # seed 004 s V-A: "We use vLLM v0.13.0"


class MeasuredError(ValueError):
    """A measured GPU time cannot be had as asked (one line, naming the key)."""


@dataclass(frozen=True)
class GpuTime:
    """Where a run's GPU step time comes from: ``mode`` roofline (the default),
    measured (``framework`` at ``version``, ``auto`` = :func:`default_version`;
    a GPU or model the tables lack is refused, naming it) or auto (measured
    where the tables have the GPU and model, else the roofline, and the run
    records why)."""

    mode: str = "roofline"
    framework: str = "vllm"
    version: str = "auto"
    why: str = ""  # why ``auto`` keeps the roofline for the whole run (a setting it cannot time)

    @classmethod
    def of(cls, params: Any) -> GpuTime:
        """The setting of a workload's params (``gpu_time``, ``framework``,
        ``framework_version``: serving, sparse_decode, swarm, kvdrive); ``auto``
        on a run the tables cannot time as a whole (:func:`unmeasurable`) is the
        roofline, saying why (``measured`` there is refused by the params' check)."""
        why = unmeasurable(params)
        if params.gpu_time == "auto" and why:
            return cls("roofline", params.framework, params.framework_version, why)
        return cls(params.gpu_time, params.framework, params.framework_version)


def unmeasurable(params: Any) -> str:
    """Why a run's step cannot come from the tables whatever its GPU and model
    ("" when it can): a layer stream cache (it times its own per-layer ops)."""
    if any(isinstance(i, dict) and i.get("lsc") for i in getattr(params, "instances", ())):
        return "a layer stream cache (lsc) times its own per-layer ops"
    return ""


@dataclass(frozen=True)
class System:
    """An aiconfigurator-core system a kvtier GPU model maps to."""

    pattern: str  # regex searched in the profile's gpu.model
    system: str  # the library's system name
    derived: bool  # a sibling card: the system's time times the roofline ratio
    source: str


# kvtier gpu.model -> aiconfigurator-core system; sources are paths in its 0.12.0 wheel, "data":
# systems/data/<system>/ holds measured gemm and attention tables for vllm, sglang and trtllm
SYSTEMS = (
    System(r"\bH100\b.*\bSXM", "h100_sxm", False, "systems/h100_sxm.yaml, data"),
    System(r"\bH100\b.*\bPCIe\b", "h100_sxm", True, "H100 SXM's tables, roofline ratio"),
    System(r"\bH200\b(?!.*\bNVL\b)", "h200_sxm", False, "systems/h200_sxm.yaml, data"),
    System(r"\bA100\b.*\bSXM", "a100_sxm", False, "systems/a100_sxm.yaml, data"),
    System(r"\bA100\b.*\bPCIe\b", "a100_sxm", True, "A100 SXM's tables, roofline ratio"),
    System(r"\bB200\b", "b200_sxm", False, "systems/b200_sxm.yaml, data"),
    System(r"\bGB200\b", "gb200", False, "systems/gb200.yaml, data"),
    System(r"\bL40S\b", "l40s", False, "systems/l40s.yaml, data"),
)  # fmt: skip
DERIVED = "scaled by the roofline ratio of the two cards' datasheet peaks"

# the library's per-layer all-reduce ops of a dense model at tp > 1 (sdk/models/llama.py:
# ops.CustomAllReduce("context_ar_1" / "context_ar_2", num_layers, hidden, tp)): two a
# layer, each one all-reduce of the iteration's tokens x hidden (MeasuredStep.allreduce_ms)
LAYER_ALLREDUCES = 2

# kvtier model card -> Hugging Face id of the library's model_configs/<org>--<name>_config.json
# (its shapes equal the card's: tests/sim/test_measured_gpu.py)
MODELS = {
    "Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    # seed 003's model: Llama-3-8B's shapes (equal to 3.1-8B's in every field the estimator
    # reads: tests/sim/test_measured_decode.py) with a larger RoPE theta, which no kernel's
    # time depends on; the library has no config of its own for it
    "Llama-3-8B-1048K": "meta-llama/Meta-Llama-3.1-8B",
    "Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "GPT-OSS-20B": "openai/gpt-oss-20b",  # the library models its MXFP4 experts as shipped
    "GPT-OSS-120B": "openai/gpt-oss-120b",
}


def system_of(gpu_model: str) -> System | None:
    """The row of :data:`SYSTEMS` matching a profile's ``gpu.model``, or None."""
    for row in SYSTEMS:
        if re.search(row.pattern, gpu_model):
            return row
    return None


def roofline_source(profile: HardwareProfile) -> str:
    eff = profile.efficiency
    return f"roofline (tensor efficiency {eff.tensor}, HBM efficiency {eff.hbm})"


def library_version() -> str:
    return importlib.metadata.version(PACKAGE)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The library's load-time warnings (logging) held back."""
    log = logging.getLogger("aiconfigurator_core")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


@functools.cache
def version_slots(system: str, framework: str) -> dict[str, str]:
    """The library's queryable versions of (system, framework): slot (current,
    previous, next) -> version; empty when it has no tables for them."""
    with _quiet():
        from aiconfigurator_core.sdk import perf_database  # noqa: PLC0415 (only when measured)

        return dict(perf_database.get_version_slots(system, framework) or {})


def queryable_versions(system: str, framework: str) -> tuple[str, ...]:
    """The versions the library accepts for (system, framework), oldest first."""
    from packaging.version import Version  # noqa: PLC0415 (a dependency of the library)

    return tuple(sorted(set(version_slots(system, framework).values()), key=Version))


def default_version(system: str, framework: str) -> str:
    """The queryable version nearest at or above the seeds' (the newest below it
    when none is above; the current slot for a framework no seed names)."""
    from packaging.version import Version  # noqa: PLC0415

    versions = queryable_versions(system, framework)
    if not versions:
        raise MeasuredError(f"framework: {framework} has no tables for {system}")
    seed = SEED_VERSIONS.get(framework)
    if seed is None:
        return version_slots(system, framework)["current"]
    above = [v for v in versions if Version(v) >= Version(seed)]
    return above[0] if above else versions[-1]


@functools.cache
def _handle(hf_id: str, system: str, framework: str, version: str, tp: int = 1) -> Any:
    """A compiled step estimator, one per (model, system, framework, version,
    tensor-parallel degree): one rank's step at ``tp > 1``."""
    with _quiet():
        from aiconfigurator_core.sdk.engine import EngineHandle  # noqa: PLC0415

        return EngineHandle.compile(hf_id, system, framework, backend_version=version, tp_size=tp)


class MeasuredStep:
    """One engine iteration's GPU seconds from a compiled step estimator (the
    composition in the module docstring), scaled by :data:`DERIVED` for a
    sibling card (``peaks``: the profile's and the measured card's (FLOP/s,
    bytes/s), or None); at ``tp > 1`` one rank's of ``card`` (the whole model),
    less the per-layer all-reduces kvtier simulates (module docstring)."""

    def __init__(
        self,
        handle: Any,
        source: str,
        peaks: tuple[tuple, tuple] | None = None,
        tp: int = 1,
        card: ModelCard | None = None,
    ):
        self.handle = handle
        self.source = source
        self.peaks = peaks
        self.tp = tp
        self.layers = card.layers if card is not None else 0
        self._allreduce = ""  # the library's all-reduce op, as its op-list JSON
        # the estimator's answers, kept (it is a pure function of its arguments): the
        # non-attention ms less the all-reduces by tokens, decode attention by
        # (sequences, mean context)
        self._linear: dict[int, float] = {}
        self._decode: dict[tuple[int, int], float] = {}
        if tp > 1:
            assert card is not None, "a tensor-parallel step needs its model's card"
            with _quiet():
                from aiconfigurator_core.sdk import operations  # noqa: PLC0415
                from aiconfigurator_core.sdk.engine import build_ops_json  # noqa: PLC0415

                op = operations.CustomAllReduce("allreduce", 1, card.hidden_size, tp)
                self._allreduce = build_ops_json([op])

    def allreduce_ms(self, tokens: int) -> float:
        """One all-reduce of ``tokens`` x hidden bf16 activations across the ``tp``
        ranks, ms, from the library's measured collective table: its
        ``CustomAllReduce`` op (the one its models put twice in every layer)
        evaluated alone (``EngineHandle.evaluate_ops_json``, 2 us a call); 0 at
        ``tp = 1``."""
        if self.tp == 1:
            return 0.0
        kw = {"is_context": True, "batch_size": 1, "s": 1, "x": tokens}
        return self.handle.evaluate_ops_json(self._allreduce, **kw)[0][1]

    def ms(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> float:
        """Milliseconds on the measured card: ``prefills`` (new tokens, cached
        before) and ``decodes`` (cached tokens before the new one)."""
        step = self.handle.mixed_step_breakdown
        n = len(decodes)
        total = sum(c for c, _ in prefills) + n
        ms = self._linear.get(total)
        if ms is None:
            ms = step(total, 0, total, 1, 0)[1]
            ms -= LAYER_ALLREDUCES * self.layers * self.allreduce_ms(total)
            self._linear[total] = ms
        for c, p in prefills:
            ms += step(p + c, 0, p + c, 1, p)[2]
        if n:
            key = (n, (sum(decodes) + n // 2) // n)
            attn = self._decode.get(key)
            if attn is None:
                attn = self._decode[key] = step(0, n, key[1], 1, 0)[3]
            ms += attn
        return ms

    def seconds(
        self,
        prefills: Sequence[tuple[int, int]],
        decodes: Sequence[int],
        flops: float,
        hbm_bytes: float,
    ) -> float:
        """Seconds of the iteration on the profile's GPU; ``flops`` and
        ``hbm_bytes`` (kvtier's count of its work) only weigh a derived card."""
        secs = self.ms(prefills, decodes) / 1e3
        if self.peaks is None:
            return secs
        (own_f, own_b), (ref_f, ref_b) = self.peaks
        return secs * max(flops / own_f, hbm_bytes / own_b) / max(flops / ref_f, hbm_bytes / ref_b)


def decode_layer_seconds(
    step: MeasuredStep | None, decodes: Sequence[int], flops: float, hbm_bytes: float, layers: int
) -> float:
    """One layer's GPU seconds of a decode step of ``len(decodes)`` sequences, the
    ``i``-th attending ``decodes[i]`` cached entries and its new token, as a plan's
    ``gpu_s``: the measured step (every layer and the output head) split evenly over
    the model's ``layers``, as the serving engine splits a layer-wise iteration; 0
    (the op's roofline) when ``step`` is None.  ``flops`` and ``hbm_bytes`` are one
    layer's (kvtier's count), weighing a derived card only."""
    if step is None:
        return 0.0
    return step.seconds((), decodes, flops * layers, hbm_bytes * layers) / layers


def _check_version(system: str, framework: str, version: str) -> str:
    versions = queryable_versions(system, framework)
    if version == "auto":
        return default_version(system, framework)
    if version not in versions:
        have = ", ".join(versions) or "none"
        raise MeasuredError(
            f"framework_version: {framework} {version} is not in {PACKAGE} "
            f"{library_version()}'s tables for {system} (it has: {have})"
        )
    return version


def system_step(card: ModelCard, system: str, gpu_time: GpuTime, tp: int = 1) -> MeasuredStep | str:
    """The measured step of ``card`` (the whole model; one rank of ``tp``) on the
    library's ``system`` (its own tables, nothing derived), or why there is none;
    an unknown framework version raises :class:`MeasuredError`."""
    version = _check_version(system, gpu_time.framework, gpu_time.version)
    hf_id = MODELS.get(card.name)
    lib = f"{PACKAGE} {library_version()}"
    if hf_id is None:
        return f"{card.name} is not in {lib}'s model configs"
    if tp > 1 and card.is_moe:
        return (f"{lib} folds {card.name}'s MoE all-reduces into its dispatch ops at tp > 1, "
                "where kvtier simulates them")  # fmt: skip
    try:
        handle = _handle(hf_id, system, gpu_time.framework, version, tp)
        handle.mixed_step_breakdown(1, 1, 1, 1, 0)  # a shape the tables lack raises here
    except Exception as exc:  # the library's own errors (PerfDataNotAvailableError, ...)
        return f"{lib} cannot time {card.name} on {system} ({str(exc).splitlines()[0][:120]})"
    at = f" tp {tp}" if tp > 1 else ""
    return MeasuredStep(
        handle, f"{lib} {gpu_time.framework} {version} {system}{at}", tp=tp, card=card
    )


def resolve(
    profile: HardwareProfile, card: ModelCard, gpu_time: GpuTime, tp: int = 1
) -> tuple[MeasuredStep | None, str]:
    """(the measured step time, or None for the roofline; the source that times
    the run's GPU compute, as ``run.json`` records it).  ``card`` is the whole
    model; at ``tp > 1`` the step is one rank's (module docstring)."""
    roof = roofline_source(profile)
    if gpu_time.mode == "roofline":
        return None, f"{roof}: {gpu_time.why}" if gpu_time.why else roof
    row = system_of(profile.gpu.model)
    step = (
        f"{profile.gpu.model} is not in {PACKAGE} {library_version()}'s systems"
        if row is None
        else system_step(card, row.system, gpu_time, tp)
    )
    if isinstance(step, str) or row is None:  # the tables lack the GPU or the model
        if gpu_time.mode == "measured":  # asked for by name: refused (auto falls back)
            covered = ", ".join(dict.fromkeys(s.system for s in SYSTEMS))
            raise MeasuredError(f"gpu_time: measured: {step} (it has {covered}; "
                                "gpu_time: auto keeps the roofline where it has none)")  # fmt: skip
        return None, f"{roof}: {step}"
    if not row.derived:
        measured = " (its measured all-reduces, as NVLink copies)" if tp > 1 else ""
        step.source += measured  # the all-reduces: sim.serving.execute.tp, TensorParallel.timed_by
        return step, step.source
    spec = system_spec(row.system)
    peaks = (
        (profile.gpu.bf16_tflops * 1e12, profile.gpu.hbm_gbps * 1e9),
        (float(spec["bfloat16_tc_flops"]), float(spec["mem_bw"])),
    )
    ring = " (NCCL ring all-reduces)" if tp > 1 else ""
    source = f"{step.source}, {DERIVED} to {profile.gpu.model}{ring}"
    return MeasuredStep(step.handle, source, peaks, tp, card), source


@functools.cache
def system_spec(system: str) -> dict:
    """The library's datasheet figures of ``system`` (its systems/<system>.yaml gpu block)."""
    with _quiet():
        from aiconfigurator_core.sdk import perf_database  # noqa: PLC0415

        return dict(perf_database.load_system_spec(system)["gpu"])


def where(profile: HardwareProfile) -> str:
    """Where ``profile``'s GPU step time can come from (``kvtier profiles show``)."""
    row = system_of(profile.gpu.model)
    roof = roofline_source(profile)
    lib = f"{PACKAGE} {library_version()}"
    if row is None:
        return f"{roof}: {profile.gpu.model} is not in {lib}'s systems"
    how = f"{lib}'s {row.system} tables" + (f", {DERIVED}" if row.derived else "")
    return f"{roof} by default; with gpu_time: measured, {how}"
