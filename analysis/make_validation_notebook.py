"""Writes analysis/validation.ipynb (run once; the notebook is committed).

Kept as code so the notebook's cells are reviewable in a diff.
"""

from pathlib import Path

from analysis.notebook import write_notebook

CELLS = [
    (
        "md",
        """# Simulator vs real replay

Renders the report of `kvtier real validate` (`make real`): the same plan ran
in the simulator and on real (or emulated) SSDs.  Set `KVTIER_VALIDATION` to
its output folder (default `results/real`).

Error = (simulated - real) / real, per step and per op, by regime: latency-
(QD1 4 KiB), IOPS- (deep-queue 4 KiB) and bandwidth-bound (1 MiB reads and
writes).  Per-device bytes and I/O counts must match exactly.""",
    ),
    (
        "code",
        """import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

OUT = Path(os.environ.get("KVTIER_VALIDATION", "../results/real"))
report = json.loads((OUT / "report.json").read_text())
steps = pd.read_parquet(OUT / "steps.parquet")
ops = pd.read_parquet(OUT / "ops.parquet")
sha, host = report["git"].get("sha", "?")[:10], report["machine"].get("hostname", "?")
print(f"git {sha}  machine {host}  engine: {report.get('engine')}")
print(f"bytes match: {report['bytes_match']}  within target: {report['within_target']}")""",
    ),
    (
        "code",
        """pd.DataFrame(report["by_regime"]).T.round(3)""",
    ),
    (
        "code",
        """fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
for regime, g in steps.groupby("regime", sort=False):
    a.plot(g["step"], g["real_s"] * 1e3, "o-", label=f"{regime} real")
    a.plot(g["step"], g["sim_s"] * 1e3, "x--", label=f"{regime} sim")
a.set(xlabel="step", ylabel="ms", title="step time")
a.legend(fontsize=7)
regimes = list(dict.fromkeys(ops["tag"]))
b.boxplot([ops.loc[ops["tag"] == r, "error"] * 100 for r in regimes], tick_labels=regimes)
b.axhline(0, color="k", lw=0.8)
b.set(ylabel="(sim - real) / real (%)", title="per-op error")
fig.tight_layout()""",
    ),
    (
        "code",
        """pd.read_csv(OUT / "bytes.csv")""",
    ),
]


def main() -> None:
    write_notebook(CELLS, Path(__file__).with_name("validation.ipynb"))


if __name__ == "__main__":
    main()
