"""The one-posterior-sample floor (mechanisms/floor.py) against independent computations: a closed form
(Gaussian mean with known sd) and a brute force (the exact posterior mode refitted with the worst record
added, for a logistic regression)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.floor import candidate_records, floor_of
from mechanisms.models import load_model
from mechanisms.models.formula import FormulaModel
from mechanisms.privacy.conversions import gdp_eps
from mechanisms.warmstart_steps import exact_laplace


def _gaussian(lo: float, hi: float, sigma: float) -> FormulaModel:
    return FormulaModel("y ~ 1", "gaussian", {"y": [lo, hi]}, sigma=sigma)


@pytest.mark.parametrize("neighbours", ["add-remove", "replace-one"])
def test_closed_form_gaussian_mean(neighbours: str) -> None:
    """y ~ N(β, σ²), y in [lo, hi]: g(y) = (y − β̂)/σ², Σ = 1/(n/σ² + 1/prior_sd²), so
    c = max(hi − β̂, β̂ − lo) √Σ / σ² (add-remove) and (hi − lo) √Σ / σ² (replace-one)."""
    lo, hi, sigma, n = -1.0, 5.0, 2.0, 400
    model = _gaussian(lo, hi, sigma)
    y = np.random.default_rng(1).uniform(lo, hi, n)
    mean, cov = exact_laplace(model, {"y": y})
    beta, var = float(mean[0]), 1.0 / (n / sigma**2 + 1.0 / 2.5**2)
    assert cov[0, 0] == pytest.approx(var, rel=1e-4)
    f = floor_of(model, mean, cov, neighbours)
    assert f is not None
    spread = max(hi - beta, beta - lo) if neighbours == "add-remove" else hi - lo
    assert f.c == pytest.approx(spread * math.sqrt(var) / sigma**2, rel=1e-5)
    assert f.mu(100) == pytest.approx(10 * f.c)
    assert f.eps(100, 1e-5) == pytest.approx(gdp_eps(10 * f.c, 1e-5))


def test_brute_force_logistic_refit() -> None:
    """The floor's worst record, added to the records, moves the exact posterior mode by c in the Σ⁻¹ metric
    (one Newton step; the O(1/n) rest within 5 % at n = 4,000), and no candidate record moves it more
    than c by more than that: the floor is the sup over the candidates, measured independently."""
    model = load_model("bayes-logistic", {"p": 2, "prior_sd": 2.5, "x_bound": 2.0})
    (data,) = model.synthetic_data(np.random.default_rng(3), (4000,))
    mean, cov = exact_laplace(model, data)
    f = floor_of(model, mean, cov, "add-remove")
    assert f is not None and f.candidates > 100
    prec = np.linalg.inv(cov)

    def moved(record: dict[str, float]) -> float:
        more = {k: np.r_[data[k], record[k]] for k in data}
        m2, _ = exact_laplace(model, more)
        d = m2 - mean
        return float(math.sqrt(d @ prec @ d))

    # the worst corner record by brute force over the box's corners and both outcomes
    shifts = [moved({"x1": a, "x2": b, "y": y}) for a in (-2.0, 2.0) for b in (-2.0, 2.0) for y in (0.0, 1.0)]
    assert max(shifts) == pytest.approx(f.c, rel=0.05)


def test_floor_is_a_maximum_over_allowed_records_only() -> None:
    """With a public ellipsoid the candidates are clipped into it (the model's own clip_records): none lies
    outside, and the floor falls below the box's (fewer extreme records are allowed)."""
    box = load_model("bayes-logistic", {"p": 2, "prior_sd": 2.5, "x_bound": 3.0})
    ell = load_model(
        "bayes-logistic",
        {"p": 2, "prior_sd": 2.5, "x_bound": 3.0, "x_center": [0.0, 0.0], "x_cov": [[1, 0], [0, 1]],
         "x_radius": 2.0},
    )  # fmt: skip
    recs = candidate_records(ell, np.random.default_rng(0))
    assert recs is not None
    assert np.max(recs["x1"] ** 2 + recs["x2"] ** 2) <= 4.0 + 1e-9
    (data,) = box.synthetic_data(np.random.default_rng(4), (3000,))
    mean, cov = exact_laplace(box, data)
    f_box, f_ell = floor_of(box, mean, cov, "add-remove"), floor_of(ell, mean, cov, "add-remove")
    assert f_box is not None and f_ell is not None
    assert f_ell.c < f_box.c


def test_unbounded_region_has_no_floor() -> None:
    model = load_model("gaussian-mean", {"sigma": 1.0})
    assert floor_of(model, np.zeros(1), np.eye(1), "add-remove") is None


def test_line_states_plan_and_ratio() -> None:
    model = _gaussian(0.0, 1.0, 1.0)
    f = floor_of(model, np.array([0.5]), np.array([[0.01]]), "add-remove")
    assert f is not None
    line = f.line(400, 1e-5, 2 * f.eps(400, 1e-5))
    assert line.startswith(f"floor: eps_floor = {f.eps(400, 1e-5):.3g} at delta = 1e-05 for 400 effective")
    assert line.endswith("ratio 2)")
