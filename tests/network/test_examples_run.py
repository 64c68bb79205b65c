"""Every example experiment in ``examples/`` runs end to end: ``confar run FILE --simulate`` (real
``confar-party`` processes, mutual TLS on loopback, synthetic data) with its sizes shrunk so the whole set
takes well under a minute, and leaves the documented outputs."""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.sampler_settings import MH_KINDS
from simulations.servers import oxigraph_binary, postgres_bindir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))

# key -> small value; applied to "key = <integer>" lines (the examples' own keys; shrunk() adds one table)
SHRINK = {
    "chains": "4",
    "iterations": "12",
    "warmup": "8",
    "history_from": "2",
    "adapt_start": "4",
    "adapt_every": "2",
    "adapt_stop": "8",
    "n_accept": "5",
    "max_proposals": "1000",  # the registries' dry run composes every batch the run may ask (one PLD)
    "c": "3",
    "min_ess": "5",  # a planned example's (the demo's) bar, for the few iterations above
    "max_seconds": "3",  # the reference's time cap (a shrunk run's reference may stop there, and says so)
}


def shrunk(text: str) -> str:
    for key, value in SHRINK.items():
        text = re.sub(rf"(?m)^{key}\s*=\s*\d+", f"{key} = {value}", text)
    # the one key added: an MH example without a [reference] table gets the cap above (its reference's default
    # target, an ESS of 2,000 whatever the run's, took up to 20 s of a shrunk run; the reference's convergence
    # is tested at full length: tests/network/test_poisson_study.py, test_planned_run.py)
    if "\n[reference]" not in text and tomllib.loads(text)["sampler"]["kind"] in MH_KINDS:
        text += f"\n[reference]\nmax_seconds = {SHRINK['max_seconds']}\n"
    return text


def test_every_example_is_covered() -> None:
    assert {p.stem for p in EXAMPLES} == {
        "mh",
        "adaptive-mh",
        "penalty",
        "lazy-mh",
        "rejection",
        "private-rejection",
        "abcdp",
        "demo",
        "registries",
        "plugin",
        "poisson-rate",
        "poisson-rate-plugin",
        "registry-effects",
        "vasculitis",
    }


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_simulated(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if "postgresql" in example.read_text() and postgres_bindir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, postgres) not installed")
    if "sparql" in example.read_text() and oxigraph_binary() is None:
        pytest.skip("oxigraph (pip install oxigraph) not installed")
    if (ROOT / "examples" / "plugins").is_dir():  # [model] path = "plugins" is relative to the file
        shutil.copytree(ROOT / "examples" / "plugins", tmp_path / "plugins")
    for data in ("poisson", "registry-effects", "vasculitis"):  # [simulate] data files
        shutil.copytree(ROOT / "examples" / data, tmp_path / data)
    cfg = tmp_path / example.name
    cfg.write_text(shrunk(example.read_text(encoding="utf-8")), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "privacy spent by each registry" in printed
    meta = json.loads((out / "run.json").read_text())
    assert meta["run_id"].startswith("run-")
    for name in ("posterior.nc", "draws.csv", "summary.csv", "provenance.json"):
        assert (out / name).is_file(), name
    m = len(list((out / "simulation").glob("party-*")))
    assert m >= 3
    reports = sorted((out / "privacy").glob("party-*.json"))
    assert len(reports) == m
    budgeted = re.search(r"(?m)^party_(epsilon|gdp_mu)\s*=", example.read_text(encoding="utf-8"))
    lines = printed.splitlines()
    for rep in reports:
        doc = json.loads(rep.read_text())
        assert doc["statement"], rep
        # the terminal prints the document's statement byte for byte, the other readings beside it
        beside = [f"    beside it, {r}" for r in doc["other_readings"]]
        block = [f"  {doc['identity']}: {doc['statement']}", *beside]
        at = lines.index(block[0])
        assert lines[at : at + len(block)] == block
        if budgeted:  # a registry with a budget states a finite epsilon at its delta, backed by its ledger
            here = doc["recomputed_here"]
            eps = here["eps_at_delta"]
            assert eps is not None and math.isfinite(eps) and eps > 0, (rep, doc["statement"])
            own = here["epsilon_by_accountant"]  # by the accountant its ledger enforces, stated first
            assert doc["statement"].startswith(f"epsilon = {own:.4g} at delta = {here['delta']:.3g} by its ")
            reported = doc["reported_by_party"]
            assert reported["neighbours"] in ("add-remove", "replace-one")
            assert f", {reported['neighbours']} neighbours, " in doc["statement"]
            # the threat model is the q the charges' labels say they were computed for
            qs = {int(e["label"].split("assumes q = ")[1].split()[0]) for e in reported["events"]}
            assert len(qs) == 1 and f"q = {qs.pop()}" in doc["threat_model"], (qs, doc["threat_model"])
            assert doc["threat_model"] in doc["statement"]
    # --overwrite replaces the earlier run's folder; without it the run folder is refused (exit 2)
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out)]) == 2
    assert f"{out} already holds a run" in capsys.readouterr().err  # refused before any daemon started
