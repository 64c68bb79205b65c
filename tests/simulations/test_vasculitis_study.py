"""The vasculitis example's data (``examples/vasculitis/``) is what its generator writes, and has the shape
the example promises: seven registries of unequal size, about 10,000 patients, about 60 % censored, every
value inside the bounds ``examples/vasculitis.toml`` declares (a registry refuses a record outside them)."""

from __future__ import annotations

import csv
from pathlib import Path

from coordinator.experiment import load_experiment
from simulations import vasculitis_study

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_data_is_the_generator_s(tmp_path: Path) -> None:
    assert vasculitis_study.main(["--out", str(tmp_path)]) == 0
    for j in range(1, 8):
        name = f"registry-{j}.csv"
        assert (tmp_path / name).read_bytes() == (ROOT / "examples" / "vasculitis" / name).read_bytes(), name


def test_the_data_has_the_example_s_shape() -> None:
    exp = load_experiment(ROOT / "examples" / "vasculitis.toml")
    columns = exp.model_params["columns"]
    sizes, events = [], 0
    for j in range(1, 8):
        with open(ROOT / "examples" / "vasculitis" / f"registry-{j}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        sizes.append(len(rows))
        events += sum(int(r["event"]) for r in rows)
        for name in ("time", "creatinine"):
            lo, hi = columns[name]
            assert all(lo <= float(r[name]) <= hi for r in rows), (j, name)
        assert all(18 <= int(r["age"]) <= 90 for r in rows), j
        assert {r["sex"] for r in rows} <= {"F", "M"} and {r["anca"] for r in rows} <= {"MPO", "PR3"}
    assert sum(sizes) == 10_000 and len(set(sizes)) == 7 and max(sizes) >= 6 * min(sizes)
    assert 0.55 <= 1 - events / 10_000 <= 0.65  # about 60 % censored (62.2 % with the committed seed)
