"""A budget path for formula models (issue 40 item 2, issue 35 item 0): ``confar privacy plan`` and ``confar
run --check`` once refused a planned formula study ("model 'formula' has no synthetic_data, so no pilot can
be planned from it"); the pilot is now the formula's design dataset (public: the declared columns and the
``[design]`` guesses), the warm start releases its scores in the pilot's basis at the model's exact bound,
and the plan chooses the cap when the file leaves it out. Also the keys this adds, each refusal naming its
key, and ``[simulate] data``'s record counts as the registries' public sizes (they were 500 each)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import numpy as np
import pytest

from coordinator import planner
from coordinator.cli import main as confar
from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from simulations.launcher import write_csv

SIZES = (1500, 1000, 1200)

STUDY = """
[experiment]
name = "formula-planned"
output_dir = "out"
seed = 5

[model]
formula = "died ~ age + C(sex) + biomarker"
family = "bernoulli"
[model.columns]
died = { values = [0, 1] }
age = { lower = 18, upper = 100, integer = true }
sex = { values = ["F", "M"] }
biomarker = [0, 10]

[design]
rate = 0.5

[warm_start]
mu = 2.0
inflate = 1.2

[sampler]
kind = "penalty"
chains = 4
iterations = 400
proposal = "laplace"
sd = 2.0

[privacy]
target_epsilon = 60.0
delta = 1e-5
min_ess = 30

[reveal]
mode = "sign"

[output]
formats = ["summary", "privacy", "provenance"]

[simulate]
data = ["r1.csv", "r2.csv", "r3.csv"]
fixed_noise_keys = true
party_epsilon = 60.0
party_delta = 1e-5
party_neighbours = "add-remove"
party_colluding = 0
"""


def write_study(folder: Path, text: str = STUDY, seed: int = 3) -> Path:
    """Three registries' CSV files (sex as the labels F / M, about half of them died) and the study."""
    rng = np.random.default_rng(seed)
    for j, n in enumerate(SIZES, start=1):
        age = np.clip(np.round(rng.normal(60, 12, n)), 18, 100)
        male = rng.random(n) < 0.5
        bio = np.clip(np.round(rng.normal(4, 1.5, n), 2), 0, 10)
        eta = -4 + 0.04 * age + 0.5 * male + 0.2 * bio
        died = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.int64)
        cols = {"died": died, "age": age, "sex": np.where(male, "M", "F"), "biomarker": bio}
        write_csv(folder / f"r{j}.csv", cols)
    path = folder / "study.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow
def test_privacy_plan_prints_a_plan_for_a_formula_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path)
    assert confar(["privacy", "plan", str(path), "--epsilon", "20"]) == 0
    out = capsys.readouterr().out
    assert "no synthetic_data" not in out
    assert "design dataset of 3700 public records in 3 registries" in out  # the files' record counts
    assert "rate = 0.5" in out  # the stated assumption
    lines = [line for line in out.splitlines() if line.strip().startswith("eps = ")]
    assert lines[0].strip().startswith("eps = 60:") and lines[0].endswith("-> usable"), out
    assert lines[1].strip().startswith("eps = 20:") and "REFUSED" in lines[1], out
    assert "inside the cap c <=" in lines[0]  # the cap the plan chose (the file leaves it out)


def test_run_check_plans_a_formula_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(tmp_path)
    assert confar(["run", str(path), "--check", "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "plan from the pilot (a design dataset" in out and "expected ESS" in out, out


def test_a_formula_run_is_planned_in_the_pilot_s_basis_with_the_plan_s_cap(tmp_path: Path) -> None:
    exp = load_experiment(write_study(tmp_path))
    assert exp.simulate is not None and exp.simulate.records == SIZES
    assert exp.warm_start is not None and exp.warm_start.n_records == sum(SIZES)
    assert exp.warm_start.ellipsoid is None  # a formula has no covariate ellipsoid: no moments release
    assert exp.budget_target is not None and exp.budget_target.choose_cap
    assert exp.sampler.penalty is not None and exp.sampler.penalty.max_sensitivity is None
    model = exp.model()
    planned, pilot = planner.with_pilot(exp, model)
    assert pilot is not None and planned.warm_start is not None
    assert planned.warm_start.start is None  # bernoulli with an intercept jumps from 0 (the prevalence)
    basis = np.asarray(planned.warm_start.basis)
    np.testing.assert_allclose(basis @ basis.T, pilot.laplace.cov, rtol=1e-9, atol=1e-15)
    assert planned.warm_start.basis_clip == model.score_norm_bound(None, basis)  # type: ignore[attr-defined]
    again, _ = planner.with_pilot(exp, model)
    assert again == planned  # deterministic: a resumed run makes the same
    p = planner.plan(planned, model, pilot.laplace)
    assert 0.99 < p.stats.asked < 1.0  # the 99.9 % quantile of c
    run = planner.planned_experiment(planned, p)
    assert run.sampler.penalty is not None and run.sampler.penalty.max_sensitivity == p.stats.cap
    # a cap in the file is kept, and one that refuses most proposals is named with the plan's choice
    fixed = dataclasses.replace(
        planned,
        budget_target=dataclasses.replace(planned.budget_target, choose_cap=False, epsilon=20.0),  # type: ignore[arg-type]
        sampler=dataclasses.replace(
            planned.sampler,
            penalty=dataclasses.replace(planned.sampler.penalty, max_sensitivity=0.6),  # type: ignore[arg-type]
        ),
    )
    q = planner.plan(fixed, model, pilot.laplace)
    assert q.stats.cap == 0.6 and q.stats.asked < 0.9
    advice = planner.cap_advice(fixed, model, pilot.laplace, q)
    assert advice is not None and "max_sensitivity = 0.6 refuses" in advice and f"{p.stats.cap:.3g}" in advice
    assert planner.cap_advice(planned, model, pilot.laplace, p) is None


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("rate = 0.5", "rate = 1.5", "design.rate"),
        ("rate = 0.5", "coefficients = { agee = 0.1 }", "design.coefficients.agee"),
        ("rate = 0.5", "columns = { age = { mean = 60 } }", "design.columns.age.sd"),
        ("rate = 0.5", "columns = { sex = { shares = [0.5] } }", "design.columns.sex.shares"),
        ("rate = 0.5", "prevalence = 0.5", "design.prevalence"),
        ("inflate = 1.2", "inflate = 1.2\nellipsoid = 0.99", "warm_start.ellipsoid"),
        (
            "target_epsilon = 60.0\ndelta = 1e-5\nmin_ess = 30",
            "epsilon = 60.0\ndelta = 1e-5",
            "sampler.max_sensitivity",
        ),
    ],
)
def test_refusals_name_the_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in STUDY
    with pytest.raises(ExperimentError, match=key.replace(".", r"\.")):
        load_experiment(write_study(tmp_path, STUDY.replace(old, new)))


def test_design_is_a_formula_model_s_table(tmp_path: Path) -> None:
    text = STUDY.replace(
        'formula = "died ~ age + C(sex) + biomarker"\nfamily = "bernoulli"',
        'name = "bayes-logistic"\n[model.params]\np = 2\n[model.columns_unused]',
    ).split("[model.columns_unused]")[0] + STUDY.split("biomarker = [0, 10]")[1]
    with pytest.raises(ExperimentError, match=r"design: is a formula model's design dataset"):
        load_experiment(write_study(tmp_path, text))
