"""The statistician's formula study from the CLI (issue 40): ``died ~ age + C(sex) + biomarker`` with an
interaction once sampled for minutes and then failed in the output writer (``C(sex)[T.1.0]``,
``age:biomarker``), with no outputs; and a registry's sex stored as 'F' / 'M' was refused ("values must be a
list of numbers"). A short ``confar run --simulate`` over three registry daemons reading CSV files now writes
every output under the names ``sex[1]`` (or ``sex[M]``) and ``age.biomarker``."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli import main as confar
from simulations.launcher import write_csv

pytestmark = pytest.mark.slow

STUDY = """
[experiment]
name = "formula-study"
output_dir = "out"
seed = 40

[model]
formula = "died ~ age + C(sex) + biomarker + age:biomarker"
family = "bernoulli"
[model.columns]
died = {{ values = [0, 1] }}
age = [20, 90]
sex = {{ values = {sex} }}
biomarker = [0, 5]

[sampler]
kind = "mh"
chains = 2
iterations = 40
warmup = 10
proposal_scale = 0.05

[reveal]
mode = "sign"

[simulate]
data = ["r1.csv", "r2.csv", "r3.csv"]
"""


def registries(rng: np.random.Generator, labels: bool, n: int = 40) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(3):
        age = np.round(rng.uniform(20, 90, n), 1)
        male = rng.integers(0, 2, n)
        bio = np.round(rng.uniform(0, 5, n), 2)
        p = 1 / (1 + np.exp(-(-3 + 0.03 * age + 0.5 * male + 0.2 * bio)))
        sex = np.where(male == 1, "M", "F") if labels else male.astype(np.float64)
        out.append({"age": age, "sex": sex, "biomarker": bio, "died": (rng.random(n) < p).astype(np.float64)})
    return out


def summary_params(out: Path) -> list[str]:
    with open(out / "summary.csv", newline="") as fh:
        return [r["param"] for r in csv.DictReader(fh)]


@pytest.mark.parametrize("labels", [False, True], ids=["sex-0-1", "sex-F-M"])
def test_categorical_and_interaction_terms_write_outputs(tmp_path: Path, labels: bool) -> None:
    for i, cols in enumerate(registries(np.random.default_rng(1), labels), start=1):
        write_csv(tmp_path / f"r{i}.csv", cols)
    assert ("F," in (tmp_path / "r1.csv").read_text()) == labels
    sex = '["F", "M"]' if labels else "[0, 1]"
    (tmp_path / "study.toml").write_text(textwrap.dedent(STUDY.format(sex=sex)))
    out = tmp_path / "run"
    assert confar(["run", str(tmp_path / "study.toml"), "--check", "--simulate"]) == 0
    rc = confar(["run", str(tmp_path / "study.toml"), "--simulate", "--out", str(out), "--no-progress"])
    assert rc == 0
    names = ["Intercept", "age", "sex[M]" if labels else "sex[1]", "biomarker", "age.biomarker"]
    assert summary_params(out) == names
    with open(out / "draws.csv", newline="") as fh:
        assert next(csv.reader(fh)) == ["chain", "draw", *names]
    for f in ("posterior.nc", "trace.png", "posterior.png", "provenance.json"):
        assert (out / f).is_file(), f
    # each daemon read its records as a registry holds them: the labels, not their codes
    held = (out / "simulation" / "party-2" / "data.csv").read_text().splitlines()
    assert held[0].split(",") == ["age", "biomarker", "died", "sex"]
    assert {row.split(",")[3] for row in held[1:]} == ({"F", "M"} if labels else {"0", "1"})
