"""Writes analysis/serving.ipynb (run once; the notebook is committed).

Kept as code so the notebook's cells are reviewable in a diff.
"""

from pathlib import Path

from analysis.notebook import write_notebook

CELLS = [
    (
        "md",
        """# Serving with tiered prefix caches: SSD-backed PagedAttention and Unified KV Pooling

Figures of seed 001 (remaining requests over time, hit rates per tier) and
seed 004 (TTFT and blocked I/O time against context length, Figs. 8-10)
redrawn from `kvtier sim` results of a serving scenario:

```sh
make sim HW=h100-2dimm-2ssd SCENARIO=unified-pooling
make sim HW=dgx-spark SCENARIO=paged-ssd
```

Set `KVTIER_RESULTS` to one run folder (`results/<scenario>/<hw>`) or a folder
above several; every folder holding a `summary.parquet` of a serving run is
drawn.""",
    ),
    (
        "code",
        """import os
from pathlib import Path

import pandas as pd

from analysis.serving_plots import (
    context_figure,
    read_results,
    timeline_figure,
    ttft_cdf_figure,
)

RESULTS = Path(os.environ.get("KVTIER_RESULTS", "../results"))
runs = sorted(p.parent for p in RESULTS.rglob("summary.parquet"))
runs = [r for r in runs if "hit_rate_gpu" in pd.read_parquet(r / "summary.parquet")]
print(f"{len(runs)} serving runs under {RESULTS}")
loaded = {str(r.relative_to(RESULTS)) or r.name: read_results(r) for r in runs}""",
    ),
    ("md", "## Per run: the summary table (latency, throughput, hits per tier, blocked I/O)"),
    (
        "code",
        """COLS = ["variant", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s", "throughput_tok_s",
        "queue_mean_s", "hit_rate_gpu", "hit_rate_cpu", "hit_rate_ssd", "hit_rate_pool",
        "blocked_io_mean_s", "load_gb", "ssd_util"]
for name, (summary, _) in loaded.items():
    print(name)
    display(summary[[c for c in COLS if c in summary]].round(4))""",
    ),
    (
        "md",
        """## Context-length sweeps (seed 004): TTFT and blocked I/O per design

Expected by mechanism: pooling's gain over LMCache grows with context (more
bytes to move, spread over every module and SSD, each with its own stream);
KV-passthrough matters most where I/Os are many and small (the kernel path's
per-I/O CPU cost).""",
    ),
    (
        "code",
        """figures = {}
for name, (summary, _) in loaded.items():
    if "context_tokens" in summary and summary["context_tokens"].nunique() > 1:
        figures[name + " ttft"] = context_figure(summary, "ttft_mean_s")
        figures[name + " blocked"] = context_figure(summary, "blocked_io_mean_s")
list(figures)""",
    ),
    (
        "md",
        """## Request traces (seed 001): remaining requests over time and TTFT distribution

Solid: requests released and not finished; dashed: those waiting for
admission. Offload tiers shorten the tail when they return prefixes the GPU
had to evict.""",
    ),
    (
        "code",
        """for name, (summary, per) in loaded.items():
    if "context_tokens" in summary and summary["context_tokens"].nunique() > 1:
        continue
    figures[name + " remaining"] = timeline_figure(per)
    figures[name + " ttft cdf"] = ttft_cdf_figure(per)
print(f"{len(figures)} figures")""",
    ),
]


def main() -> None:
    write_notebook(CELLS, Path(__file__).with_name("serving.ipynb"))


if __name__ == "__main__":
    main()
