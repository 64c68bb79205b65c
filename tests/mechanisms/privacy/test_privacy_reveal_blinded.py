"""Blinded reveal (v2): K₁ closed form, quadrature vs mpmath and Monte Carlo, sandwich bounds."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import special, stats

from mechanisms.privacy import (
    ThreatModel,
    bernoulli_delta,
    blinded_k1_survival,
    blinded_pair_delta,
    blinded_reveal_profile,
    sum_reveal_delta,
)
from mechanisms.privacy.reveal_blinded import blinded_log_density, blinded_log_survival

W0 = 2.0**-12


def test_k1_closed_form_vs_mpmath_and_quadrature() -> None:
    mpmath.mp.dps = 30
    z = np.array([1e-12, 1e-4, 0.05, 0.5, 2.0, 10.0, 200.0])
    ref = [
        float(mpmath.quad(lambda v, zz=zz: mpmath.exp(-v - zz / v), [0, mpmath.sqrt(zz), mpmath.inf]))
        for zz in z
    ]
    np.testing.assert_allclose(blinded_k1_survival(z), ref, rtol=1e-12)
    quad = np.exp(blinded_log_survival(np.log(z), a=0.0, w0=0.0))
    np.testing.assert_allclose(quad, blinded_k1_survival(z), rtol=1e-9)


def test_k1_closed_form_vs_monte_carlo() -> None:
    rng = np.random.default_rng(5)
    n = 200_000
    wv = rng.exponential(size=n) * rng.exponential(size=n)
    res = stats.kstest(wv, lambda z: 1.0 - blinded_k1_survival(z))
    assert res.pvalue > 1e-4


def _mp_density(a: float, w0: float, z: float) -> float:
    """|z| f_Z(z) by mpmath: f_Z(z) = ∫ f_S(s) f_W(z/s) / |s| ds, S = a + Exp(1), W = w0 + Exp(1)."""
    mpmath.mp.dps = 25

    def integrand(s: mpmath.mpf) -> mpmath.mpf:
        w = z / s
        if s <= a or w <= w0:
            return mpmath.mpf(0)
        return mpmath.exp(-(s - a)) * mpmath.exp(-(w - w0)) / abs(s)

    if z > 0:
        lo, hi = max(a, 0.0), (z / w0 if w0 > 0 else mpmath.inf)
    else:
        lo, hi = (max(a, z / w0) if w0 > 0 else a), 0.0
    mid = [x for x in (math.sqrt(abs(z)), -math.sqrt(abs(z))) if lo < x < (hi if hi != mpmath.inf else 1e300)]
    return float(abs(z) * mpmath.quad(integrand, [lo, *sorted(mid), hi]))


@pytest.mark.parametrize("a", [-1.3, -0.2, 0.0, 0.8])
def test_density_vs_mpmath(a: float) -> None:
    for z in [1e-6, 0.01, 0.3, 1.0, 4.0]:
        for branch in (1, -1):
            if branch < 0 and a >= 0:
                continue
            zz = z * branch
            ref = _mp_density(a, W0, zz)
            got = math.exp(float(blinded_log_density(math.log(z), a, W0, branch)))
            assert got == pytest.approx(ref, rel=1e-7, abs=1e-300), (a, zz)


@pytest.mark.parametrize("a", [-0.9, 0.4])
def test_survival_vs_monte_carlo_of_actual_mechanism(a: float) -> None:
    # the real mechanism: m parties each add Gamma(1/m) to S and to W
    rng = np.random.default_rng(8)
    m, n = 3, 200_000
    s = a + rng.gamma(1 / m, 1.0, (m, n)).sum(axis=0)
    w = W0 + rng.gamma(1 / m, 1.0, (m, n)).sum(axis=0)
    z = s * w
    for q in [0.05, 0.3, 1.0, 3.0]:
        for branch in (1, -1):
            if branch < 0 and a >= 0:
                continue
            emp = np.mean(z > q) if branch > 0 else np.mean(z < -q)
            p = math.exp(float(blinded_log_survival(math.log(q), a, W0, branch)))
            assert abs(emp - p) <= 5.5 * math.sqrt(p * (1 - p) / n) + 1e-6


def test_positive_branch_loss_is_constant_when_a_negative() -> None:
    # for a, a' < 0 the positive part of S is e^a·Exp(1): the loss there is exactly a − a'
    y = np.linspace(-20, 3, 200)
    d = blinded_log_density(y, -1.0, W0, 1) - blinded_log_density(y, -1.5, W0, 1)
    np.testing.assert_allclose(d, 0.5, atol=1e-8)


def test_pair_delta_sandwiched_by_post_processing() -> None:
    shift = 0.5
    eps = np.array([0.0, 0.2, 0.5, 1.0, 2.0])
    for a in [-2.5, -1.2]:
        d = blinded_pair_delta(eps, a, a + shift, W0, n_y=900)
        # sign(Z) is a post-processing of Z: δ_blinded ≥ δ_sign for the same pair
        assert np.all(d >= bernoulli_delta(math.exp(a), math.exp(a + shift), eps) - 1e-9)
        # Z is a post-processing of S: δ_blinded ≤ δ_sum = 1 − e^{−Δ}
        assert np.all(d <= sum_reveal_delta(eps, shift, ThreatModel(3)) + 1e-9)
    # the blinding removes the sum reveal's support edge when a < 0: strictly less leakage at ε = 1
    assert d[3] < 0.5 * (1 - math.exp(-shift))


def test_profile_reports_sign_leak_when_range_straddles_zero() -> None:
    shift = 0.5
    prof = blinded_reveal_profile(shift, -1.0, 1.0, n_a=3, n_y=600)
    assert prof.method == "numerical estimate"
    assert np.all(np.asarray(prof.deltas) >= 1 - math.exp(-shift) - 1e-12)
    assert prof.eps_at(0.1) == math.inf


def test_profile_bounded_range_is_finite_and_decreasing() -> None:
    prof = blinded_reveal_profile(0.5, -3.0, -1.0, n_a=2, n_y=600, eps_max=6.0)
    d = np.asarray(prof.deltas)
    assert d[0] < 1 - math.exp(-0.5) and d[-1] < 1e-3
    assert np.isfinite(prof.eps_at(1e-2))
    assert special.gammainc(1.0, 0.5) == pytest.approx(1 - math.exp(-0.5))
