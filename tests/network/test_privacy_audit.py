"""``confar privacy audit`` with its confirmation over daemon processes: the penalty's sign reveal attacked
through real daemons agrees with the registry's own claim. The audits without daemons are
tests/simulations/test_privacy_audit.py, whose examples folder this uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coordinator.cli import main
from tests.simulations.test_privacy_audit import EXAMPLES


@pytest.mark.slow
def test_confirmation_over_real_daemons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "penalty-sign.toml").read_text()
    text = re.sub(r"(?m)^runs = .*$", "runs = 2000", text)
    text = re.sub(r"(?m)^daemon_runs = .*$", "daemon_runs = 400", text)
    cfg = tmp_path / "a.toml"
    cfg.write_text(text)
    assert main(["privacy", "audit", str(cfg), "--out", str(tmp_path / "o")]) == 0
    doc = json.loads((tmp_path / "o" / "penalty-sign.json").read_text())
    assert doc["daemons"]["runs_per_dataset"] == 400 and doc["daemons"]["violated_by"] is None
    assert "daemons: consistent" in doc["verdict"]
    capsys.readouterr()
