"""``confar privacy audit`` kind ``worst-record`` (issue 35 item 2): a run charged at its worst record is
consistent with the ledger's per-run event, a broken accountant charging the average record instead is
flagged VIOLATED with exit code 1, and a bad file is refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.cli import main
from tests.simulations.test_privacy_audit import EXAMPLES, Capsys, _audit


def test_worst_record_run_is_consistent(tmp_path: Path, capsys: Capsys) -> None:
    rc, doc = _audit(tmp_path, "worst-record-sum", capsys, runs=6000)
    assert rc == 0 and doc["verdict"].startswith("in memory: consistent")
    assert doc["mechanism"]["kind"] == "worst-record" and doc["mechanism"]["decisions"] == 24
    assert "the ledger's per-run event" in doc["claim"]["text"]
    res = doc["in_memory"]
    assert res["violated_by"] is None and 0 < res["empirical_eps_lower"] <= doc["claim"]["eps_at_delta"]
    # the audit's canary: the run moves it by a μ the test nearly reaches, the claim above it
    assert res["empirical_mu_lower"] <= doc["neighbours"]["canary_mu"] <= doc["claim"]["mu"]


def test_average_record_charge_is_violated(tmp_path: Path, capsys: Capsys) -> None:
    rc, doc = _audit(tmp_path, "broken-worst-record", capsys, runs=6000)
    assert rc == 1 and "VIOLATED" in doc["verdict"] and doc["mechanism"]["charge"] == "average-record"
    assert doc["in_memory"]["violated_by"].startswith("run LLR")
    assert doc["in_memory"]["empirical_mu_lower"] > doc["claim"]["mu"]  # the canary beats the average


BAD = [  # (edits of worst-record-sum.toml, the message)
    ({'kind = "worst-record"': 'kind = "worst-record"\ncharge = "median"'}, "mechanism.charge: must be one"),
    ({"steps = 24": "steps = 1"}, "audit.steps: a worst-record audit observes a run"),
    ({'reveal = "sum"': 'reveal = "sign"'}, "mechanism.reveal: must be sum"),
    ({'name = "bayes-logistic"': 'name = "beta-bernoulli"'}, "model.name: kind 'worst-record' audits"),
    ({"sd = 1.0, ": ""}, "mechanism.params.penalty: kind 'worst-record' needs a penalty with sd"),
]


@pytest.mark.parametrize(("edits", "message"), BAD)
def test_bad_worst_record_file_is_refused_naming_the_key(
    tmp_path: Path, capsys: Capsys, edits: dict[str, str], message: str
) -> None:
    text = (EXAMPLES / "worst-record-sum.toml").read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new, 1)
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    assert main(["privacy", "audit", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
