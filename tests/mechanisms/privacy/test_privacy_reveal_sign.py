"""Sign reveal: Bernoulli pairs vs dp_accounting, honest detection of unbounded loss, bounded variants,
and a membership-inference simulation of the actual confidential accept-reject mechanism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from mechanisms.privacy import (
    LazyAcceptance,
    MetropolisAcceptance,
    PenaltyAcceptance,
    bernoulli_delta,
    sign_reveal_privacy,
)
from tests.mechanisms.privacy.privacy_testing import consistent_with, refutes


@pytest.mark.parametrize(("p", "q"), [(0.3, 0.5), (0.9, 0.2), (0.01, 0.02), (1.0, 0.7)])
def test_bernoulli_delta_vs_dp_accounting(p: float, q: float) -> None:
    def logpmf(x: float) -> dict[int, float]:
        return {1: math.log(x) if x > 0 else -math.inf, 0: math.log1p(-x) if x < 1 else -math.inf}

    pld = pld_lib.from_two_probability_mass_functions(
        logpmf(q), logpmf(p), value_discretization_interval=1e-5, symmetric=False
    )
    eps = np.array([0.0, 0.1, 0.5, 1.0, 3.0])
    ref = np.asarray(pld.get_delta_for_epsilon(eps))
    ours = bernoulli_delta(p, q, eps)
    assert np.all(ref >= ours - 1e-12)
    np.testing.assert_allclose(ours, ref, atol=1e-4)


def _brute_worst(model: object, shift: float, a_min: float, a_max: float, eps: np.ndarray) -> np.ndarray:
    """Independent worst case: many pairs (a, a') with |a − a'| ≤ Δ, exact Bernoulli δ for each."""
    rng = np.random.default_rng(7)
    a = rng.uniform(a_min, a_max, 3000)
    a2 = np.clip(a + rng.uniform(-shift, shift, a.size), a_min, a_max)
    a = np.concatenate([a, np.linspace(a_min, a_max - shift, 400)])
    a2 = np.concatenate([a2, np.linspace(a_min, a_max - shift, 400) + shift])
    p1 = model.accept_prob(a)  # type: ignore[attr-defined]
    p2 = model.accept_prob(a2)  # type: ignore[attr-defined]
    return np.max([bernoulli_delta(float(x), float(y), eps) for x, y in zip(p1, p2, strict=True)], axis=0)


@pytest.mark.parametrize(
    ("model", "a_min", "a_max"),
    [
        (MetropolisAcceptance(), -6.0, -0.5),
        (LazyAcceptance(0.7), -6.0, 3.0),
        (PenaltyAcceptance(0.8), -8.0, 8.0),
        (MetropolisAcceptance(shape=2 / 3), -6.0, -0.3),
    ],
    ids=["mh-inflated", "lazy", "penalty", "mh-party"],
)
def test_sign_profile_covers_brute_force_worst_case(model: object, a_min: float, a_max: float) -> None:
    shift = 0.4
    res = sign_reveal_privacy(model, shift, a_min, a_max)  # type: ignore[arg-type]
    eps = np.array([0.0, 0.1, 0.3, 0.5, 1.0])
    brute = _brute_worst(model, shift, a_min, a_max, eps)
    claimed = res.profile.delta_at(eps)
    assert np.all(claimed >= brute - 1e-12)
    assert np.all(claimed <= brute + 0.02)  # and not wildly loose
    assert res.bounded


@pytest.mark.parametrize(("a_min", "a_max"), [(-math.inf, math.inf), (-10.0, 0.0), (-0.2, 2.0)])
def test_exact_metropolis_is_reported_unbounded(a_min: float, a_max: float) -> None:
    shift = 0.5
    res = sign_reveal_privacy(MetropolisAcceptance(), shift, a_min, a_max)
    worst_pair = max(a_min, -shift)  # a' < 0 = a
    assert not res.bounded
    assert res.infinity_mass >= 1 - math.exp(worst_pair) - 1e-12
    assert res.max_loss == math.inf and res.pure_eps is None
    assert res.eps_at(res.infinity_mass * 0.99) == math.inf
    assert res.delta_at(50.0) >= 1 - math.exp(worst_pair) - 1e-12
    assert "UNBOUNDED" in res.message and "reject" in res.message


def test_inflated_rejection_bound_is_bounded_with_closed_form() -> None:
    shift, c = 0.5, 1.0
    res = sign_reveal_privacy(MetropolisAcceptance(), shift, -20.0, -c)
    bound = max(shift, math.log((1 - math.exp(-c - shift)) / (1 - math.exp(-c))))
    assert res.bounded and res.pure_eps is not None
    assert bound - 1e-12 <= res.pure_eps <= bound + 0.02
    assert MetropolisAcceptance().pure_eps_bound(shift, -c) == pytest.approx(bound)
    assert res.delta_at(res.pure_eps + 0.01) == 0.0


def test_lazy_pure_bound() -> None:
    shift, gamma = 0.5, 0.8
    lazy = sign_reveal_privacy(LazyAcceptance(gamma), shift)
    assert lazy.pure_eps is not None
    assert lazy.pure_eps == pytest.approx(math.log((1 - gamma * math.exp(-shift)) / (1 - gamma)))
    assert lazy.max_loss <= lazy.pure_eps + 0.02
    assert lazy.delta_at(lazy.pure_eps + 0.02) <= 1e-14  # only the tail floor remains
    with pytest.raises(ValueError):
        LazyAcceptance(1.0)


def _simulate_bits(
    rng: np.random.Generator, a: float, n: int, m: int, gamma: float | None = None, penalty_sd: float = 0.0
) -> np.ndarray:
    """The actual mechanism: every party adds V_j ~ Gamma(1/m) (and λ_j ~ N(0, σ²)); reveal 1{S ≥ 0}."""
    s = np.full(n, a)
    for _ in range(m):
        s += rng.gamma(1.0 / m, 1.0, n)
        if penalty_sd > 0:
            s += rng.normal(0.0, penalty_sd, n)
    bits = s >= 0
    if gamma is not None:
        bits &= rng.random(n) < gamma  # secret lazy coin, ANDed inside the MPC
    return bits.astype(np.float64)


def _bit_tests(b0: np.ndarray, b1: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Tests "say D' iff bit = 1" and "say D' iff bit = 0": (k_alpha, n0, k_beta, n1)."""
    n0, n1 = b0.size, b1.size
    k0, k1 = int(b0.sum()), int(b1.sum())
    return [(k0, n0, n1 - k1, n1), (n0 - k0, n0, k1, n1)]


def test_membership_inference_lazy_coin_stays_above_claim() -> None:
    rng = np.random.default_rng(11)
    m, shift, gamma, n = 4, 0.5, 0.8, 300_000
    claim = sign_reveal_privacy(LazyAcceptance(gamma), shift).tradeoff()
    # worst pairs: around a = −Δ → 0 (reject side) and deep negative a (accept side)
    points = []
    for a, a2 in [(-shift, 0.0), (0.0, -shift), (-2.0, -2.0 + shift), (-2.0 + shift, -2.0)]:
        points += _bit_tests(_simulate_bits(rng, a, n, m, gamma), _simulate_bits(rng, a2, n, m, gamma))
    assert all(consistent_with(claim, p) for p in points)
    # power: the curve claimed for Δ/4 is refuted by the same experiment
    wrong = sign_reveal_privacy(LazyAcceptance(gamma), shift / 4).tradeoff()
    assert any(refutes(wrong, p) for p in points)


@pytest.mark.slow
def test_membership_inference_penalty_sign_stays_above_claim() -> None:
    from mechanisms.privacy import ThreatModel, penalty_sign_profile

    rng = np.random.default_rng(12)
    m, shift, sigma, n = 3, 1.0, 0.4, 300_000
    s = sigma * math.sqrt(m)
    claim = penalty_sign_profile(shift, sigma, ThreatModel(m)).tradeoff()
    points = []
    for lam in [-1.0, 0.0, 1.0, 2.0]:
        a, a2 = lam - s * s / 2, lam + shift - s * s / 2  # public correction −mσ²/2
        b0 = _simulate_bits(rng, a, n, m, penalty_sd=sigma)
        b1 = _simulate_bits(rng, a2, n, m, penalty_sd=sigma)
        points += _bit_tests(b0, b1) + _bit_tests(b1, b0)
    assert all(consistent_with(claim, p) for p in points)
    wrong = penalty_sign_profile(shift / 4, sigma, ThreatModel(m)).tradeoff()
    assert any(refutes(wrong, p) for p in points)


def test_penalty_acceptance_closed_form() -> None:
    # Φ(λ/s − s/2) + e^λ Φ(−λ/s − s/2) with a = λ − s²/2 (DESIGN.md), against simulation-free formula
    from scipy.stats import norm

    s = 0.9
    lam = np.linspace(-4, 4, 33)
    ref = norm.cdf(lam / s - s / 2) + np.exp(lam) * norm.cdf(-lam / s - s / 2)
    model = PenaltyAcceptance(s)
    np.testing.assert_allclose(model.accept_prob(lam - s * s / 2), ref, rtol=1e-10)
    np.testing.assert_allclose(model.reject_prob(lam - s * s / 2), 1 - ref, rtol=1e-8, atol=1e-15)
