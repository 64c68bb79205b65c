"""The residual noise of a coalition, N(0, s²) + Gamma(k, 1): densities against mpmath, the shift bound
against the exact ex-Gaussian (k = 1) and against independent mpmath hockey-stick integrals (k < 1), and the
penalty profiles for colluding parties against membership-inference tests on simulated parties."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, optimize

from mechanisms.privacy import (
    ExGaussianNoise,
    ThreatModel,
    additive_noise_delta,
    gdp_delta,
    penalty_blinded_profile,
    penalty_gdp_mu,
    penalty_sign_profile,
    penalty_step_profile,
    penalty_sum_profile,
)
from mechanisms.privacy.residual import (
    ExGammaNoise,
    ResidualPenaltyAcceptance,
    exgamma_log_tails,
    residual_shift_delta,
)
from tests.mechanisms.privacy.privacy_testing import consistent_with, refutes, threshold_points


def _mp_expect(s: float, k: float, x: float, h: object) -> mpmath.mpf:
    """E[h(G)] for G ~ Gamma(k, 1) by mpmath's tanh-sinh quadrature in u = G^k (the Gamma law becomes
    e^{-u^{1/k}} du / Γ(k + 1): no singularity at 0), with break points around the Gaussian bump."""
    km = mpmath.mpf(k)

    def f(u: mpmath.mpf) -> mpmath.mpf:
        y = u ** (1 / km)
        return h(y) * mpmath.exp(-y) / mpmath.gamma(km + 1)  # type: ignore[operator]

    return mpmath.quad(f, [*(mpmath.mpf(y) ** km for y in _breaks(s, x)), mpmath.inf])


def _breaks(s: float, x: float) -> list[float]:
    """Break points in y around the Gaussian bump of the integrand at x."""
    c = max(x - s * s, 0.0)
    return sorted(
        {0.0, max(c - 12 * s, 0.0), max(c - 3 * s, 0.0), c, c + 3 * s, c + 12 * s, max(x + 12 * s, 0.0)}
    )


def _mp_density(s: float, k: float, x: float) -> mpmath.mpf:
    """∫_0^∞ φ_s(x − y) g_k(y) dy."""
    return _mp_expect(s, k, x, lambda y: mpmath.npdf(mpmath.mpf(x) - y, 0, mpmath.mpf(s)))


def _mp_sf(s: float, k: float, x: float) -> mpmath.mpf:
    """P(N(0, s²) + G > x)."""
    return _mp_expect(s, k, x, lambda y: mpmath.ncdf((y - mpmath.mpf(x)) / mpmath.mpf(s)))


def test_k1_is_the_exgaussian() -> None:
    x = np.linspace(-8.0, 40.0, 25)
    for s in (0.3, 1.0, 2.5):
        ours, ref = ExGammaNoise(s, 1.0), ExGaussianNoise(s)
        np.testing.assert_allclose(ours.logpdf(x), ref.logpdf(x), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(ours.logsf(x), ref.logsf(x), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(ours.logcdf(x), ref.logcdf(x), rtol=1e-9, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize(("s", "k"), [(0.5, 1 / 7), (1.0, 3 / 7), (2.0, 0.5), (4.9, 6 / 7)])
def test_densities_and_tails_vs_mpmath(s: float, k: float) -> None:
    mpmath.mp.dps = 25
    noise = ExGammaNoise(s, k)
    for x in (-6 * s, -1.0, 0.0, 0.3, 2.0, 8.0, 30.0):
        ref = float(mpmath.log(_mp_density(s, k, x)))
        assert float(noise.logpdf(np.array([x]))[0]) == pytest.approx(ref, rel=1e-9, abs=1e-9)
        sf = _mp_sf(s, k, x)
        got = float(noise.logsf(np.array([x]))[0])
        assert got == pytest.approx(float(mpmath.log(sf)), rel=1e-9, abs=1e-9)
        assert float(noise.logcdf(np.array([x]))[0]) == pytest.approx(
            float(mpmath.log(1 - sf)), rel=1e-8, abs=1e-9
        )


@pytest.mark.slow
@pytest.mark.parametrize(("s", "k"), [(0.5, 1 / 7), (2.0, 3 / 7), (4.9, 6 / 7), (1.0, 0.95)])
def test_beta_mixture_tails_vs_mpmath(s: float, k: float) -> None:
    """``exgamma_log_tails`` (Gamma(k) = Beta(k, 1 − k) · Exp(1)) against the direct mpmath quadrature, both
    tails, from deep in the Gamma tail to the Gaussian one, to 1e-10 on the log."""
    mpmath.mp.dps = 30
    xs = np.array([-6 * s, -1.0, 0.0, 0.3, 2.0, 8.0, 30.0])
    log_sf, log_cdf = exgamma_log_tails(s, k, xs)
    for x, got_sf, got_cdf in zip(xs, log_sf, log_cdf, strict=True):
        sf = _mp_sf(s, k, float(x))
        assert got_sf == pytest.approx(float(mpmath.log(sf)), rel=1e-10, abs=1e-10)
        assert got_cdf == pytest.approx(float(mpmath.log(1 - sf)), rel=1e-10, abs=1e-10)


@pytest.mark.slow
def test_shift_bound_dominates_the_exact_exgaussian_closely() -> None:
    """k = 1: the binned bound must never fall below the exact curve, and is tight to a few per cent."""
    eps = np.linspace(0.0, 3.0, 13)
    for shift, s in ((0.5, 1.0), (1.0, 0.4), (0.2, 2.0)):
        exact = additive_noise_delta(eps, shift, ExGaussianNoise(s))
        bound = residual_shift_delta(eps, shift, ExGammaNoise(s, 1.0))
        assert np.all(bound >= exact - 1e-15)
        big = exact > 1e-6
        assert np.all(bound[big] <= exact[big] * 1.25 + 1e-12)


def _quad_density(s: float, k: float, x: float) -> float:
    """∫_0^∞ φ_s(x − y) g_k(y) dy by scipy's adaptive quadrature in u = y^k, over the same break points as
    ``_mp_expect`` (agrees with it to 1e-9 relative where the density is above 1e-12, 40x faster: the
    hockey-stick integral below needs thousands of densities)."""

    def f(u: float) -> float:
        y = u ** (1.0 / k)
        return math.exp(-y - 0.5 * ((x - y) / s) ** 2) / (s * math.sqrt(2 * math.pi) * math.gamma(k + 1))

    us = [*(y**k for y in _breaks(s, x)), math.inf]
    pieces = itertools.pairwise(us)
    return sum(integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-12, limit=200)[0] for a, b in pieces)


def test_the_fast_density_agrees_with_mpmath() -> None:
    """The hockey-stick reference's density against the mpmath one, where it carries mass."""
    s, k = 0.7, 1 / 5
    for x in np.linspace(-4.0, 20.0, 13):
        assert _quad_density(s, k, float(x)) == pytest.approx(float(_mp_density(s, k, float(x))), rel=1e-9)


