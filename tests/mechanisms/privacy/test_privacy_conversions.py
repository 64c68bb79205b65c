"""GDP conversions vs mpmath, round trips, pure DP → GDP, and the no-guarantee fits."""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest

from mechanisms.privacy import (
    EpsDeltaTradeOff,
    GaussianTradeOff,
    est_epsdelta,
    est_gdp,
    gdp_delta,
    gdp_eps,
    gdp_mu,
    pure_dp_to_gdp,
)


def _mp_gdp_delta(mu: float, eps: float) -> float:
    mpmath.mp.dps = 60
    m, e = mpmath.mpf(mu), mpmath.mpf(eps)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


@pytest.mark.parametrize("mu", [0.05, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("eps", [0.0, 0.3, 2.0, 10.0, 40.0])
def test_gdp_delta_vs_mpmath(mu: float, eps: float) -> None:
    ref = _mp_gdp_delta(mu, eps)
    if ref < 1e-300:
        assert gdp_delta(mu, eps) < 1e-290
    else:
        assert gdp_delta(mu, eps) == pytest.approx(ref, rel=1e-8)


def test_gdp_delta_edge_cases_and_vectorisation() -> None:
    assert gdp_delta(0.0, 1.0) == 0.0
    assert gdp_delta(1.0, math.inf) == 0.0
    assert gdp_delta(1.0, 0.0) == pytest.approx(2 * float(mpmath.ncdf(0.5)) - 1, rel=1e-12)
    arr = gdp_delta(1.0, np.array([0.0, 1.0]))
    assert isinstance(arr, np.ndarray) and arr.shape == (2,)
    with pytest.raises(ValueError):
        gdp_delta(-1.0, 0.0)


@pytest.mark.parametrize("mu", [0.1, 0.8, 2.0, 5.0])
@pytest.mark.parametrize("eps", [0.05, 1.0, 3.0])
def test_gdp_round_trips(mu: float, eps: float) -> None:
    d = gdp_delta(mu, eps)
    assert gdp_eps(mu, d) == pytest.approx(eps, rel=1e-8, abs=1e-10)
    assert gdp_mu(eps, d) == pytest.approx(mu, rel=1e-8)
    # conservative direction: the returned ε really achieves δ
    for target in [1e-3, 1e-6, 1e-10]:
        e = gdp_eps(mu, target)
        assert gdp_delta(mu, e) <= target


def test_gdp_eps_limits() -> None:
    assert gdp_eps(1.0, 0.9) == 0.0
    assert gdp_eps(1.0, 0.0) == math.inf
    assert gdp_mu(1.0, 0.0) == 0.0


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_pure_dp_to_gdp_dominates_and_is_tight(eps: float) -> None:
    mu = pure_dp_to_gdp(eps)
    f_eps = EpsDeltaTradeOff(eps, 0.0)
    a = np.concatenate([np.logspace(-12, -1, 400), np.linspace(0, 1, 4001)])
    assert np.all(GaussianTradeOff(mu)(a) <= f_eps(a) + 1e-12)
    # a slightly smaller mu is violated somewhere: the conversion is tight
    assert np.any(GaussianTradeOff(mu * (1 - 1e-3))(a) > f_eps(a) + 1e-9)


def test_est_gdp_lies_below_points_and_warns() -> None:
    mu = 1.7
    alphas = np.linspace(0.01, 0.9, 25)
    betas = GaussianTradeOff(mu)(alphas)
    with pytest.warns(UserWarning, match="NOT a privacy guarantee"):
        est = est_gdp(alphas, betas)
    assert mu <= est <= mu * (1 + 1e-3)
    assert np.all(GaussianTradeOff(est)(alphas) <= betas + 1e-15)
    with pytest.warns(UserWarning):
        assert est_gdp([0.0], [0.5]) == math.inf  # support mismatch
    with pytest.warns(UserWarning):
        assert est_gdp([0.5], [0.6]) == 0.0  # above the diagonal: no constraint
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            est_gdp([0.1, 0.2], [0.5])


def test_est_epsdelta_lies_below_points_and_warns() -> None:
    f = EpsDeltaTradeOff(1.2, 0.01)
    alphas = np.linspace(0.0, 1.0, 41)[1:-1]
    betas = f(alphas)
    with pytest.warns(UserWarning, match="NOT a privacy guarantee"):
        est = est_epsdelta(alphas, betas, delta=0.01)
    assert 1.2 - 1e-9 <= est <= 1.2 * (1 + 1e-3)
    assert np.all(EpsDeltaTradeOff(est, 0.01)(alphas) <= betas + 1e-12)


def test_scalar_gdp_delta_equals_the_array_form() -> None:
    """gdp_eps's root finding uses a scalar δ(ε) (fast enough for a registry's per-batch check): it must be
    the same function as the array form it replaces there."""
    from mechanisms.privacy.conversions import _gdp_delta_scalar

    for mu in (1e-3, 0.01, 0.3, 1.0, 3.0, 10.0, 50.0):
        for eps in (0.0, 1e-3, 0.5, 3.0, 20.0, 80.0, 300.0):
            want = gdp_delta(mu, eps)
            assert abs(_gdp_delta_scalar(mu, eps) - want) <= 1e-15 + 1e-12 * want, (mu, eps)
