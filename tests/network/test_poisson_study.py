"""The Poisson rate study of issue 24 from the CLI with the defaults (examples/poisson-rate.toml: a formula,
four registry daemons in processes with mTLS, the registries' records read from CSV files and checked against
the formula's schema, no proposal_scale): the run completes without a warning, and its posterior agrees with
a converged plain fit of the pooled records (z-scores from both MCSEs). The notebook runs the same study and
the hand-written plug-in (tests/coordinator/test_notebook.py)."""

from __future__ import annotations

import csv
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from coordinator.cli import main as confar

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Z_MAX = 4.0  # |z| of 4 parameters: a false failure has probability about 4 x 6e-5


def test_formula_study_runs_from_the_cli_with_the_defaults(tmp_path: Path) -> None:
    out = tmp_path / "run"
    toml = str(EXAMPLES / "poisson-rate.toml")
    rc = confar(["run", toml, "--simulate", "--out", str(out), "--no-progress"])
    assert rc == 0
    ran = tomllib.loads((out / "experiment.toml").read_text())
    assert ran["model"]["formula"] == "deaths ~ age + sex + creatinine"
    assert "proposal_scale" not in ran["sampler"] and "proposal_cov" not in ran["sampler"]
    summary = (out / "summary.txt").read_text()
    assert "converged reference" in summary and "(converged)" in summary, summary[:600]
    with open(out / "summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["param"] for r in rows] == ["Intercept", "age", "sex", "creatinine"]
    z = {r["param"]: float(r["z"]) for r in rows}
    assert all(abs(v) < Z_MAX for v in z.values()), z
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["warnings"] == [], provenance["warnings"]


def test_a_short_run_of_the_study_warns(tmp_path: Path) -> None:
    """The same study run 150 iterations instead of 2,500: the run completes and says it has not converged,
    with the cause and the key to change, in the terminal's words in provenance.json and summary.txt."""
    shutil.copytree(EXAMPLES / "poisson", tmp_path / "poisson")
    text = (EXAMPLES / "poisson-rate.toml").read_text().replace("iterations = 2500", "iterations = 150")
    assert "iterations = 150\n" in text
    (tmp_path / "short.toml").write_text(text)
    out = tmp_path / "run"
    rc = confar(["run", str(tmp_path / "short.toml"), "--simulate", "--out", str(out), "--no-progress"])
    assert rc == 0
    warnings = json.loads((out / "provenance.json").read_text())["warnings"]
    assert any("ESS" in w and "[sampler] iterations" in w for w in warnings), warnings
    assert "warnings:" in (out / "summary.txt").read_text()
