"""``make lab`` / ``kvtier lab``: every notebook runs headless on the shipped tiny run,
reading what its files hold; the lab points the notebooks at the user's results
when there are any; each notebook's first cell names the command behind its inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from analysis.results import TINY, lab_results, lab_traces, newest_run
from kvtier.cli.main import main
from tests.badinput.test_corpus import _check

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "analysis").glob("*.ipynb"))


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A copy of the shipped tiny run (a notebook may write beside a run it draws)."""
    return Path(shutil.copytree(TINY, tmp_path / "tiny-run"))


def _expected(name: str, t: Path) -> tuple[str, dict[str, str], object]:
    """(parameter, {probe: expression}, what the probes must give) for notebook ``name``
    on the tiny run at ``t``, read here from the run's own files."""
    plan = pd.read_parquet(t / "plan" / "plan.parquet")
    swift = pd.read_parquet(t / "swiftcache" / "h20-4gpu-nvlink" / "summary.parquet")
    kvd = pd.read_csv(t / "kvdrive-quick" / "l20-server" / "summary.csv")
    report = json.loads((t / "real" / "report.json").read_text())
    return {
        "swarm": ("RESULTS", {"n": "[f.name for f in files]"}, {"n": ["sweep-ssds.parquet"]}),
        # both serving runs (SwiftCache's is one too), every serving run drawn
        "serving": ("RESULTS", {"n": "sorted(loaded)"},
                    {"n": ["paged-ssd/dgx-spark", "swiftcache/h20-4gpu-nvlink"]}),
        "capacity": ("RESULTS", {"n": "len(ok)"}, {"n": int((plan["status"] == "ok").sum())}),
        "swiftcache": ("RESULTS", {"n": "summary['design'].tolist()"},
                       {"n": swift["design"].tolist()}),
        "kvdrive": ("RESULTS", {"n": "len(runs)"}, {"n": len(kvd)}),
        "validation": ("OUT", {"n": "report['bytes_match']"}, {"n": report["bytes_match"]}),
        # two captures of SmolLM2-135M: 30 layers x 3 KV heads, one statistics row each
        "attention": ("FOLDER", {"n": "names", "heads": "len(df)"},
                      {"n": ["pydoc-a", "pydoc-b"], "heads": 30 * 3}),
    }[name]  # fmt: skip


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_runs_on_the_shipped_tiny_run(name, run_notebook, tiny) -> None:
    param, probes, want = _expected(name, tiny)
    where = tiny / "traces" if param == "FOLDER" else tiny
    _, got = run_notebook(name, {param: str(where)}, probes)
    assert got == want


def test_each_notebook_names_the_command_behind_its_inputs() -> None:
    nbformat = pytest.importorskip("nbformat", reason="notebook extras not installed")
    for name in NOTEBOOKS:
        first = nbformat.read(ROOT / "analysis" / f"{name}.ipynb", as_version=4).cells[0]
        assert first.cell_type == "markdown", name
        block = re.search(r"```sh\n(.+?)```", first.source, re.S)
        assert block and re.search(r"^(kvtier|make) \w", block.group(1), re.M), name
        assert "make lab" in first.source, name


def test_the_lab_reads_the_users_captures_else_the_tiny_runs(tmp_path: Path) -> None:
    assert lab_traces(tmp_path) == TINY / "traces"
    (tmp_path / "a.parquet").write_bytes(b"")  # the notebook's glob: *.parquet in the folder
    assert lab_traces(tmp_path) == tmp_path.resolve()


def test_the_lab_reads_the_users_results_else_the_tiny_run(tmp_path: Path) -> None:
    assert lab_results(tmp_path / "missing") == TINY
    (tmp_path / "sim" / "a").mkdir(parents=True)
    assert lab_results(tmp_path) == TINY  # folders, no result table
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "sim" / "a" / "summary.parquet")
    assert lab_results(tmp_path) == tmp_path.resolve()


def test_newest_run_is_the_latest_written_that_qualifies(tmp_path: Path) -> None:
    for i, run in enumerate(("old", "new", "newer-but-not-kept")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "report.json").write_text("{}")
        os.utime(tmp_path / run / "report.json", (1000 + i, 1000 + i))
    assert newest_run(tmp_path, "report.json") == tmp_path / "newer-but-not-kept"
    keep = lambda d: d.name != "newer-but-not-kept"  # noqa: E731
    assert newest_run(tmp_path, "report.json", keep) == tmp_path / "new"
    with pytest.raises(FileNotFoundError, match="no steps.parquet under"):
        newest_run(tmp_path, "steps.parquet")


def test_kvtier_lab_starts_jupyterlab_on_analysis_with_the_results(
    tmp_path: Path, monkeypatch
) -> None:
    """What ``kvtier lab`` hands over (JupyterLab itself is not needed to see it)."""
    monkeypatch.chdir(tmp_path)  # no traces-real/ here
    calls = []

    def execve(path, argv, env):
        calls.append((path, argv, env))
        raise SystemExit(0)

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "jupyterlab" else found(n, *a)
    )
    monkeypatch.setattr(os, "execve", execve)
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "summary.parquet")
    with pytest.raises(SystemExit):
        main(["lab", "--results", str(tmp_path), "--no-browser", "--port", "8899", "--allow-root"])
    ((path, argv, env),) = calls
    assert path == sys.executable and argv[1:3] == ["-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={ROOT / 'analysis'}" in argv
    assert argv[-3:] == ["--no-browser", "--port=8899", "--allow-root"]
    assert env["KVTIER_RESULTS"] == str(tmp_path.resolve())
    assert env["KVTIER_TRACES"] == str(TINY / "traces")


def test_kvtier_lab_without_jupyterlab_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVTIER_DEBUG", raising=False)
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "jupyterlab" else found(n, *a)
    )
    _check(main(["lab", "--no-browser"]), capsys.readouterr().err, "kvtier[notebooks]")


def _contents(url: str, deadline: float) -> set[str]:
    """The names the server lists at ``url``, asked until it answers (it prints its URL
    before its loop accepts connections) or ``deadline``."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return {c["name"] for c in json.load(r)["content"]}
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_kvtier_lab_serves_headless(tmp_path: Path) -> None:
    """The real server: ``kvtier lab --no-browser`` answers on its port, rooted at analysis/."""
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("JupyterLab is not installed (the notebooks extra; make lab installs it)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "kvtier.cli", "lab", "--results", str(tmp_path)]
    root = ["--allow-root"] if os.geteuid() == 0 else []  # a container's root user
    with socket.socket() as s:  # a port free now (JupyterLab moves to the next if taken)
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    proc = subprocess.Popen(
        [*cmd, "--no-browser", "--port", port, *root], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            url = (re.search(r"(http://127\.0\.0\.1:\d+)/lab\?token=(\w+)", line) or [None])[0]
        assert url, "JupyterLab printed no URL in 120 s"
        base, token = url.split("/lab?token=")
        names = _contents(f"{base}/api/contents?token={token}", deadline)
        assert {f"{n}.ipynb" for n in NOTEBOOKS} <= names and "tiny-run" in names
    finally:
        proc.terminate()
        proc.wait(timeout=30)
