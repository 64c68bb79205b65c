"""A consortium's own model (issue 14), the registry's side: ``confar-party check-config`` imports the models
its ``[allow] models`` name from ``[allow] model_path`` and evaluates the likelihood on the first records;
every problem is named with its key and no record value is shown. The coordinator's side is
tests/coordinator/test_plugin_workflow.py, whose plug-in module this borrows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parties.cli import main as confar_party
from parties.config import ConfigError, load_config
from simulations.launcher import PartyOptions, party_config_text, write_csv
from tests.coordinator.test_plugin_workflow import experiment


def test_check_config_imports_allowed_models_and_evaluates_the_likelihood(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment(tmp_path, "broken_models:NoSynthetic")  # writes mymodels/
    pdir = tmp_path / "party-1"
    pdir.mkdir()
    write_csv(pdir / "data.csv", {"x": np.r_[np.zeros(3), 6.0, 1.0]})

    def party(models: str, data_model: str, path: str = '"../mymodels"') -> Path:
        text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=()))
        text = text.replace("models = []", f"models = {models}\nmodel_path = [{path}]")
        cfg = pdir / "party.toml"
        cfg.write_text(text + f'\n[data]\npath = "data.csv"\nmodel = "{data_model}"\n')
        return cfg

    ok = party('["broken_models:NoSynthetic"]', "broken_models:NoSynthetic")
    assert confar_party(["check-config", "--config", str(ok), "--insecure"]) == 0
    out = capsys.readouterr().out
    assert "allow: analyses broken_models:NoSynthetic found" in out
    assert "model: broken_models:NoSynthetic: log-likelihood finite on 5 records at 3 prior draws" in out
    # an allowed model that does not import, a misspelled class: exit 2, the key named
    cfg = party('["broken_models:NoSynthetic", "broken_models:NoSuchClass"]', "broken_models:NoSynthetic")
    assert confar_party(["check-config", "--config", str(cfg), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "allow.models[1]:" in err and "has no class 'NoSuchClass'" in err
    # the log-likelihood is evaluated on the first records: row 4 gives -inf, its value is not shown
    cfg = party('["broken_models:InfiniteLik"]', "broken_models:InfiniteLik")
    assert confar_party(["check-config", "--config", str(cfg), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "data.model: record_log_likelihood is not finite at prior draws in row 4" in err
    assert "6.0" not in err
    # the plug-in folder must exist
    cfg = party('["broken_models:NoSynthetic"]', "broken_models:NoSynthetic", path='"../nothere"')
    with pytest.raises(ConfigError, match=r"allow\.model_path\[0\]: no such folder"):
        load_config(cfg, insecure=True)
