"""Each registry is filled by its own modules on its first lookup (sim.catalog):
every lookup sees every registration, and a command imports only the families it
looks up.  Run in a fresh interpreter: this one has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _fresh(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_serving_designs_are_looked_up_without_the_sparse_decode_families() -> None:
    got = _fresh(
        """
        import json, sys
        from sim.registry import SERVING_DESIGNS
        names = SERVING_DESIGNS.names()
        print(json.dumps({"names": names, "mods": sorted(sys.modules)}))
        """
    )
    assert {"gpu-only", "paged-cpu-ssd", "lmcache", "pool"} <= set(got["names"])
    mods = set(got["mods"])
    assert "sim.serving.designs" in mods
    assert not {"sim.policies.swarm.design", "sim.workloads", "sim.capacity.sparse"} & mods


def test_a_kv_design_lookup_sees_every_policy_module() -> None:
    got = _fresh(
        """
        import json, pkgutil, sys
        import sim.policies
        from sim.registry import KV_DESIGNS
        names = KV_DESIGNS.names()
        walked = [i.name for i in pkgutil.walk_packages(sim.policies.__path__, "sim.policies.")]
        print(json.dumps({"names": names, "missing": [m for m in walked if m not in sys.modules]}))
        """
    )
    assert got["missing"] == []
    assert {"swarm", "nocluster", "infllm", "pqcache", "kvdrive"} <= set(got["names"])


def test_the_serving_engine_imports_neither_pandas_nor_scipy() -> None:
    """The benchmark's whole command is timed: the engine, its trace and its records
    need neither (the summary and the sparse-decode families import them)."""
    got = _fresh(
        """
        import json, sys
        import sim.serving.bench
        print(json.dumps([m for m in ("pandas", "scipy") if m in sys.modules]))
        """
    )
    assert got == []
