"""examples/notebook.ipynb runs from top to bottom in a real Jupyter kernel (nbclient), inside the kernel's
running event loop, and shows the fit, the privacy statements and the plots (issue 24 item 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

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
    assert "absent by design" in text and "constant_data" in text
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert pngs >= 2  # the posterior and the prior-posterior comparison
    assert (tmp_path / "out" / "posterior.nc").is_file() and os.environ["CONFAR_NOTEBOOK_OUT"]
