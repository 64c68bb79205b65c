"""The registry-scale figure's floor columns (issue 35): the one-posterior-sample floor for the figure's ESS
at the DP Laplace approximation, and each planned ε of a row over it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from mechanisms.floor import floor_of
from mechanisms.models import load_model
from mechanisms.warmstart import LaplaceApproximation
from simulations.registry_scale import DELTA, ESS_TARGET, floor_columns


def test_floor_columns_are_the_floor_at_the_dp_approximation_and_the_ratios_over_it() -> None:
    model = load_model("bayes-logistic", {"p": 2})
    lap = LaplaceApproximation(np.array([-0.5, 0.8, -0.3]), np.diag([4.0, 3.0, 2.0]) * 1e-4)
    ws = SimpleNamespace(model=model, laplace=lap)
    row = {"eps_confidential": 9.0, "eps_confidential_renyi": 7.5, "eps_worst_record_renyi": 5.0}
    got = floor_columns(ws, row)  # type: ignore[arg-type]
    fl = floor_of(model, lap.mean, lap.cov, "add-remove")
    assert fl is not None
    floor = fl.eps(ESS_TARGET, DELTA)
    assert got["eps_floor"] == pytest.approx(floor, rel=1e-12) and 0 < floor < 5.0
    assert got["floor_ratio_confidential"] == pytest.approx(9.0 / floor, rel=1e-12)
    assert got["floor_ratio_confidential_renyi"] == pytest.approx(7.5 / floor, rel=1e-12)
    assert got["floor_ratio_worst_record_renyi"] == pytest.approx(5.0 / floor, rel=1e-12)
    assert "floor_ratio_worst_record" not in got  # only the row's own figures
    # the floor's μ falls like sqrt(1/n): a covariance 100 times smaller, a μ 10 times smaller
    tight = LaplaceApproximation(lap.mean, lap.cov / 100)
    small = floor_columns(SimpleNamespace(model=model, laplace=tight), {})  # type: ignore[arg-type]
    fl_small = floor_of(model, tight.mean, tight.cov, "add-remove")
    assert fl_small is not None and fl_small.c == pytest.approx(fl.c / 10, rel=1e-9)
    assert small == {"eps_floor": pytest.approx(fl_small.eps(ESS_TARGET, DELTA), rel=1e-12)}
    assert small["eps_floor"] < floor and math.isfinite(small["eps_floor"])
