"""simulations.refit_check (issue 35 item 4's measurement) runs and reports the three proposals."""

from __future__ import annotations

import pytest

from simulations.refit_check import main


@pytest.mark.slow
def test_refit_check_reports_the_three_proposals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["weibull", "2000", "--mu-warm", "2", "--steps", "20", "--warmup", "16"]) == 0
    out = capsys.readouterr().out
    assert "posterior sd from the exact mode" in out
    labels = ("exact Laplace, inflate 1.1", "DP Laplace, inflate 1.1", "refitted at 8 and 16, then frozen")
    for label in labels:
        line = next(ln for ln in out.splitlines() if label in ln)
        assert "per proposal" in line and "R-hat" in line
