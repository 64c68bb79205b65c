"""``confar run --simulate`` over daemon processes (``simulations.run_local``): a run stopped after 3 batches
and resumed with ``--resume`` restarts the daemons on their persisted state, which replay the run step the
coordinator never checkpointed; ``--no-reference`` writes the outputs without the plain reference fit.
``confar run`` over daemons in the test's process is tests/coordinator/test_run.py, whose experiment this
borrows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.coordinator.test_run import CHAINS, EXPERIMENT, M, charged_steps


@pytest.mark.slow
def test_cli_simulate_stop_and_resume_restarts_the_daemons(tmp_path: Path) -> None:
    """`confar run --simulate` (real daemon processes), stopped after 3 batches, resumed with `--resume`: the
    daemons restart on their persisted state and replay the run step the coordinator never checkpointed."""
    from coordinator.cli import main

    full = EXPERIMENT.format(chains=CHAINS, iterations=8, target=5.0)
    text = full.split("[coordinator]")[0] + "[model]" + full.split("[model]")[1]  # no coordinator, no parties
    text += "[simulate]\nparties = 3\nrecords = 60\nparty_gdp_mu = 10.0\n"
    cfg = tmp_path / "exp.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--stop-after-batches", "3"]) == 130
    assert json.loads((out / "checkpoint" / "state.json").read_text())["run_step"] == 2
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    st = json.loads((out / "checkpoint" / "state.json").read_text())
    assert st["done"] and st["run_step"] == 8 and st["rows"] == 8
    sim = out / "simulation"
    for pid in range(1, M + 1):
        assert charged_steps(sim, pid) == list(range(1, 9))
        assert "replayed run step 3" in (sim / f"party-{pid}" / "state" / "audit.log").read_text()


@pytest.mark.slow
def test_relative_resume_folder_from_another_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 item 8: `--resume RELATIVE_DIR` resolves against the caller's working directory, as --out
    does (it used to resolve the daemons' TLS files against it twice)."""
    from coordinator.cli import main

    full = EXPERIMENT.format(chains=CHAINS, iterations=6, target=5.0)
    text = full.split("[coordinator]")[0] + "[model]" + full.split("[model]")[1]
    text += "[simulate]\nparties = 3\nrecords = 60\nparty_gdp_mu = 10.0\n"
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "exp.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    args = ["run", "exp/exp.toml", "--simulate", "--no-progress", "--out", "runs/a"]
    assert main([*args, "--stop-after-batches", "2"]) == 130
    assert main(["run", "--resume", "runs/a", "--no-progress"]) == 0
    assert json.loads((tmp_path / "runs" / "a" / "checkpoint" / "state.json").read_text())["done"]


@pytest.mark.slow
def test_no_reference_writes_the_outputs_without_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: `--no-reference` skips the plain fit of the pooled records; the outputs are written, with
    no reference column or label. The same run without the flag has one (converged), with its progress."""
    from coordinator.cli import main

    full = EXPERIMENT.format(chains=CHAINS, iterations=12, target=5.0)
    text = full.split("[coordinator]")[0] + "[model]" + full.split("[model]")[1]
    text = text.replace("formats = []", 'formats = ["netcdf", "summary", "provenance"]')
    text += "[simulate]\nparties = 3\nrecords = 60\nparty_gdp_mu = 10.0\n"
    cfg = tmp_path / "exp.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--no-reference"]) == 0
    err = capsys.readouterr().err
    assert "no reference posterior (--no-reference)" in err and "reference posterior: sampling" not in err
    summary = (out / "summary.txt").read_text()
    assert (out / "posterior.nc").is_file() and "reference:" not in summary and "ref_mean" not in summary
    assert json.loads((out / "provenance.json").read_text())["outputs"]["reference"] is None

    assert main(["run", str(cfg), "--simulate", "--no-progress", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "reference posterior: a plain (not private) fit of the 180 pooled records" in err
    assert "reference posterior: converged in" in err
    summary = (out / "summary.txt").read_text()
    assert "reference: converged reference: plain MH on the pooled records" in summary
    assert json.loads((out / "provenance.json").read_text())["outputs"]["reference"].startswith("converged")
