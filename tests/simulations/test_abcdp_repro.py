"""Reproduction commands at toy sizes: they run, write a figure and a table, and fail clearly without data;
the toy comparison with the reference code reads its file and computes z as by hand."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from simulations.abcdp_repro import cli, common, covid, flip, toy


def test_shared_data_is_found_or_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        common.load_shared_json("abcdp_toy.json", tmp_path)
    assert cli.main(["toy", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path)]) == 2


def _has_outputs(out: Path, name: str) -> None:
    for ext in ("png", "csv", "md"):
        assert (out / f"{name}.{ext}").stat().st_size > 0


@pytest.mark.slow
def test_flip_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = flip.flip_repro(tmp_path, n_rho=10, mc_draws=2000, data_sizes=(10, 1000), cs=(10,),
                                  eps_totals=(1.0, 100.0))
    _has_outputs(tmp_path, "flip")
    assert len(rows) == 4 and all(r["max_z"] < 5.0 for r in rows)
    assert cli.main(["flip", "--out", str(tmp_path / "cli"), "--n-rho", "3", "--mc-draws", "50"]) == 0
    assert "Flip probability" in capsys.readouterr().out


@pytest.mark.slow
def test_toy_command_small(tmp_path: Path) -> None:
    rows = toy.toy_repro(
        tmp_path,
        toy.ToyGrid(
            runs=2,
            n_candidates=300,
            n_obs=300,
            cs=[5],
            eps_abcs=[0.2, 0.5],
            eps_totals=[1.0, math.inf],
        ),
    )
    _has_outputs(tmp_path, "toy")
    assert len(rows) == 2 * 2 * 2
    assert all(r["mean_accepted"] <= 5 for r in rows)


@pytest.mark.slow
def test_covid_and_tb_commands_small(tmp_path: Path) -> None:
    rows = covid.covid_repro(
        tmp_path,
        covid.CovidSettings(
            n_candidates=2000,
            c=3,
            eps_abc=0.05,
            eps_totals=(math.inf, 10.0),
            n_features=50,
        ),
    )
    _has_outputs(tmp_path, "covid")
    assert rows[0]["n_accepted"] == 3
    assert cli.main(["tb", "--out", str(tmp_path), "--records", "20", "--candidates", "40",
                             "--pseudo", "1", "--c", "3"]) == 0
    _has_outputs(tmp_path, "tb")


# -- toy comparison with the reference code's independent runs -------------------------------------------


def _reference_file(data_dir: Path | None = None) -> dict[str, Any]:
    base = data_dir if data_dir is not None else common.default_data_dir()
    data: dict[str, Any] = json.loads((base / toy.TOY_REFERENCE_FILE).read_text())
    return data


def test_z_score_by_hand() -> None:
    assert toy.z_score(0.03, 0.003, 0.02, 0.004) == pytest.approx(2.0)  # 0.01 / √(9e-6 + 16e-6)
    assert toy.z_score(0.02, 0.004, 0.03, 0.003) == pytest.approx(-2.0)


def test_toy_reference_is_read_from_the_shipped_file() -> None:
    raw = _reference_file()
    ref = toy.load_toy_reference()
    assert (ref.c, ref.eps_abc, ref.runs) == (raw["settings"]["c"], raw["settings"]["eps_abc"],
                                              raw["settings"]["runs"])
    assert len(ref.cells) == len(raw["cells"]) > 0
    for cell, rc in zip(ref.cells, raw["cells"], strict=True):
        assert cell.eps_total == float(rc["eps_total"]) and cell.resample == rc["resample"]
        assert (cell.mae, cell.se) == (rc["mae"], rc["se"])
    st = raw["settings"]
    same = (int(st["n_observed"]), int(st["max_candidates"]), int(st["rff_features"]),
            math.sqrt(st["rff_bandwidth_sq"]))
    assert ref.setting_differences(*same) == []
    assert ref.setting_differences(300, *same[1:]) == [f"N 300 vs {st['n_observed']}"]


@pytest.mark.slow
def test_toy_comparison_reads_the_file_and_computes_z(tmp_path: Path) -> None:
    """At a small size, on an altered copy of the reference file: z from the file's values, by hand."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(common.default_data_dir() / "abcdp_toy.json", data_dir)
    raw = _reference_file()
    for k, cell in enumerate(raw["cells"]):  # shifted so that hard-coded reference numbers would fail
        cell["mae"] = round(cell["mae"] + 0.011 * (k + 1), 6)
        cell["se"] = round(cell["se"] * (k + 2), 6)
    (data_dir / toy.TOY_REFERENCE_FILE).write_text(json.dumps(raw))
    reread = _reference_file(data_dir)
    eps_totals = sorted({float(c["eps_total"]) for c in reread["cells"]})
    rows = toy.toy_repro(
        tmp_path / "out",
        toy.ToyGrid(
            runs=3,
            n_candidates=400,
            n_obs=300,
            cs=[reread["settings"]["c"]],
            eps_abcs=[reread["settings"]["eps_abc"], 0.3],
            eps_totals=eps_totals,
            data_dir=data_dir,
        ),
    )
    _has_outputs(tmp_path / "out", "toy")
    with (tmp_path / "out" / "toy_reference.csv").open() as fh:
        written = list(csv.DictReader(fh))
    assert len(written) == len(reread["cells"])
    for cell, line in zip(reread["cells"], written, strict=True):
        ours = [r for r in rows if r["eps_abc"] == reread["settings"]["eps_abc"]
                and r["eps_total"] == float(cell["eps_total"])
                and (cell["resample"] is None or r["resample"] == cell["resample"])]
        assert ours and all(r["ref_mae"] == cell["mae"] and r["ref_se"] == cell["se"] for r in ours)
        m, s = ours[0]["mae_mean"], ours[0]["mae_se"]
        z = (m - cell["mae"]) / math.sqrt(s**2 + cell["se"] ** 2)
        assert all(r["z"] == pytest.approx(z, rel=1e-12) for r in ours)
        assert float(line["ref_mae"]) == pytest.approx(cell["mae"], rel=1e-3)
        assert float(line["z"]) == pytest.approx(z, rel=1e-3)  # the CSV holds 4 significant digits
    # cells outside the reference (another ε_abc) carry no comparison
    assert all(math.isnan(r["z"]) for r in rows if r["eps_abc"] == 0.3)


def test_toy_comparison_leaves_out_cells_outside_the_grid_and_needs_the_file(tmp_path: Path) -> None:
    ref = toy.load_toy_reference()
    row = {"c": ref.c + 1, "eps_abc": ref.eps_abc, "eps_total": ref.cells[0].eps_total, "resample": False,
           "mae_mean": 0.03, "mae_se": 0.001, "runs_with_accepts": 5}
    assert toy.compare_toy_to_reference([row], ref) == []
    assert len(toy.compare_toy_to_reference([{**row, "c": ref.c}], ref)) >= 1
    shutil.copy(common.default_data_dir() / "abcdp_toy.json", tmp_path)
    with pytest.raises(FileNotFoundError, match=toy.TOY_REFERENCE_FILE):
        toy.load_toy_reference(tmp_path)
    (tmp_path / toy.TOY_REFERENCE_FILE).write_text(json.dumps({"cells": []}))
    with pytest.raises(ValueError, match="expected 'settings'"):
        toy.load_toy_reference(tmp_path)
