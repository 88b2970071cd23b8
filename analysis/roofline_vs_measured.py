"""kvtier's roofline GPU time against aiconfigurator-core's measured kernel tables.

``python -m analysis.roofline_vs_measured`` prices the same work both ways:

* **roofline**: what a kvtier run charges by default, the engine's iteration
  cost (:func:`sim.serving.policy.costs.iteration_cost`) at the profile's
  achievable peaks (:meth:`sim.hw.machine.Machine.gpu_seconds`, tensor x 0.75,
  HBM x 0.9: the profiles' assumptions);
* **measured**: what ``gpu_time: measured`` charges (:mod:`sim.hw.measured`,
  vllm at the version nearest seed 004's).

for prefills of batches of 1, 4, 16 and 64 sequences of 1K..128K tokens each
(one iteration, every prompt a chunk of its own) and decode steps at contexts
1K..128K and batches 1..64, for Llama-3.1-8B and Qwen3-32B.

**What fits.**  A point's KV (``batch x context x kv_bytes_per_token``) fits
the GPU when it is at most vLLM's default KV room, ``0.9 x HBM - weights``
(``gpu_memory_utilization``; :func:`sim.serving.build.default_gpu_kv_bytes`,
activations ignored).  A prefill that does not fit is skipped (no row): no
engine runs it on one GPU, and the tables would be extrapolated to a shape
they cannot have been measured at; :func:`markdown` lists the skipped points.
Decode steps beyond the HBM are kept, as the tables extrapolate them (the
tables time kernels, not capacity), and marked ``fits_hbm`` False in the CSV;
the range table gives the decode band both over all points and over those
that fit.

``library_ms`` is the library's own batched call for the point: a lone
prefill and a decode step equal kvtier's composition; a batched prefill does
not, as kvtier prices each prompt's attention as a kernel of its own where
the library looks the batch up in its batched attention table.

GPUs: every kvtier profile whose GPU the library measured (the H100 SXM of
``dgx-h100``; the H100 PCIe of ``h100-2dimm-2ssd`` only derives from it, so it
adds no measurement), then, marked ``(no profile)``, the other GPUs the
library measured, their roofline from the library's own datasheet figures
(``systems/<gpu>.yaml``: ``bfloat16_tc_flops``, ``mem_bw``, ``mem_capacity``)
at the same 0.75 and 0.9: the error band a roofline-only GPU (H20, L20, RTX
4090) carries is the spread of the ratio over all of them.

It writes every point to ``analysis/roofline_vs_measured.csv`` (beside this
script), draws the ratio against the context in ``analysis/roofline_vs_measured.png``
(:func:`plot`; ``--plot-only`` redraws it from the CSV) and prints the tables of
``docs/compute-time.md`` (markdown).
"""

from __future__ import annotations

import argparse
import numbers
import subprocess
import time
from pathlib import Path

import pandas as pd

from hwprofiles import list_profiles, load_profile
from sim.hw.machine import Machine
from sim.hw.measured import GpuTime, resolve, system_of, system_spec, system_step
from sim.models import ModelCard, get_model
from sim.serving.policy.costs import iteration_cost

MODELS = ("Llama-3.1-8B", "Qwen3-32B")
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
BATCHES = (1, 2, 4, 8, 16, 32, 64)
EXTRA_SYSTEMS = ("h200_sxm", "a100_sxm", "b200_sxm", "gb200", "l40s")  # no kvtier profile
TENSOR_EFF, HBM_EFF = 0.75, 0.9  # every kvtier profile's efficiency.tensor and .hbm
OUT = Path(__file__).with_suffix(".csv")
PNG = Path(__file__).with_suffix(".png")
PREFILL_BATCHES = (1, 4, 16, 64)
KV_SHARE = 0.9  # vLLM's default gpu_memory_utilization (sim.config.ServingParams)


def work(card: ModelCard, prefills: list, decodes: list) -> tuple[float, float]:
    """kvtier's (FLOPs, HBM bytes) of one iteration."""
    outputs = len(decodes) + len(prefills)
    layer, head = iteration_cost(card, prefills, decodes, outputs)
    total = layer * card.layers + head
    return total.flops, total.hbm_bytes


def points() -> list[tuple[str, int, int, list, list]]:
    """(phase, batch, context, prefills, decodes) of the grid."""
    out = [("prefill", b, c, [(c, 0)] * b, []) for b in PREFILL_BATCHES for c in CONTEXTS]
    out += [("decode", b, c, [], [c] * b) for b in BATCHES for c in CONTEXTS]
    return out


def kv_room(card: ModelCard, hbm_bytes: float) -> float:
    """Bytes of KV one GPU of ``hbm_bytes`` holds beside the weights (vLLM's default)."""
    return KV_SHARE * hbm_bytes - card.weight_bytes


