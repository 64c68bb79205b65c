"""Reproduction commands at toy sizes: they run, write a figure and a table, and fail clearly without data."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simulations import abcdp_repro


def test_shared_data_is_found_or_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        abcdp_repro.load_shared_json("abcdp_toy.json", tmp_path)
    assert abcdp_repro.main(["toy", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path)]) == 2


def _has_outputs(out: Path, name: str) -> None:
    for ext in ("png", "csv", "md"):
        assert (out / f"{name}.{ext}").stat().st_size > 0


def test_flip_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = abcdp_repro.flip_repro(tmp_path, n_rho=10, mc_draws=2000, data_sizes=(10, 1000), cs=(10,),
                                  eps_totals=(1.0, 100.0))
    _has_outputs(tmp_path, "flip")
    assert len(rows) == 4 and all(r["max_z"] < 5.0 for r in rows)
    assert abcdp_repro.main(["flip", "--out", str(tmp_path / "cli"), "--n-rho", "3", "--mc-draws", "50"]) == 0
    assert "Flip probability" in capsys.readouterr().out


@pytest.mark.slow
def test_toy_command_small(tmp_path: Path) -> None:
    rows = abcdp_repro.toy_repro(tmp_path, runs=2, n_candidates=300, n_obs=300, cs=[5], eps_abcs=[0.2, 0.5],
                                 eps_totals=[1.0, math.inf])
    _has_outputs(tmp_path, "toy")
    assert len(rows) == 2 * 2 * 2
    assert all(r["mean_accepted"] <= 5 for r in rows)


@pytest.mark.slow
def test_covid_and_tb_commands_small(tmp_path: Path) -> None:
    rows = abcdp_repro.covid_repro(tmp_path, n_candidates=2000, c=3, eps_abc=0.05,
                                   eps_totals=(math.inf, 10.0), n_features=50)
    _has_outputs(tmp_path, "covid")
    assert rows[0]["n_accepted"] == 3
    assert abcdp_repro.main(["tb", "--out", str(tmp_path), "--records", "20", "--candidates", "40",
                             "--pseudo", "1", "--c", "3"]) == 0
    _has_outputs(tmp_path, "tb")
