"""Yıldırım–Ermiş penalty: GDP μ per step, amplified variants vs quadrature and membership inference."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import optimize, stats

from mechanisms.privacy import (
    ExGaussianNoise,
    GaussianNoise,
    GaussianTradeOff,
    LaplaceNoise,
    ThreatModel,
    additive_noise_delta,
    gdp_delta,
    penalty_blinded_profile,
    penalty_gdp_mu,
    penalty_reveal_mu,
    penalty_sigma,
    penalty_sign_profile,
    penalty_sum_profile,
)
from tests.mechanisms.privacy.privacy_testing import consistent_with, refutes, threshold_points


def test_penalty_mu_is_c_over_sigma() -> None:
    tau, n, alpha_exp, c = 0.3, 50, 0.5, 0.8
    sigma = penalty_sigma(tau, n, alpha_exp, c)
    assert sigma == pytest.approx(tau * math.sqrt(n) * c)
    assert penalty_reveal_mu(tau, n, alpha_exp) == pytest.approx(c / sigma)
    th = ThreatModel(5, colluding=2)
    assert penalty_gdp_mu(c, sigma, th) == pytest.approx(c / (sigma * math.sqrt(3)))


def _loglik_ratio(x: np.ndarray, theta: float, theta_star: float, b: float) -> float:
    """Clipped per-record log-likelihood ratio of N(θ, 1): each term in ±b|θ* − θ|, so c = 2b|θ* − θ|."""
    per = (theta_star - theta) * (x - 0.5 * (theta + theta_star))
    bound = b * abs(theta_star - theta)
    return float(np.sum(np.clip(per, -bound, bound)))


def test_membership_inference_noisy_ratio_matches_gdp() -> None:
    rng = np.random.default_rng(21)
    data = np.array([0.3, -1.1, 0.8, 2.0, -0.4, 1.2])  # a tiny registry
    n, theta, theta_star, b = data.size, 0.2, 0.7, 1.0
    c = 2 * b * abs(theta_star - theta)
    tau, alpha_exp = 0.8, 0.5
    sigma = penalty_sigma(tau, n, alpha_exp, c)
    mu = penalty_reveal_mu(tau, n, alpha_exp)
    # neighbour: replace one record by one at the other clipping bound (the change is exactly c)
    x_hi, x_lo = data.copy(), data.copy()
    x_hi[0], x_lo[0] = 10.0, -10.0
    l0, l1 = _loglik_ratio(x_lo, theta, theta_star, b), _loglik_ratio(x_hi, theta, theta_star, b)
    assert l1 - l0 == pytest.approx(c)
    draws = 200_000
    r0 = l0 + rng.normal(0.0, sigma, draws)  # what is revealed: the noisy ratio
    r1 = l1 + rng.normal(0.0, sigma, draws)
    pts = threshold_points(r0, r1, list(np.linspace(l0 - sigma, l1 + sigma, 9)))
    assert all(consistent_with(GaussianTradeOff(mu), p) for p in pts)
    assert any(refutes(GaussianTradeOff(mu / 2), p) for p in pts)


def test_exgaussian_noise_vs_scipy_and_mpmath() -> None:
    s = 0.7
    ours = ExGaussianNoise(s)
    ref = stats.exponnorm(1.0 / s, scale=s)
    x = np.linspace(-3, 15, 50)
    np.testing.assert_allclose(ours.logpdf(x), ref.logpdf(x), rtol=1e-10)
    np.testing.assert_allclose(np.exp(ours.logcdf(x)), ref.cdf(x), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(np.exp(ours.logsf(x)), ref.sf(x), rtol=1e-9, atol=1e-15)
    # deep left tail, where scipy underflows and float64 cancels: 50-digit evaluation of
    # F(x) = Φ(x/s) − e^{s²/2 − x} Φ(x/s − s), itself checked against quadrature of the density at x = −8
    mpmath.mp.dps = 50
    sm = mpmath.mpf(s)

    def cdf(x: float) -> mpmath.mpf:
        xm = mpmath.mpf(x)
        return mpmath.ncdf(xm / sm) - mpmath.exp(sm * sm / 2 - xm) * mpmath.ncdf(xm / sm - sm)

    dens = lambda t: mpmath.exp(sm * sm / 2 - t) * mpmath.ncdf(t / sm - sm)  # noqa: E731
    assert float(mpmath.quad(dens, [-mpmath.inf, -12, -10, -9, -8])) == pytest.approx(
        float(cdf(-8.0)), rel=1e-12
    )
    for xx in [-8.0, -15.0, -30.0]:
        assert float(ours.logcdf(np.array([xx]))[0]) == pytest.approx(float(mpmath.log(cdf(xx))), rel=1e-12)


def test_additive_noise_delta_closed_forms() -> None:
    eps = np.array([0.0, 0.3, 1.0, 2.5])
    np.testing.assert_allclose(
        additive_noise_delta(eps, 1.0, GaussianNoise(0.8)), gdp_delta(1.25, eps), atol=1e-14
    )
    lap = np.maximum(0.0, 1.0 - np.exp((eps - 2.0) / 2.0))  # Laplace(0.5), Δ = 1: ε₀ = 2
    np.testing.assert_allclose(additive_noise_delta(eps, 1.0, LaplaceNoise(0.5)), lap, atol=1e-14)


def _mp_exgauss_hockey(s: float, shift: float, eps: float) -> float:
    mpmath.mp.dps = 20
    dens = lambda t: mpmath.exp(s * s / 2 - t) * mpmath.ncdf(t / s - s)  # noqa: E731
    best = 0.0
    for sign in (1, -1):  # both orderings: Q = P shifted by ±Δ
        g = mpmath.e**eps
        h = lambda x, sg=sign, gg=g: float(dens(x) - gg * dens(x - sg * shift))  # noqa: E731
        xs = np.linspace(-12 * s - 5, 12 * s + 60, 4001)
        hv = np.array([h(x) for x in xs[::40]])
        pieces = []
        lo_edge, hi_edge = xs[0], xs[-1]
        changes = np.nonzero(np.diff(np.sign(hv)))[0]
        roots = [optimize.brentq(h, xs[::40][i], xs[::40][i + 1]) for i in changes]
        edges = [lo_edge, *roots, hi_edge]
        for a, b in itertools.pairwise(edges):
            if h(0.5 * (a + b)) > 0:
                pieces.append(
                    mpmath.quad(lambda x, sg=sign, gg=g: dens(x) - gg * dens(x - sg * shift), [a, b])
                )
        best = max(best, float(sum(pieces)) if pieces else 0.0)
    return best


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.5])
def test_amplified_sum_vs_quadrature(eps: float) -> None:
    shift, sigma, th = 1.0, 0.4, ThreatModel(3)
    prof = penalty_sum_profile(shift, sigma, th)
    ref = _mp_exgauss_hockey(sigma * math.sqrt(3), shift, eps)
    assert float(prof.delta_at(eps)) == pytest.approx(ref, rel=1e-4, abs=1e-10)
    assert float(prof.delta_at(eps)) <= gdp_delta(penalty_gdp_mu(shift, sigma, th), eps)


def test_membership_inference_amplified_sum() -> None:
    rng = np.random.default_rng(33)
    m, shift, sigma, n = 3, 1.0, 0.5, 200_000
    claim = penalty_sum_profile(shift, sigma, ThreatModel(m)).tradeoff()

    def reveal(a: float) -> np.ndarray:
        s = np.full(n, a)
        for _ in range(m):
            s += rng.normal(0.0, sigma, n) + rng.gamma(1.0 / m, 1.0, n)
        return s

    x0, x1 = reveal(0.0), reveal(shift)
    pts = threshold_points(x0, x1, list(np.linspace(-1.5, 3.0, 10))) + threshold_points(
        x1, x0, list(np.linspace(-1.5, 3.0, 10))
    )
    assert all(consistent_with(claim, p) for p in pts)
    wrong = penalty_sum_profile(shift / 4, sigma, ThreatModel(m)).tradeoff()
    assert any(refutes(wrong, p) for p in pts)


@pytest.mark.slow
def test_sign_below_sum_below_gdp() -> None:
    shift, sigma, th = 1.0, 0.3, ThreatModel(3)
    grid = np.linspace(0, 4, 41)
    sign = penalty_sign_profile(shift, sigma, th).delta_at(grid)
    total = penalty_sum_profile(shift, sigma, th).delta_at(grid)
    gdp = gdp_delta(penalty_gdp_mu(shift, sigma, th), grid)
    assert np.all(sign <= total + 1e-15) and np.all(total <= gdp + 1e-15)
    assert np.all(penalty_blinded_profile(shift, sigma, th).delta_at(grid) == total)