def fits(card: ModelCard, batch: int, context: int, hbm_bytes: float) -> bool:
    """Whether ``batch`` sequences of ``context`` tokens have their KV in the GPU."""
    return batch * context * card.kv_bytes_per_token <= kv_room(card, hbm_bytes)


def rows_for(card: ModelCard, gpu: str, hbm_bytes: float, roof, step) -> list[dict]:
    """Every grid point's roofline (``roof(flops, bytes)`` seconds) and measured time,
    but for the prefills whose KV does not fit ``hbm_bytes`` (module docstring)."""
    rows = []
    for phase, batch, ctx, prefills, decodes in points():
        ok = fits(card, batch, ctx, hbm_bytes)
        if phase == "prefill" and not ok:
            continue
        flops, hbm = work(card, prefills, decodes)
        r_ms = roof(flops, hbm) * 1e3
        m_ms = step.seconds(prefills, decodes, flops, hbm) * 1e3
        rows.append({"model": card.name, "gpu": gpu, "phase": phase, "batch": batch,
                     "context": ctx, "roofline_ms": r_ms, "measured_ms": m_ms,
                     "ratio": r_ms / m_ms, "fits_hbm": ok,
                     "library_ms": library_ms(step.handle, phase, batch, ctx)})  # fmt: skip
    return rows


def library_ms(handle, phase: str, batch: int, context: int) -> float:
    """The library's own time of the point, its batched calls (not kvtier's composition,
    :class:`sim.hw.measured.MeasuredStep`): ``predict_prefill_latency`` (the batch's
    context attention as one kernel) and the decode-only ``mixed_step_latency``."""
    if phase == "prefill":
        return handle.predict_prefill_latency(batch, context, 0)
    return handle.mixed_step_latency(0, batch, context, 1, 0)


def skipped(card: ModelCard, hbm_bytes: float) -> list[tuple[int, int]]:
    """The (batch, context) prefills :func:`rows_for` skips on a GPU of ``hbm_bytes``."""
    return [(b, c) for b in PREFILL_BATCHES for c in CONTEXTS if not fits(card, b, c, hbm_bytes)]


def profile_gpus() -> list[str]:
    """kvtier profiles whose GPU the library measured (not derived), one per system."""
    seen, out = set(), []
    for name in list_profiles():
        row = system_of(load_profile(name).gpu.model)
        if row is not None and not row.derived and row.system not in seen:
            seen.add(row.system)
            out.append(name)
    return out


def table() -> tuple[pd.DataFrame, str]:
    rows, version = [], ""
    for model in MODELS:
        card = get_model(model)
        for name in profile_gpus():
            profile = load_profile(name)
            step, source = resolve(profile, card, GpuTime("measured"))
            if step is None:
                continue
            version = source
            m = Machine(profile)
            gpu = f"{system_of(profile.gpu.model).system} ({name})"  # type: ignore[union-attr]
            hbm = profile.gpu.hbm_capacity_gib * 2**30
            rows += rows_for(card, gpu, hbm, lambda f, b, m=m: m.gpu_seconds("gpu0", f, b), step)
        for system in EXTRA_SYSTEMS:
            spec = system_spec(system)
            peak, bw = float(spec["bfloat16_tc_flops"]), float(spec["mem_bw"])
            step = system_step(card, system, GpuTime("measured"))
            if isinstance(step, str):  # the library cannot time this model there
                continue

            def roof(f: float, b: float, peak=peak, bw=bw) -> float:
                return max(f / (peak * TENSOR_EFF), b / (bw * HBM_EFF))

            hbm = float(spec["mem_capacity"])
            rows += rows_for(card, f"{system} (no profile)", hbm, roof, step)
    return pd.DataFrame(rows), version


def markdown(df: pd.DataFrame) -> str:
    out = []
    for model, d in df.groupby("model", sort=False):
        out.append(f"### {model}\n")
        gpus = list(dict.fromkeys(d.gpu))  # the profiles' GPUs first, as measured
        pre = d[d.phase == "prefill"]
        for batch in PREFILL_BATCHES:
            t = pre[pre.batch == batch].pivot(index="context", columns="gpu", values="ratio")
            t = t.reindex(index=list(CONTEXTS), columns=gpus)
            out.append(f"Prefill at batch {batch}, roofline / measured (-: skipped, the KV "
                       "does not fit):\n")  # fmt: skip
            out.append(_md(t, "context"))
        out.append(f"Prefills skipped (KV beyond {KV_SHARE} x HBM - weights):\n")
        out.append(_md(_skipped(pre, gpus), "gpu", "{}"))
        h = d[d.gpu.str.contains(r"\(", regex=True) & ~d.gpu.str.contains("no profile")]
        for gpu, g in h.groupby("gpu", sort=False):
            dec = g[g.phase == "decode"]
            t = dec.pivot(index="context", columns="batch", values="ratio").map("{:.2f}".format)
            beyond = ~dec.pivot(index="context", columns="batch", values="fits_hbm").astype(bool)
            t = t.where(~beyond, t + "*")
            out.append(f"Decode step on {gpu}, roofline / measured, by batch (*: the batch's "
                       "KV is beyond the HBM; the tables extrapolate):\n")  # fmt: skip
            out.append(_md(t, "context", "{}"))
            ms = g[(g.phase == "prefill") & (g.batch == 1)].set_index("context")
            out.append(f"Prefill at batch 1 on {gpu}, ms:\n")
            out.append(_md(ms[["roofline_ms", "measured_ms"]], "context", "{:.1f}"))
        out.append("Ratio range over the grid (prefill: batch 1-64 where the KV fits; decode: "
                   "batch 1-64, context 1K-128K, all and where the KV fits):\n")  # fmt: skip
        out.append(_md(ranges(d), "gpu"))
    return "\n".join(out)


