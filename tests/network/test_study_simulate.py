"""The custodian's workflow over ``confar run --simulate`` with daemon processes that require approval
(``[simulate] party_require_approval``, issue 37): the run is refused before anything is released while the
study is not approved (naming the study and the command that approves it); each registry's custodian
approves it with ``confar-party study approve``; the run goes on (``--resume``); a revocation at one
registry stops the next session; a continuation past the study's cap is refused by its dry run; a new
approval with room lets the run finish. Nothing is charged by a refused invocation."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXPERIMENT = """
[experiment]
name = "study-simulate"
output_dir = "out"
seed = 5

[model]
name = "beta-bernoulli"

[sampler]
kind = "penalty"
chains = 4
iterations = 12
warmup = 4
proposal_scale = 0.05
init = [0.3]
tau = 20.0
n_records = 600

[reveal]
mode = "sign"

[privacy]
epsilon = 20.0
delta = 1e-6

[output]
formats = []

[simulate]
parties = 3
records = 200
party_epsilon = 50.0
party_delta = 1e-6
party_require_approval = true

[study]
title = "Prevalence (simulated registries)"
reference = "AC-2026-099"
expires = "2027-12-31"
"""


def test_the_custodians_workflow_over_simulated_registries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main as confar
    from parties.cli import main as confar_party
    from proto.study import read_study_file

    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    study_file = tmp_path / "study.json"
    assert confar(["study", "request", str(exp), "--out", str(study_file)]) == 0
    study = read_study_file(study_file)
    out = tmp_path / "out"
    sim = out / "simulation"
    expires = (dt.date.today() + dt.timedelta(days=90)).isoformat()

    def ledger(pid: int) -> bytes:
        path = sim / f"party-{pid}" / "state" / "privacy_ledger.json"
        return path.read_bytes() if path.exists() else b""

    def approve(pid: int, cap: float) -> None:
        cfg = str(sim / f"party-{pid}" / "party.toml")
        args = ["study", "approve", str(study_file), "--config", cfg, "--max-epsilon", repr(cap)]
        assert confar_party([*args, "--expires", expires]) == 0

    def spent(pid: int) -> float:
        cfg = str(sim / f"party-{pid}" / "party.toml")
        report = tmp_path / f"report-{pid}.html"
        assert confar_party(["report", "--config", cfg, "--out", str(report), "--json"]) == 0
        (row,) = [s for s in json.loads(report.with_suffix(".json").read_text())["studies"]]
        return float(row["spent_epsilon"])

    run = ["run", "--resume", str(out), "--no-progress"]
    # not approved: refused before anything is released, naming the study and how to approve it
    assert confar(["run", str(exp), "--simulate", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert (
        f"study {study.short} ('Prevalence (simulated registries)', reference 'AC-2026-099') is not approved"
        in err
    )
    assert "confar-party study approve study.json" in err
    assert all(ledger(pid) == b"" for pid in (1, 2, 3))
    # approved by every registry's custodian: the run goes on (stopped here after 3 batches, as if crashed)
    for pid in (1, 2, 3):
        approve(pid, 15.0)
    assert confar([*run, "--stop-after-batches", "3"]) == 130
    charged = [ledger(pid) for pid in (1, 2, 3)]
    assert all(charged)
    # revoked at registry 2: the next session is refused there, nothing more charged
    cfg2 = str(sim / "party-2" / "party.toml")
    assert (
        confar_party(["study", "revoke", study.digest[:12], "--config", cfg2, "--reason", "consent review"])
        == 0
    )
    capsys.readouterr()
    assert confar(run) == 1
    err = capsys.readouterr().err
    assert "party-2" in err and "was revoked" in err and "consent review" in err
    assert charged == [ledger(pid) for pid in (1, 2, 3)]
    # approved again with a cap the rest of the run would pass: refused by the dry run, nothing charged
    for pid in (1, 2, 3):
        approve(pid, spent(pid) * 1.02)
    assert confar(run) == 1
    assert (
        f"would exceed the privacy budget this registry approved for study {study.short}"
        in capsys.readouterr().err
    )
    assert charged == [ledger(pid) for pid in (1, 2, 3)]
    # room again: the run finishes, every registry's study spend within its cap
    for pid in (1, 2, 3):
        approve(pid, 15.0)
    assert confar(run) == 0
    for pid in (1, 2, 3):
        assert 0 < spent(pid) <= 15.0
