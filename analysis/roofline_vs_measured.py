"""kvtier's roofline GPU time against aiconfigurator-core's measured kernel tables.

``python -m analysis.roofline_vs_measured`` prices the same work both ways:

* **roofline**: what a kvtier run charges by default, the engine's iteration
  cost (:func:`sim.serving.policy.costs.iteration_cost`) at the profile's
  achievable peaks (:meth:`sim.hw.machine.Machine.gpu_seconds`, tensor x 0.75,
  HBM x 0.9: the profiles' assumptions);
* **measured**: what ``gpu_time: measured`` charges (:mod:`sim.hw.measured`,
  vllm at the version nearest seed 004's).

for prefills of 1K..128K tokens at batch 1 and decode steps at contexts
1K..128K and batches 1..64 (a batch beyond the HBM is priced as the tables
extrapolate: the tables time kernels, not capacity), for Llama-3.1-8B and
Qwen3-32B.  GPUs: every kvtier profile whose GPU the library measured (the
H100 SXM of ``dgx-h100``; the H100 PCIe of ``h100-2dimm-2ssd`` only derives
from it, so it adds no measurement), then, marked ``(no profile)``, the other
GPUs the library measured, their roofline from the library's own datasheet
figures (``systems/<gpu>.yaml``: ``bfloat16_tc_flops``, ``mem_bw``) at the
same 0.75 and 0.9: the error band a roofline-only GPU (H20, L20, RTX 4090)
carries is the spread of the ratio over all of them.

It writes every point to ``analysis/roofline_vs_measured.csv`` (beside this
script), draws the ratio against the context in ``analysis/roofline_vs_measured.png``
(:func:`plot`; ``--plot-only`` redraws it from the CSV) and prints the tables of
``docs/compute-time.md`` (markdown).
"""

from __future__ import annotations

import argparse
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


def work(card: ModelCard, prefills: list, decodes: list) -> tuple[float, float]:
    """kvtier's (FLOPs, HBM bytes) of one iteration."""
    outputs = len(decodes) + len(prefills)
    layer, head = iteration_cost(card, prefills, decodes, outputs)
    total = layer * card.layers + head
    return total.flops, total.hbm_bytes


def points() -> list[tuple[str, int, int, list, list]]:
    """(phase, batch, context, prefills, decodes) of the grid."""
    out = [("prefill", 1, c, [(c, 0)], []) for c in CONTEXTS]
    out += [("decode", b, c, [], [c] * b) for b in BATCHES for c in CONTEXTS]
    return out


def rows_for(card: ModelCard, gpu: str, roof, step) -> list[dict]:
    """Every grid point's roofline (``roof(flops, bytes)`` seconds) and measured time."""
    rows = []
    for phase, batch, ctx, prefills, decodes in points():
        flops, hbm = work(card, prefills, decodes)
        r_ms = roof(flops, hbm) * 1e3
        m_ms = step.seconds(prefills, decodes, flops, hbm) * 1e3
        rows.append({"model": card.name, "gpu": gpu, "phase": phase, "batch": batch,
                     "context": ctx, "roofline_ms": r_ms, "measured_ms": m_ms,
                     "ratio": r_ms / m_ms})  # fmt: skip
    return rows


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
            rows += rows_for(card, gpu, lambda f, b, m=m: m.gpu_seconds("gpu0", f, b), step)
        for system in EXTRA_SYSTEMS:
            spec = system_spec(system)
            peak, bw = float(spec["bfloat16_tc_flops"]), float(spec["mem_bw"])
            step = system_step(card, system, GpuTime("measured"))
            if isinstance(step, str):  # the library cannot time this model there
                continue

            def roof(f: float, b: float, peak=peak, bw=bw) -> float:
                return max(f / (peak * TENSOR_EFF), b / (bw * HBM_EFF))

            rows += rows_for(card, f"{system} (no profile)", roof, step)
    return pd.DataFrame(rows), version


def markdown(df: pd.DataFrame) -> str:
    out = []
    for model, d in df.groupby("model", sort=False):
        out.append(f"### {model}\n")
        pre = d[d.phase == "prefill"].pivot(index="context", columns="gpu", values="ratio")
        pre = pre[list(dict.fromkeys(d.gpu))]  # the profiles' GPUs first, as measured
        out.append("Prefill at batch 1, roofline / measured:\n")
        out.append(_md(pre, "context"))
        h = d[d.gpu.str.contains(r"\(", regex=True) & ~d.gpu.str.contains("no profile")]
        for gpu, g in h.groupby("gpu", sort=False):
            dec = g[g.phase == "decode"].pivot(index="context", columns="batch", values="ratio")
            out.append(f"Decode step on {gpu}, roofline / measured, by batch:\n")
            out.append(_md(dec, "context"))
            ms = g[g.phase == "prefill"].set_index("context")[["roofline_ms", "measured_ms"]]
            out.append(f"Prefill on {gpu}, ms:\n")
            out.append(_md(ms, "context", "{:.1f}"))
        rng = d.groupby(["gpu", "phase"], sort=False)["ratio"].agg(["min", "max"]).unstack()
        rng = rng[[(s, p) for p in ("prefill", "decode") for s in ("min", "max")]]
        rng.columns = [f"{p} {s}" for s, p in rng.columns]
        out.append("Ratio range over the whole grid (decode: batch 1-64, context 1K-128K):\n")
        out.append(_md(rng, "gpu"))
    return "\n".join(out)


def _md(t: pd.DataFrame, index: str, fmt: str = "{:.2f}") -> str:
    cols = [str(c) for c in t.columns]
    lines = ["| " + " | ".join([index, *cols]) + " |", "|" + "---|" * (len(cols) + 1)]
    for i, r in t.iterrows():
        label = f"{i // 1024}K" if isinstance(i, int) else str(i)
        lines.append("| " + " | ".join([label, *(fmt.format(v) for v in r.to_numpy())]) + " |")
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    """Roofline / measured against the context, one line per GPU: prefill at batch 1,
    decode at batch 1 and 64, one row of panels per model; 1 is agreement."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    models = list(dict.fromkeys(df["model"]))
    panels = (("prefill", 1), ("decode", 1), ("decode", 64))
    fig, axes = plt.subplots(len(models), len(panels), figsize=(13, 3.6 * len(models)),
                             squeeze=False, sharey=True)  # fmt: skip
    for r, model in enumerate(models):
        for c, (phase, batch) in enumerate(panels):
            ax = axes[r][c]
            sel = df[(df["model"] == model) & (df["phase"] == phase) & (df["batch"] == batch)]
            for gpu, g in sel.groupby("gpu", sort=False):
                g = g.sort_values("context")
                ax.plot(g["context"], g["ratio"], marker="o", ms=3, label=gpu)
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
