"""The per-decision privacy of lazy acceptance revealed as the accept bit, for every threat model:
``sign_step_profile`` against an independent brute-force computation (mpmath incomplete gamma on a fine
grid of a, both orderings of every neighbouring pair), across a grid of Δ, m, q and γ; and against a Monte
Carlo membership-inference test on simulated parties' bits."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from mechanisms.privacy import EpsDeltaTradeOff, ThreatModel, sign_step_profile
from tests.mechanisms.privacy.privacy_testing import consistent_with, refutes, threshold_points


def _brute_pairs(
    gamma: float, k: float, shift: float, a_max: float = 0.5
) -> list[tuple[mpmath.mpf, mpmath.mpf]]:
    """(p(a), p(a + Δ)) on a fine grid of a, p(a) = γ P(a + Gamma(k) ≥ 0) by mpmath's regularised incomplete
    gamma (independent of scipy); computed once per (γ, k, Δ) and read at every ε."""
    mpmath.mp.dps = 30

    def p(a: float) -> mpmath.mpf:
        return gamma * (mpmath.mpf(1) if a >= 0 else mpmath.gammainc(k, -a, mpmath.inf, regularized=True))

    return [(p(float(a)), p(float(a) + shift)) for a in np.linspace(-25.0, a_max, 2401)]


def _brute_delta(pairs: list[tuple[mpmath.mpf, mpmath.mpf]], eps: float) -> float:
    """sup over the grid of the two-ordering Bernoulli hockey stick between p(a) and p(a + Δ)."""
    best = mpmath.mpf(0)
    g = mpmath.e**eps
    for p0, p1 in pairs:
        for x, y in ((p0, p1), (p1, p0)):
            best = max(best, x - g * y, (1 - x) - g * (1 - y))
    return float(best)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shift", "m", "q", "gamma"),
    [(0.2, 3, 0, 0.5), (0.4, 5, 2, 0.25), (1.0, 7, 3, 0.75), (0.4, 7, 1, 0.5)],
)
def test_lazy_sign_profile_vs_brute_force(shift: float, m: int, q: int, gamma: float) -> None:
    threat = ThreatModel(m, q)
    res = sign_step_profile(shift, threat, gamma)
    assert res.bounded
    k = threat.residual_shape
    pairs = _brute_pairs(gamma, k, shift)
    for eps in (0.0, 0.5 * shift, shift, 2.0 * shift):
        ref = _brute_delta(pairs, eps)
        ours = float(res.delta_at(eps))
        assert ours >= ref - 1e-12  # never below the truth
        assert ours <= ref + 0.02 * shift + 1e-12  # and tight up to the a-grid's slack (about h = Δ/100)
    if q == 0:  # the closed form of the pure epsilon
        x = 0.0
        closed = max(shift, math.log((1 - gamma * math.exp(x - shift)) / (1 - gamma * math.exp(x))))
        assert res.pure_eps == pytest.approx(closed)


@pytest.mark.slow
def test_membership_inference_on_lazy_bits_of_colluders() -> None:
    """q = 2 of m = 5: the bits an honest party's neighbouring records give, with the colluders' noise known
    (so only the other 3 parties' Gamma(1/5) shares and the coin are random), fit the claimed curve."""
    rng = np.random.default_rng(12)
    m, q, shift, gamma, n = 5, 2, 0.4, 0.5, 400_000
    threat = ThreatModel(m, q)
    claim = sign_step_profile(shift, threat, gamma).profile.tradeoff()
    for a in (-shift, -0.1, 0.5):
        bits = []
        for aa in (a, a + shift):
            noise = rng.gamma(1.0 / m, 1.0, (m - q, n)).sum(axis=0)
            bits.append(((aa + noise >= 0) & (rng.random(n) < gamma)).astype(float))
        pts = threshold_points(bits[0], bits[1], [0.5]) + threshold_points(bits[1], bits[0], [0.5])
        assert all(consistent_with(claim, p) for p in pts)
    # the worst pair (a = -Δ vs 0) refutes a claim of pure eps = Δ / 2
    noise0 = rng.gamma(1.0 / m, 1.0, (m - q, n)).sum(axis=0)
    noise1 = rng.gamma(1.0 / m, 1.0, (m - q, n)).sum(axis=0)
    b0 = ((-shift + noise0 >= 0) & (rng.random(n) < gamma)).astype(float)
    b1 = ((0.0 + noise1 >= 0) & (rng.random(n) < gamma)).astype(float)
    pts = threshold_points(b0, b1, [0.5]) + threshold_points(b1, b0, [0.5])
    assert any(refutes(EpsDeltaTradeOff(shift / 2, 0.0), p) for p in pts)
