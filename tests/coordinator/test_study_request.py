"""``confar study request`` (coordinator/study_request.py, issue 37): the experiment's study document, made
once from the file as written (a warm start's ellipsoid set later does not change what the run sends), its
digest changed by any change of what a registry approves, and a file without a privacy target refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.experiment import load_experiment
from proto.study import Study, read_study_file

EXPERIMENT = """
[experiment]
name = "study"
output_dir = "out"
seed = 3

[model]
name = "bayes-logistic"
[model.params]
p = 2

[sampler]
kind = "penalty"
chains = 4
iterations = 40
warmup = 20
sd = 2.0
max_sensitivity = 1.0
proposal_scale = 0.2

[reveal]
mode = "sign"

[privacy]
epsilon = 30.0
delta = 1e-6

[simulate]
parties = 3
records = 300
party_epsilon = 100.0
party_delta = 1e-6
party_neighbours = "add-remove"

[study]
title = "Demo study"
reference = "AC-1"
expires = "2027-06-30"
"""


def test_the_request_is_the_document_the_run_sends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(EXPERIMENT)
    assert main(["study", "request", str(exp_file), "--out", str(tmp_path / "study.json")]) == 0
    assert "asks each of 3 registries for epsilon 30 at delta 1e-06" in capsys.readouterr().out
    study = read_study_file(tmp_path / "study.json")
    exp = load_experiment(exp_file)
    assert exp.study_text == study.text()
    doc = study.doc
    assert doc["decisions"] == {"batches": 40, "batch_size": 4, "total": 160}
    assert (
        doc["privacy"]["neighbours"] == "add-remove"
        and doc["privacy"]["per_registry"][2]["identity"] == "party-3"
    )
    assert doc["reveal"] == {"modes": ["sign"], "security": "semi-honest", "threshold": 1}
    assert doc["decision_plan"] == exp.session_params()
    # what the run sets later (a warm start's ellipsoid, a planned length) keeps the document
    later = dataclasses.replace(exp, model_params={**exp.model_params, "x_center": [0.0, 0.0]})
    assert later.study_text == exp.study_text
    # a changed bound, reveal mode or epsilon is another study
    for old, new in (
        ("sd = 2.0", "sd = 2.5"),
        ('mode = "sign"', 'mode = "blinded"'),
        ("epsilon = 30.0", "epsilon = 31.0"),
    ):
        exp_file.write_text(EXPERIMENT.replace(old, new))
        assert Study.from_text(load_experiment(exp_file).study_text).digest != study.digest, new


def test_a_request_without_a_privacy_target_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(EXPERIMENT.replace("[privacy]\nepsilon = 30.0\ndelta = 1e-6\n", ""))
    assert main(["study", "request", str(exp_file), "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert "exp.toml: study: a study request states the epsilon" in err and not (tmp_path / "s.json").exists()
    exp_file.write_text(EXPERIMENT.replace('expires = "2027-06-30"', 'expires = "June"'))
    assert main(["study", "request", str(exp_file), "--out", str(tmp_path / "s.json")]) == 2
    assert "study.expires" in capsys.readouterr().err
    exp_file.write_text(EXPERIMENT.split("[study]")[0])
    assert main(["study", "request", str(exp_file), "--out", str(tmp_path / "s.json")]) == 2
    assert "study: missing table" in capsys.readouterr().err


def test_simulated_registries_that_require_approval_need_a_budget(tmp_path: Path) -> None:
    from coordinator.tables import ExperimentError

    exp_file = tmp_path / "exp.toml"
    text = EXPERIMENT.replace(
        'party_neighbours = "add-remove"', 'party_neighbours = "add-remove"\nparty_require_approval = true'
    )
    exp_file.write_text(text)
    assert load_experiment(exp_file).simulate.party_require_approval  # type: ignore[union-attr]
    exp_file.write_text(text.replace("party_epsilon = 100.0\nparty_delta = 1e-6\n", ""))
    with pytest.raises(ExperimentError, match=r"simulate\.party_require_approval: a study's cap is charged"):
        load_experiment(exp_file)
