"""examples/notebook.ipynb runs from top to bottom in a real Jupyter kernel (nbclient), inside the kernel's
running event loop, and shows the fit, the privacy statements and the plots (issue 24 item 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

# slow, and on the daemon tests' worker (tests/network/conftest.py): the notebooks start a consortium
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("daemons")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("CONFAR_EXAMPLES", str(EXAMPLES))
    monkeypatch.setenv("CONFAR_NOTEBOOK_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # figures as outputs
    nb = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    where = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, timeout=900, kernel_name="python3", resources=where).execute()
    text = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "Fit(8 chains x" in text and "party-7: epsilon = " in text
    for path in sorted((tmp_path / "out" / "privacy").glob("party-*.json")):
        doc = json.loads(path.read_text())  # the fit's repr and the privacy cell print its sentence verbatim
        assert text.count(f"{doc['identity']}: {doc['statement']}") == 2, doc["statement"]
        assert " by its Renyi filter (order " in doc["statement"]  # its ledger's accountant, not the GDP's
    assert "absent by design" in text and "constant_data" in text
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert pngs >= 2  # the posterior and the prior-posterior comparison
    assert (tmp_path / "out" / "posterior.nc").is_file() and os.environ["CONFAR_NOTEBOOK_OUT"]


def _run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("CONFAR_EXAMPLES", str(EXAMPLES))
    monkeypatch.setenv("CONFAR_NOTEBOOK_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text = "\n".join(
        str(o.get("text", ""))
        + str(o.get("data", {}).get("text/plain", ""))
        + str(o.get("data", {}).get("text/html", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    return nb, text


def test_the_poisson_rate_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Poisson rate study of issue 24 from a notebook: the formula and the hand-written plug-in, both with
    the defaults: no warning, and the two posteriors agree within their Monte Carlo errors (|z| < 4 for each
    of the 4 parameters; each fit's agreement with the converged reference is tests/network/
    test_poisson_study.py)."""
    _, text = _run("poisson-rate.ipynb", tmp_path, monkeypatch)
    assert "FormulaModel(formula='deaths ~ age + sex + creatinine'" in text
    assert "warnings: none" in text, text[-2000:]
    assert "plug-in warnings: none" in text, text[-2000:]
    zs = {
        line.split()[3].rstrip(":"): float(line.split()[4])
        for line in text.splitlines()
        if line.startswith("formula - plug-in, ")
    }
    assert set(zs) == {"Intercept", "age", "sex", "creatinine"} and all(abs(z) < 4.0 for z in zs.values()), zs
    assert (tmp_path / "out" / "formula" / "summary.csv").is_file()