def _quad_hockey(s: float, k: float, shift: float, eps: float) -> float:
    """max over both orderings of ∫ (p(x) − e^ε p(x ∓ Δ))_+ dx with quadrature densities (independent of
    the binned bound under test)."""
    dens: dict[float, float] = {}

    def p(x: float) -> float:
        key = round(x, 12)
        if key not in dens:
            dens[key] = _quad_density(s, k, x)
        return dens[key]

    lo, hi = -10 * s - 2 * shift, 10 * s + 40.0
    xs = np.linspace(lo, hi, 161)
    best = 0.0
    for sign in (1.0, -1.0):

        def h(x: float, sg: float = sign) -> float:
            return p(x) - math.exp(eps) * p(x - sg * shift)

        hv = np.array([h(x) for x in xs])
        edges = [lo, *(optimize.brentq(h, xs[i], xs[i + 1]) for i in np.nonzero(np.diff(np.sign(hv)))[0]), hi]
        total = 0.0
        for a, b in itertools.pairwise(edges):
            if h(0.5 * (a + b)) > 0:
                nodes, weights = np.polynomial.legendre.leggauss(40)
                mid, half = 0.5 * (a + b), 0.5 * (b - a)
                vals = [max(h(mid + half * t), 0.0) for t in nodes]
                total += half * float(np.dot(weights, vals))
        best = max(best, total)
    return best


@pytest.mark.slow
def test_shift_bound_vs_independent_quadrature() -> None:
    s, k, shift = 0.7, 1 / 5, 1.0
    noise = ExGammaNoise(s, k)
    for eps in (0.0, 0.8):
        ref = _quad_hockey(s, k, shift, eps)
        ours = float(residual_shift_delta(np.array([eps]), shift, noise)[0])
        assert ours >= ref * (1 - 1e-6) - 1e-12
        assert ours <= ref * 1.10 + 1e-9


