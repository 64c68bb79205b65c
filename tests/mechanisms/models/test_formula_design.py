"""The design dataset of a formula model (mechanisms/models/formula_design.py; issue 40 item 2): drawn from
public quantities only (the sizes, the declared columns, the stated guesses), deterministic from the seed,
within the declared bounds and values, the outcome at the design parameter (a stated rate sets the
intercept), and every guess the model cannot take refused by its key."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from mechanisms.models.formula import FormulaModel
from mechanisms.models.formula_design import SD_FRACTION, DesignGuess, design_dataset

STUDY = FormulaModel(
    formula="died ~ age + C(sex) + biomarker",
    family="bernoulli",
    columns={
        "died": {"values": [0, 1]},
        "age": {"lower": 18, "upper": 100, "integer": True},
        "sex": {"values": ["F", "M"]},
        "biomarker": [0, 10],
    },
)
SIZES = (6000, 3000, 1000)


def test_deterministic_from_the_seed() -> None:
    a = design_dataset(STUDY, np.random.default_rng(7), SIZES, DesignGuess(rate=0.05))
    b = design_dataset(STUDY, np.random.default_rng(7), SIZES, DesignGuess(rate=0.05))
    c = design_dataset(STUDY, np.random.default_rng(8), SIZES, DesignGuess(rate=0.05))
    assert [len(r["died"]) for r in a.records] == list(SIZES)
    for ra, rb in zip(a.records, b.records, strict=True):
        assert sorted(ra) == ["age", "biomarker", "died", "sex"]
        for k in ra:
            np.testing.assert_array_equal(ra[k], rb[k])
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.text == b.text
    assert not np.array_equal(a.records[0]["age"], c.records[0]["age"])


def test_honours_the_declared_bounds_and_values() -> None:
    d = design_dataset(STUDY, np.random.default_rng(1), SIZES)
    for r in d.records:
        STUDY.check_data(r)  # the schema's own check: bounds, integers, declared values
        assert np.all(r["age"] == np.round(r["age"])) and r["age"].min() >= 18 and r["age"].max() <= 100
        assert set(np.unique(r["sex"])) == {0.0, 1.0}  # the labels' codes
        assert set(np.unique(r["died"])) <= {0.0, 1.0}
        assert 0.0 <= r["biomarker"].min() and r["biomarker"].max() <= 10.0


def test_numeric_columns_are_normal_centred_in_their_bounds() -> None:
    """Mean at the centre and sd = range/6 (truncated at ±3 sd: 0.9865 of it), checked with tolerances of
    4 standard errors; categories in equal shares (a binomial 4-sigma band)."""
    n = 40_000
    x = design_dataset(STUDY, np.random.default_rng(2), (n,)).records[0]["biomarker"]
    sd = 10.0 / SD_FRACTION
    want = stats.truncnorm(-3, 3, loc=5.0, scale=sd)
    assert abs(x.mean() - 5.0) < 4 * want.std() / math.sqrt(n)
    assert abs(x.std() - want.std()) < 4 * want.std() / math.sqrt(2 * n)
    sex = design_dataset(STUDY, np.random.default_rng(3), (n,)).records[0]["sex"]
    assert abs(sex.mean() - 0.5) < 4 * math.sqrt(0.25 / n)


def test_a_stated_rate_sets_the_intercept() -> None:
    """rate = 0.007: the intercept solves mean σ(η) = 0.007 over the design records, and the drawn outcome's
    prevalence agrees within a binomial 4-sigma band."""
    d = design_dataset(STUDY, np.random.default_rng(4), SIZES, DesignGuess(rate=0.007))
    pooled = {k: np.concatenate([r[k] for r in d.records]) for k in d.records[0]}
    assert STUDY.param_names[0] == "Intercept" and d.theta[0] < -4.0 and np.all(d.theta[1:] == 0.0)
    assert float(np.mean(special.expit(STUDY.eta(pooled, d.theta)[0]))) == pytest.approx(0.007, rel=1e-8)
    n = sum(SIZES)
    assert abs(pooled["died"].mean() - 0.007) < 4 * math.sqrt(0.007 * 0.993 / n)
    assert "rate = 0.007" in d.text and "Intercept" in d.text


def test_the_default_is_the_prior_s_centre_and_says_so() -> None:
    d = design_dataset(STUDY, np.random.default_rng(5), SIZES)
    assert np.all(d.theta == 0.0)
    assert "prior's centre" in d.text and "state [design] rate" in d.text


def test_stated_coefficients_columns_and_shares() -> None:
    guess = DesignGuess(
        coefficients={"age": 0.05, "sex[M]": 0.5},
        columns={"biomarker": (2.0, 1.0)},
        shares={"sex": (0.8, 0.2)},
    )
    n = 20_000
    d = design_dataset(STUDY, np.random.default_rng(6), (n,), guess)
    r = d.records[0]
    assert d.theta[STUDY.param_names.index("age")] == 0.05
    assert d.theta[STUDY.param_names.index("sex[M]")] == 0.5
    want = stats.truncnorm((0 - 2.0) / 1.0, (10 - 2.0) / 1.0, loc=2.0, scale=1.0)
    assert abs(r["biomarker"].mean() - want.mean()) < 4 * want.std() / math.sqrt(n)
    assert abs(r["sex"].mean() - 0.2) < 4 * math.sqrt(0.16 / n)


def test_other_families_and_the_random_intercept() -> None:
    cols = {
        "deaths": {"lower": 0, "upper": 8, "integer": True},
        "age": [20, 90],
        "person_years": [0.2, 10],
        "registry": {"values": [1, 2, 3]},
        "time": [0.01, 20],
        "event": {"values": [0, 1]},
        "level": [-50, 50],
    }
    poisson = FormulaModel("deaths ~ age + (1 | registry)", "poisson", cols, offset="person_years")
    d = design_dataset(poisson, np.random.default_rng(9), (500, 400, 300), DesignGuess(rate=0.02))
    for j, r in enumerate(d.records, start=1):
        poisson.check_data(r)
        assert np.all(r["registry"] == j)  # registry j holds the j-th declared value
    pooled = {k: np.concatenate([r[k] for r in d.records]) for k in d.records[0]}
    eta = poisson.eta(pooled, d.theta)[0]
    t = pooled["person_years"]
    assert float(np.sum(t * np.exp(eta)) / np.sum(t)) == pytest.approx(0.02, rel=1e-8)
    weibull = FormulaModel("time ~ age", "weibull", cols, event="event")
    w = design_dataset(weibull, np.random.default_rng(10), (2000,), DesignGuess(rate=0.3))
    weibull.check_data(w.records[0])
    assert abs(w.records[0]["event"].mean() - 0.3) < 4 * math.sqrt(0.21 / 2000)
    gaussian = FormulaModel("level ~ age", "gaussian", cols, sigma=2.0)
    g = design_dataset(gaussian, np.random.default_rng(11), (2000,), DesignGuess(rate=10.0))
    gaussian.check_data(g.records[0])
    assert abs(g.records[0]["level"].mean() - 10.0) < 4 * 2.0 / math.sqrt(2000)


@pytest.mark.parametrize(
    ("guess", "key"),
    [
        (DesignGuess(rate=1.5), "rate"),
        (DesignGuess(rate=0.01, coefficients={"Intercept": -4.0}), "rate"),
        (DesignGuess(coefficients={"agee": 0.1}), "coefficients.agee"),
        (DesignGuess(columns={"sex": (0.5, 0.1)}), "columns.sex"),
        (DesignGuess(columns={"age": (200.0, 10.0)}), "columns.age"),
        (DesignGuess(shares={"sex": (0.5, 0.2)}), "columns.sex.shares"),
        (DesignGuess(shares={"age": (1.0,)}), "columns.age"),
    ],
)
def test_guesses_the_model_cannot_take_are_refused_by_key(guess: DesignGuess, key: str) -> None:
    assert [k for k, _ in guess.problems(STUDY)][:1] == [key]
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        design_dataset(STUDY, np.random.default_rng(0), SIZES, guess)
