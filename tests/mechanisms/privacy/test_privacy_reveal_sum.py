"""Sum reveal (v1): closed forms vs mpmath quadrature and Monte Carlo; the slide formula's guard."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import optimize, special, stats

from mechanisms.privacy import (
    EpsDeltaTradeOff,
    ThreatModel,
    sum_reveal_delta,
    sum_reveal_directional_curve,
    sum_reveal_pld,
    sum_reveal_profile,
    sum_reveal_reverse_delta,
    sum_reveal_slide_bound,
    sum_reveal_tradeoff,
)
from tests.mechanisms.privacy.privacy_testing import consistent_with, refutes, threshold_points

THREATS = [ThreatModel(3), ThreatModel.single_party(3), ThreatModel(5, colluding=3), ThreatModel(2, 1)]


def _mp_hockey(k: float, shift: float, eps: float, reverse: bool) -> float:
    """∫ (p − e^ε q)_+ for P = Gamma(k), Q = Gamma(k) + shift (or swapped), by mpmath quadrature."""
    mpmath.mp.dps = 20
    lg = mpmath.loggamma(k)

    def dens(x: mpmath.mpf) -> mpmath.mpf:
        return mpmath.exp((k - 1) * mpmath.log(x) - x - lg) if x > 0 else mpmath.mpf(0)

    def p(x: mpmath.mpf) -> mpmath.mpf:
        return dens(x - shift) if reverse else dens(x)

    def q(x: mpmath.mpf) -> mpmath.mpf:
        return dens(x) if reverse else dens(x - shift)

    g = mpmath.e**eps
    # crossing of p and e^ε q on x > shift, located numerically from the densities themselves
    h = lambda x: float(p(mpmath.mpf(x)) - g * q(mpmath.mpf(x)))  # noqa: E731
    pts = [0.0, shift]
    lo, hi = shift * (1 + 1e-12), shift + 60.0
    if h(lo) * h(hi) < 0:
        pts.append(optimize.brentq(h, lo, hi, xtol=1e-15))
    pts.append(shift + 80.0)
    pts = sorted(set(pts))
    total = mpmath.mpf(0)
    for a, b in itertools.pairwise(pts):
        mid = 0.5 * (a + b)
        if p(mpmath.mpf(mid)) - g * q(mpmath.mpf(mid)) > 0:
            total += mpmath.quad(lambda x: p(x) - g * q(x), [a, b])
    return float(total)


@pytest.mark.slow
@pytest.mark.parametrize("threat", THREATS, ids=lambda t: t.name)
@pytest.mark.parametrize("shift", [0.3, 1.0])
def test_sum_delta_matches_quadrature(threat: ThreatModel, shift: float) -> None:
    k = threat.residual_shape
    for eps in [0.0, 0.2, shift, shift + 0.4, 3.0]:
        fwd = _mp_hockey(k, shift, eps, reverse=False)
        rev = _mp_hockey(k, shift, eps, reverse=True)
        assert float(sum_reveal_delta(eps, shift, threat)) == pytest.approx(
            max(fwd, rev), rel=1e-8, abs=1e-13
        )
        assert float(sum_reveal_reverse_delta(eps, shift, threat)) == pytest.approx(rev, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("threat", THREATS, ids=lambda t: t.name)
def test_sum_profile_is_flat_at_gamma_cdf(threat: ThreatModel) -> None:
    shift = 0.5
    floor = special.gammainc(threat.residual_shape, shift)
    grid = np.linspace(0, 20, 201)
    np.testing.assert_allclose(sum_reveal_delta(grid, shift, threat), floor, rtol=1e-12)
    assert np.all(sum_reveal_reverse_delta(grid, shift, threat) <= floor + 1e-15)
    prof = sum_reveal_profile(shift, threat)
    assert prof.delta_floor == pytest.approx(floor) and prof.eps_at(floor) == 0.0
    assert prof.eps_at(floor * 0.999) == math.inf


def test_outside_observer_tradeoff_is_design_formula() -> None:
    shift = 0.7
    f = sum_reveal_tradeoff(shift, ThreatModel(4))
    a = np.linspace(0, 1, 501)
    np.testing.assert_allclose(f(a), np.maximum(0.0, math.exp(-shift) - a), atol=1e-15)


@pytest.mark.parametrize("threat", THREATS, ids=lambda t: t.name)
def test_directional_curves_lie_above_and_touch_the_tradeoff(threat: ThreatModel) -> None:
    shift = 0.6
    f = sum_reveal_tradeoff(shift, threat)
    assert isinstance(f, EpsDeltaTradeOff)
    a, b = sum_reveal_directional_curve(shift, threat, n=4001)
    assert np.all(b >= f(a) - 1e-12)  # T(P, Q) ≥ f
    assert np.all(a >= f(b) - 1e-12)  # T(Q, P) (swap) ≥ f
    fd = special.gammainc(threat.residual_shape, shift)
    assert a[-1] == pytest.approx(1 - fd) and b[-1] == 0.0  # (1 − F(Δ), 0) is on f
    assert f(0.0) == pytest.approx(1 - fd)  # and its mirror (0, 1 − F(Δ))


def test_directional_curve_matches_monte_carlo() -> None:
    threat, shift = ThreatModel.single_party(3), 0.4
    k = threat.residual_shape
    rng = np.random.default_rng(2024)
    n = 200_000
    x0 = rng.gamma(k, 1.0, n)  # data a (shifted to 0)
    x1 = rng.gamma(k, 1.0, n) + shift  # neighbour a + Δ
    ts = [shift + q for q in (0.01, 0.1, 0.5, 1.0, 2.0)]
    # Neyman–Pearson test: say "a + Δ" when Δ < x ≤ t; its exact (α, β) is on the directional curve.
    for t in ts:
        alpha_hat = np.mean((x0 > shift) & (x0 <= t))
        beta_hat = np.mean(x1 > t)
        alpha = special.gammainc(k, t) - special.gammainc(k, shift)
        beta = 1 - special.gammainc(k, t - shift)
        assert abs(alpha_hat - alpha) < 5.5 * math.sqrt(alpha * (1 - alpha) / n) + 1e-9
        assert abs(beta_hat - beta) < 5.5 * math.sqrt(beta * (1 - beta) / n) + 1e-9
    # every threshold test lies above the claimed curve; the curve for Δ/2 is refuted.
    pts = threshold_points(x0, x1, [shift, *ts])
    claim = sum_reveal_tradeoff(shift, threat)
    assert all(consistent_with(claim, p) for p in pts)
    wrong = sum_reveal_tradeoff(shift / 2, threat)
    assert any(refutes(wrong, p) for p in pts)


def test_slide_formula_guard() -> None:
    threat, shift = ThreatModel.single_party(4), 0.5
    with pytest.raises(ValueError, match="tau >= Delta"):
        sum_reveal_slide_bound(shift, threat, tau=0.2)
    # why: for τ < Δ the formula's (ε, F(τ)) is false — the exact δ at that ε is F(Δ) > F(τ)
    k = threat.residual_shape
    tau = 0.2
    eps_claim = shift + (1 - k) * math.log1p(shift / tau)
    assert float(sum_reveal_delta(eps_claim, shift, threat)) > special.gammainc(k, tau)
    # for τ ≥ Δ it holds (and 1 − k = 1/m for one party)
    for tau in [shift, 1.0, 3.0]:
        eps, delta = sum_reveal_slide_bound(shift, threat, tau)
        assert eps == pytest.approx(shift + math.log1p(shift / tau) / 4)
        assert float(sum_reveal_delta(eps, shift, threat)) <= delta + 1e-15


def test_delta_monotone_in_shift() -> None:
    # the analysis takes |a − a'| = Δ as the worst case; check that smaller shifts leak no more.
    grid = np.linspace(0, 5, 51)
    for threat in THREATS:
        ref = sum_reveal_delta(grid, 1.0, threat)
        for s in [0.1, 0.5, 0.9]:
            assert np.all(sum_reveal_delta(grid, s, threat) <= ref + 1e-15)
            assert np.all(
                sum_reveal_reverse_delta(grid, s, threat) <= sum_reveal_reverse_delta(grid, 1.0, threat)
            )


def test_sum_pld_is_pessimistic() -> None:
    threat, shift = ThreatModel.single_party(3), 0.5
    pld = sum_reveal_pld(shift, threat, 1e-3)
    floor = stats.gamma(threat.residual_shape).cdf(shift)
    d = np.asarray(pld.get_delta_for_epsilon(np.array([0.0, 0.5, 2.0, 10.0])))
    assert np.all(d >= floor - 1e-12) and np.all(d <= floor + 1e-9)
    assert pld.self_compose(10).get_delta_for_epsilon(1.0) == pytest.approx(1 - (1 - floor) ** 10, rel=1e-6)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        sum_reveal_delta(0.1, 0.0, ThreatModel(3))
    with pytest.raises(ValueError):
        ThreatModel(3, colluding=3)