def ranges(d: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: the ratio's min and max over the prefills, the decodes and the
    decodes whose KV fits."""
    parts = {"prefill": d[d.phase == "prefill"], "decode": d[d.phase == "decode"]}
    parts["decode (fits)"] = parts["decode"][parts["decode"].fits_hbm.astype(bool)]
    cols = {}
    for name, part in parts.items():
        g = part.groupby("gpu", sort=False)["ratio"]
        cols[f"{name} min"], cols[f"{name} max"] = g.min(), g.max()
    return pd.DataFrame(cols).reindex(list(dict.fromkeys(d.gpu)))


def _skipped(pre: pd.DataFrame, gpus: list[str]) -> pd.DataFrame:
    """Per GPU and prefill batch, the contexts of the grid it has no row for."""
    t = {}
    for gpu in gpus:
        have = pre[pre.gpu == gpu]
        for batch in PREFILL_BATCHES:
            done = set(have[have.batch == batch].context)
            miss = [f"{c // 1024}K" for c in CONTEXTS if c not in done]
            t.setdefault(f"batch {batch}", {})[gpu] = ", ".join(miss) or "none"
    return pd.DataFrame(t).reindex(gpus)


def _md(t: pd.DataFrame, index: str, fmt: str = "{:.2f}") -> str:
    cols = [str(c) for c in t.columns]
    lines = ["| " + " | ".join([index, *cols]) + " |", "|" + "---|" * (len(cols) + 1)]
    for i, r in t.iterrows():
        label = f"{i // 1024}K" if isinstance(i, numbers.Integral) else str(i)
        cells = ("-" if pd.isna(v) else fmt.format(v) for v in r.to_numpy())
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    """Roofline / measured against the context, one line (one colour) per GPU:
    prefill and decode at batches 1 and 64, one row of panels per model; 1 is
    agreement; a hollow marker is a decode whose KV is beyond the HBM."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    models = list(dict.fromkeys(df["model"]))
    panels = (("prefill", 1), ("prefill", 64), ("decode", 1), ("decode", 64))
    colour = {g: f"C{i}" for i, g in enumerate(dict.fromkeys(df["gpu"]))}
    fig, axes = plt.subplots(len(models), len(panels), figsize=(17, 3.6 * len(models)),
                             squeeze=False, sharex=True, sharey=True)  # fmt: skip
    for r, model in enumerate(models):
        for c, (phase, batch) in enumerate(panels):
            ax = axes[r][c]
            sel = df[(df["model"] == model) & (df["phase"] == phase) & (df["batch"] == batch)]
            for gpu, g in sel.groupby("gpu", sort=False):
                g = g.sort_values("context")
                ax.plot(g["context"], g["ratio"], color=colour[gpu], lw=1.2, label=gpu)
                for fit, face in ((True, colour[gpu]), (False, "none")):
                    k = g[g["fits_hbm"].astype(bool) == fit]
                    ax.plot(k["context"], k["ratio"], "o", ms=3.5, color=colour[gpu], mfc=face)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{model}: {phase}, batch {batch}", fontsize=10)
            ax.set_xlabel("context, tokens")
            if c == 0:
                ax.set_ylabel("roofline / measured")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the CSV")
    if ap.parse_args().plot_only:
        plot(pd.read_csv(OUT), PNG)
        return
    t0 = time.perf_counter()
    df, source = table()
    df.to_csv(OUT, index=False, float_format="%.6g")
    plot(df, PNG)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    when = f"commit {sha.stdout.strip()}, {time.strftime('%Y-%m-%d')}"
    took = f"{time.perf_counter() - t0:.0f} s"
    print(f"<!-- python -m analysis.roofline_vs_measured: {when}, {took}; measured: {source} -->\n")
    print(markdown(df))


if __name__ == "__main__":
    main()
