"""The analysis notebooks run end to end on tiny results."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.sweep import sweep

nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")
nbclient = pytest.importorskip("nbclient", reason="notebook extras not installed")

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"


def execute(name: str, env: dict[str, str]) -> nbformat.NotebookNode:
    nb = nbformat.read(ANALYSIS / name, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ANALYSIS)}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def test_swarm_notebook_draws_every_sweep(tmp_path: Path) -> None:
    cfg = load_scenario("tiers")
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, steps=1, layers=2))
    df = sweep(cfg, load_profile("h20-8ssd"), "ssds", [1, 2], jobs=1)
    df.to_parquet(tmp_path / "sweep-ssds.parquet", index=False)
    nb = execute("swarm.ipynb", {"KVTIER_RESULTS": str(tmp_path)})
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("1 sweep tables" in o.get("text", "") for o in outputs)
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors


def test_serving_notebook_draws_both_scenarios(tmp_path: Path) -> None:
    from sim.runner import run

    chat = load_scenario("paged-ssd")
    chat = dataclasses.replace(
        chat,
        workload=dataclasses.replace(chat.workload, sessions=6, session_rate=6.0),
        variants=chat.variants[:2],
    )
    run(chat, load_profile("dgx-spark"), tmp_path / "paged-ssd")
    pool = load_scenario("unified-pooling")
    matrix = {"model": ["Llama-3.1-8B"], "context_tokens": [1024, 4096]}
    pool = dataclasses.replace(
        pool,
        workload=dataclasses.replace(pool.workload, matrix=matrix),
        variants=pool.variants[:2],
    )
    run(pool, load_profile("h100-2dimm-2ssd"), tmp_path / "pooling")
    nb = execute("serving.ipynb", {"KVTIER_RESULTS": str(tmp_path)})
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    text = "".join(o.get("text", "") for o in outputs)
    assert "2 serving runs" in text
    assert "4 figures" in text  # TTFT and blocked I/O vs context; remaining and TTFT CDF
