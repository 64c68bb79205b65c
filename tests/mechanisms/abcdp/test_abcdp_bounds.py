"""Flip probability G_b against Monte Carlo and an mpmath oracle; the posterior error bound empirically."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from mechanisms.abcdp.bounds import (
    expected_flips,
    flip_probability,
    posterior_mean_error_bound,
    posterior_mmd_bound,
    posterior_tv_bound,
)


def test_flip_probability_basic_properties() -> None:
    a = np.linspace(0, 5, 101)
    g = flip_probability(a, 0.4)
    assert g[0] == pytest.approx(0.5)
    assert np.all(np.diff(g) < 0) and np.all(g > 0)
    assert np.array_equal(flip_probability([0.0, 0.3], 0.0), [0.5, 0.0])
    assert np.allclose(flip_probability(-a, 0.4), g)


def test_flip_probability_matches_monte_carlo() -> None:
    """Binomial tolerance: |p̂ − G| ≤ 4.5 SE for every cell (false-failure rate < 1e-4 over the grid)."""
    rng = np.random.default_rng(20240601)
    n = 200_000
    eps_abc = 0.2
    for b in (0.01, 0.1, 1.0):
        for rho in (0.0, 0.15, 0.2, 0.21, 0.3, 0.6, 1.0):
            nu = rng.laplace(0.0, 2 * b, n)
            m = rng.laplace(0.0, b, n)
            flips = ((rho + nu <= eps_abc + m) != (rho <= eps_abc)).mean()
            g = float(flip_probability(abs(rho - eps_abc), b))
            se = math.sqrt(max(g * (1 - g), 1.0 / n) / n)
            assert abs(flips - g) <= 4.5 * se, (b, rho, flips, g)


@pytest.mark.parametrize(("a", "b"), [(0.0, 1.0), (0.3, 0.1), (1.0, 0.7), (4.0, 0.5)])
def test_flip_probability_equals_laplace_difference_tail(a: float, b: float) -> None:
    """G_b(a) = P(ν − m > a), ν ~ Lap(2b), m ~ Lap(b), by numerical integration in mpmath."""
    with mpmath.workdps(30):
        def lap_pdf(x: mpmath.mpf, s: float) -> mpmath.mpf:
            return mpmath.exp(-abs(x) / s) / (2 * s)

        def lap_sf(x: mpmath.mpf, s: float) -> mpmath.mpf:
            return mpmath.exp(-x / s) / 2 if x >= 0 else 1 - mpmath.exp(x / s) / 2

        tail = mpmath.quad(lambda m: lap_pdf(m, b) * lap_sf(a + m, 2 * b), [-mpmath.inf, -a, 0, mpmath.inf])
    assert float(flip_probability(a, b)) == pytest.approx(float(tail), rel=1e-10)


def test_posterior_tv_bound_holds_empirically() -> None:
    rng = np.random.default_rng(7)
    rho = rng.uniform(0, 1, 400)
    thetas = rng.uniform(-1, 1, 400)
    eps_abc, b = 0.3, 0.05
    abc = rho <= eps_abc
    tvs, mean_errs = [], []
    for _ in range(400):
        dp = rho + rng.laplace(0, 2 * b, rho.size) <= eps_abc + rng.laplace(0, b)
        if not dp.any():
            tvs.append(1.0)
            mean_errs.append(2.0)
            continue
        inter = np.sum(abc & dp)
        tvs.append(1 - inter / max(abc.sum(), dp.sum()))
        mean_errs.append(abs(thetas[abc].mean() - thetas[dp].mean()))
    bound = posterior_tv_bound(rho, eps_abc, b)
    se = np.std(tvs) / math.sqrt(len(tvs))
    assert np.mean(tvs) <= bound + 3 * se
    assert np.mean(mean_errs) <= posterior_mean_error_bound(rho, eps_abc, b, 1.0) + 3 * np.std(mean_errs) / 20
    assert posterior_mmd_bound(rho, eps_abc, b, kernel_bound=1.0) == pytest.approx(2 * bound)
    assert expected_flips(rho, eps_abc, b) == pytest.approx(flip_probability(rho - eps_abc, b).sum())
    assert math.isinf(posterior_tv_bound(rho + 2, eps_abc, b))


def test_flip_distribution_is_that_of_a_laplace_difference() -> None:
    """Sanity on the derivation: the CDF of ν − m implied by G_b matches samples (KS test)."""
    rng = np.random.default_rng(3)
    b = 0.3
    diff = rng.laplace(0, 2 * b, 50_000) - rng.laplace(0, b, 50_000)

    def cdf(x: np.ndarray) -> np.ndarray:
        g = flip_probability(np.abs(x), b)
        return np.where(x >= 0, 1 - g, g)

    assert stats.kstest(diff, cdf).pvalue > 1e-3
