"""The fragile assumptions recorded sensitivity passes found, printed by a plain run
(:mod:`sim.scenarios.fragile`, each seed scenario's ``fragile`` block)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwprofiles import load_profile
from kvtier.cli import main
from sim.config import SCENARIO_DIR, load_scenario
from sim.scenarios.fragile import fragile_lines, load_fragile
from sim.scenarios.seedref import load_seed_figures
from sim.sensitivity import knobs

SEED_SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml") if load_seed_figures(p))
RECORDED = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml") if load_fragile(p))


def test_the_seed_scenarios_are_found() -> None:
    """Not vacuous: the scenarios with seed figures are the five seeds' comparisons."""
    assert {"default", "swarm-ablations", "paged-ssd", "kvdrive", "unified-pooling"} <= set(
        SEED_SCENARIOS
    )


@pytest.mark.parametrize("name", SEED_SCENARIOS)
def test_every_seed_scenario_records_what_its_passes_found(name: str) -> None:
    """A scenario with seed figures carries at least one recorded pass (which may have
    found nothing fragile, an explicit empty ``found``)."""
    assert load_fragile(SCENARIO_DIR / f"{name}.yaml"), f"{name}.yaml has no fragile: block"


@pytest.mark.parametrize("name", RECORDED)
def test_each_finding_is_an_assumption_of_that_run_at_one_end_of_its_range(name: str) -> None:
    """The recorded assumption is one a sensitivity run of this scenario on the pass's
    profile varies, and the recorded end is the low or high end of the range that run
    takes today (sim.sensitivity.knobs, computed from the profile and the kinds)."""
    cfg = load_scenario(name)
    for p in load_fragile(cfg.source_file):
        if p.pending:  # no pass yet: nothing found, no profile
            continue
        profile = load_profile(p.hw)
        for f in (*p.found, *p.notes):
            (k,) = knobs(cfg, profile, only=[f.assumption])
            assert f.end in (k.low, k.high) and f.end != k.value, (name, f.assumption)


@pytest.mark.parametrize("name", RECORDED)
def test_each_line_names_the_assumption_its_end_effect_and_pass(name: str) -> None:
    passes = load_fragile(SCENARIO_DIR / f"{name}.yaml")
    text = "\n".join(fragile_lines(passes))
    for p in passes:
        assert p.when in text and p.rerun in text
        for f in p.found:
            assert f"FRAGILE {f.assumption} at {f.end:g}: {f.effect}" in text
        for f in p.notes:
            assert f"NOT FRAGILE {f.assumption} at {f.end:g}: {f.effect}" in text
        if p.pending:
            assert f"no pass recorded yet: {p.pending}" in text
        elif not p.found:
            assert f"none found by the pass on {p.hw}, {p.when}" in text


_SCENARIO = (
    "name: fr\ndescription: d\nseed: 0\nworkload:\n"
    "  {{model: Llama-3.2-1B, context_tokens: 1024, batch: 1, sparsity: 0.5,"
    " steps: 1, layers: 1}}\n"
    "variants:\n  - {{name: two, ssds: 2}}\n"
    "fragile:\n"
    '  - when: "{when}"\n    hw: h20-8ssd\n    source: docs/sensitivity.md\n'
    "    rerun: kvtier sim --hw h20-8ssd --scenario fr.yaml --sensitivity\n"
    "    found:\n      - {{assumption: efficiency.ssd, end: 0.85, effect: the two swap}}\n"
)


def _sim(tmp_path: Path, when: str) -> int:
    """``kvtier sim`` of the toy scenario whose pass is dated ``when``: its exit status."""
    scenario = tmp_path / "fr.yaml"
    scenario.write_text(_SCENARIO.format(when=when))
    return main(["sim", "--scenario", str(scenario), "--out", str(tmp_path / "out")])


def test_a_plain_run_prints_the_record_under_its_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sim(tmp_path, "2026-12-03, commit 4017b50") == 0
    out = capsys.readouterr().out
    line = "FRAGILE efficiency.ssd at 0.85: the two swap (h20-8ssd, 2026-12-03, commit 4017b50"
    assert line in out
    assert "re-run: kvtier sim --hw h20-8ssd --scenario fr.yaml --sensitivity" in out


def test_an_undated_pass_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sim(tmp_path, "last week") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "fr.yaml:9: fragile[0].when: must read 'YYYY-MM-DD, commit SHA'" in err


def test_a_scenario_no_pass_covered_says_so_and_a_pending_pass_has_no_date(tmp_path: Path) -> None:
    from sim.scenarios.fragile import parse_fragile

    class Where:
        def error(self, key: str, msg: str) -> ValueError:
            return ValueError(f"{key}: {msg}")

    rerun = "kvtier sim --scenario x --sensitivity"
    (p,) = parse_fragile([{"pending": "needs a capture", "rerun": rerun}], Where())
    assert fragile_lines((p,))[1:] == [
        "  no pass recorded yet: needs a capture",
        f"    run: {rerun}",
    ]
    bad = [{"pending": "x", "when": "2026-12-03, commit 4017b50", "rerun": rerun}]
    with pytest.raises(ValueError, match=r"fragile\[0\]\.pending"):
        parse_fragile(bad, Where())
