"""``--executor ray`` where Ray is not installed (the ``cluster`` extra): one line naming
``--executor`` and what to install, exit 2, before any work (the corpus's check,
:func:`tests.badinput.test_corpus._check`, with Ray hidden from this process)."""

from __future__ import annotations

import sys

import pytest

from kvtier.cli.main import main
from tests.badinput.test_corpus import _check


@pytest.mark.parametrize("argv", ["sweep --factor ssds=1 --executor ray", "plan --executor ray"])
def test_ray_not_installed(argv, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVTIER_DEBUG", raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    status = main(argv.split())
    err = capsys.readouterr().err
    _check(status, err, "--executor")
    assert "kvtier[cluster]" in err
    assert not any(tmp_path.iterdir())  # refused before writing anything