def _residual_draws(rng: np.random.Generator, a: float, n: int, m: int, q: int, sigma: float) -> np.ndarray:
    """What q colluders see of a + Σ_j (λ_j + V_j) after removing their own shares: m − q honest parties."""
    out = np.full(n, a)
    for _ in range(m - q):
        out += rng.normal(0.0, sigma, n) + rng.gamma(1.0 / m, 1.0, n)
    return out


@pytest.mark.slow
def test_membership_inference_colluders_sum() -> None:
    """q = 2 of m = 5 collude: their view of the sum is consistent with the claimed (amplified) curve."""
    rng = np.random.default_rng(7)
    m, q, shift, sigma, n = 5, 2, 1.0, 0.4, 300_000
    th = ThreatModel(m, q)
    claim = penalty_sum_profile(shift, sigma, th).tradeoff()
    x0, x1 = _residual_draws(rng, 0.0, n, m, q, sigma), _residual_draws(rng, shift, n, m, q, sigma)
    grid = list(np.linspace(-1.0, 3.0, 12))
    pts = threshold_points(x0, x1, grid) + threshold_points(x1, x0, grid)
    assert all(consistent_with(claim, p) for p in pts)
    wrong = penalty_sum_profile(shift / 4, sigma, th).tradeoff()
    assert any(refutes(wrong, p) for p in pts)


@pytest.mark.slow
def test_membership_inference_colluders_sign() -> None:
    """The accept bit as q = 2 of m = 5 colluders see it: Bernoulli pairs within the claimed curve."""
    rng = np.random.default_rng(8)
    m, q, shift, sigma, n = 5, 2, 1.0, 0.4, 400_000
    th = ThreatModel(m, q)
    claim = penalty_sign_profile(shift, sigma, th).tradeoff()
    for a in (-1.5, -0.5, 0.5):
        b0 = _residual_draws(rng, a, n, m, q, sigma) >= 0
        b1 = _residual_draws(rng, a + shift, n, m, q, sigma) >= 0
        pts = threshold_points(b0.astype(float), b1.astype(float), [0.5])
        pts += threshold_points(b1.astype(float), b0.astype(float), [0.5])
        assert all(consistent_with(claim, p) for p in pts)
    model = ResidualPenaltyAcceptance(sigma * math.sqrt(m - q), (m - q) / m)
    b = _residual_draws(rng, -0.5, n, m, q, sigma) >= 0
    p_model = float(model.accept_prob(np.array([-0.5]))[0])
    assert abs(b.mean() - p_model) < 5 * math.sqrt(p_model * (1 - p_model) / n)


@pytest.mark.slow
def test_colluders_keep_an_amplification_below_gdp() -> None:
    """For q >= 1 the Gamma noise of the other parties still amplifies: each curve is at most the GDP
    bound of the residual Gaussian, strictly below it somewhere, and above the outside observer's."""
    shift, sigma, m = 0.3, 0.3, 4
    grid = np.array([0.0, 0.2, 0.5, 1.0, 2.0])
    for q in (1, 2):
        th = ThreatModel(m, q)
        gdp = gdp_delta(penalty_gdp_mu(shift, sigma, th), grid)
        outside = penalty_sum_profile(shift, sigma, ThreatModel(m, 0)).delta_at(grid)
        for prof in (
            penalty_sum_profile(shift, sigma, th),
            penalty_sign_profile(shift, sigma, th),
            penalty_blinded_profile(shift, sigma, th),
        ):
            d = prof.delta_at(grid)
            assert np.all(d <= gdp + 1e-15)
            assert np.any(d < 0.9 * gdp)
            assert prof.method == "numerical bound"
        assert np.all(penalty_sum_profile(shift, sigma, th).delta_at(grid) >= outside - 1e-12)


def test_step_profile_dispatch() -> None:
    th = ThreatModel(5, 1)
    for observed in ("sum", "blinded", "sign"):
        prof = penalty_step_profile(observed, 0.5, 0.5, th)
        assert observed in prof.description
    with pytest.raises(ValueError, match="no penalty profile"):
        penalty_step_profile("svt", 0.5, 0.5, th)
