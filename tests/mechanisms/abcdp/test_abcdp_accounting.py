"""Accounting for ABCDP: inverses, high-precision oracles, and exact checks of small mechanisms."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import special, stats

from mechanisms.abcdp import accounting as acc
from mechanisms.abcdp.rejection import (
    RejectionGaussianConfig,
    SoftABCDPConfig,
    rejection_abcdp_gaussian,
    soft_abcdp_weights,
)


@pytest.mark.parametrize("resample", [False, True])
def test_laplace_scale_and_eps_are_inverse(resample: bool) -> None:
    for eps in (0.01, 0.5, 1.0, 10.0):
        b = acc.svt_laplace_scale(eps, 4e-4, 100, resample)
        assert acc.svt_laplace_eps(b, 4e-4, 100, resample) == pytest.approx(eps, rel=1e-12)
    assert acc.svt_laplace_scale(math.inf, 4e-4, 100, resample) == 0.0
    assert math.isinf(acc.svt_laplace_eps(0.0, 4e-4, 100, resample))


def test_gaussian_svt_eps_monotone_and_inverse() -> None:
    sig = [0.001, 0.003, 0.01, 0.03]
    eps = [acc.svt_gaussian_eps(s, 2 * s, 4e-4, 10, 10_000, 1e-5) for s in sig]
    assert all(a > b for a, b in itertools.pairwise(eps))
    s = acc.svt_gaussian_scale(1.0, 1e-5, 4e-4, 10, 10_000)
    assert acc.svt_gaussian_eps(s, 2 * s, 4e-4, 10, 10_000, 1e-5) == pytest.approx(1.0, rel=1e-8)


def test_gaussian_svt_conversion_not_worse_than_classic() -> None:
    """dp_accounting's conversion must be at least as good as min_α rdp(α) + log(1/δ)/(α − 1)."""
    s, k, c, d, delta = 0.01, 5000, 5, 4e-4, 1e-6
    orders = acc.RDP_ORDERS
    rdp = c * acc.gaussian_above_threshold_rdp(orders, s, 2 * s, d, k)
    classic = float(np.min(rdp + math.log(1 / delta) / (orders - 1)))
    assert acc.svt_gaussian_eps(s, 2 * s, d, c, k, delta) <= classic + 1e-12


def _above_threshold_output_probs(q: np.ndarray, thr: float, s1: float, s2: float) -> np.ndarray:
    """Exact P(first accept = i), i = 0..k-1, and P(no accept), for accept iff q_i + ν_i ≤ thr + z."""
    z = np.linspace(-12 * s1, 12 * s1, 20001)
    w = stats.norm.pdf(z, scale=s1) * (z[1] - z[0])
    p_acc = special.ndtr((thr + z[:, None] - q[None, :]) / s2)  # (grid, k)
    survive = np.cumprod(np.c_[np.ones(z.size), 1 - p_acc], axis=1)  # P(no accept among first i)
    probs = [(w * survive[:, i] * p_acc[:, i]).sum() for i in range(q.size)]
    probs.append((w * survive[:, q.size]).sum())
    return np.array(probs)


def _hockey_stick(p: np.ndarray, p2: np.ndarray, eps: float) -> float:
    e = math.exp(eps)
    return float(max(np.maximum(p - e * p2, 0).sum(), np.maximum(p2 - e * p, 0).sum()))


@pytest.mark.parametrize("shift_pattern", ["all_up", "all_down", "mixed"])
def test_gaussian_above_threshold_bound_holds_on_small_instances(shift_pattern: str) -> None:
    """Necessary check of the transcribed Zhu & Wang bound: exact output laws of one Gaussian
    AboveThreshold on neighbouring query vectors never exceed δ at the reported ε."""
    k, d, delta = 6, 1.0, 1e-3
    s1 = 2.0
    s2 = 2 * s1
    eps = acc.svt_gaussian_eps(s1, s2, d, 1, k, delta)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(-1.0, 1.0, size=k)
        shift = {"all_up": np.full(k, d), "all_down": np.full(k, -d),
                 "mixed": rng.choice([-d, d], size=k)}[shift_pattern]
        p = _above_threshold_output_probs(q, 0.0, s1, s2)
        p2 = _above_threshold_output_probs(q + shift, 0.0, s1, s2)
        assert p.sum() == pytest.approx(1.0, abs=1e-6)
        assert _hockey_stick(p, p2, eps) <= delta


def _log_ndtr_mp(x: float) -> mpmath.mpf:
    return mpmath.log(mpmath.ncdf(x))


@pytest.mark.parametrize(("sigma", "eps_abc", "bound"), [(0.05, 0.1, 2.0), (0.3, 0.1, 2.0), (1.0, 0.5, 2.0),
                                                         (0.2, 0.3, 0.5)])
def test_rejection_exact_eps_against_mpmath_brute_force(sigma: float, eps_abc: float, bound: float) -> None:
    """The tight per-candidate ε equals a brute-force maximum over ρ (mpmath precision)."""
    sens = 0.02
    best = mpmath.mpf(0)
    with mpmath.workdps(30):
        for rho in np.linspace(0.0, bound - sens, 161):
            for r, r2 in ((rho, rho + sens), (rho + sens, rho)):
                za, zb = (eps_abc - r) / sigma, (eps_abc - r2) / sigma
                best = max(best, abs(_log_ndtr_mp(za) - _log_ndtr_mp(zb)),
                           abs(_log_ndtr_mp(-za) - _log_ndtr_mp(-zb)))
    ours = acc.rejection_gaussian_exact_eps(sigma, sens, eps_abc, bound)
    assert ours == pytest.approx(float(best), rel=1e-6)
    assert acc.rejection_gaussian_h(sigma, sens, eps_abc, bound) >= ours


def test_h_bound_dominates_exact_and_is_decreasing() -> None:
    sigmas = np.geomspace(0.05, 20, 40)
    h = [acc.rejection_gaussian_h(s, 4e-4, 0.1, 2.0) for s in sigmas]
    ex = [acc.rejection_gaussian_exact_eps(s, 4e-4, 0.1, 2.0) for s in sigmas]
    assert all(a >= b for a, b in zip(h, ex, strict=True))
    assert all(a >= b for a, b in itertools.pairwise(h))


@pytest.mark.parametrize("bound", ["paper", "exact"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_rejection_sigma_inverse(bound: str, delta: float) -> None:
    sig = acc.rejection_gaussian_sigma(1.0, 500, 4e-4, 0.1, 2.0, delta=delta, bound=bound)
    cfg = RejectionGaussianConfig(0.1, 4e-4, 2.0, sig, 500, delta, bound)
    assert cfg.privacy_event().eps == pytest.approx(1.0, rel=1e-6)


def test_compose_pure_dp() -> None:
    assert acc.compose_pure_dp(0.01, 100) == pytest.approx(1.0)
    tighter = acc.compose_pure_dp(0.01, 10_000, delta=1e-6)
    assert tighter < 100.0  # zCDP composition beats basic composition for many small releases
    rho = 10_000 * 0.01**2 / 2
    assert tighter <= rho + 2 * math.sqrt(rho * math.log(1e6)) + 1e-9  # classic zCDP conversion


def test_soft_abcdp_matches_gaussian_rdp_formula() -> None:
    sigma_soft, sens, eps_abc, n, delta = 0.4, 4e-4, 0.1, 200, 1e-5
    z = sigma_soft * eps_abc / sens
    orders = acc.RDP_ORDERS
    expected = acc.rdp_to_eps(orders, n * orders / (2 * z * z), delta)
    assert acc.soft_abcdp_eps(sigma_soft, sens, eps_abc, n, delta) == pytest.approx(expected, rel=1e-3)
    s = acc.soft_abcdp_sigma(1.0, delta, sens, eps_abc, n)
    assert acc.soft_abcdp_eps(s, sens, eps_abc, n, delta) == pytest.approx(1.0, rel=1e-6)


def test_rejection_and_soft_mechanisms_run() -> None:
    rng = np.random.default_rng(0)
    rho = rng.uniform(0, 1, 300)
    cfg = RejectionGaussianConfig.from_eps_total(2.0, 300, 4e-4, 0.2, 2.0)
    bits, ev = rejection_abcdp_gaussian(rho, cfg, np.random.default_rng(1))
    assert bits.shape == (300,) and ev.eps == pytest.approx(2.0, rel=1e-6)
    soft = SoftABCDPConfig.from_eps_total(2.0, 1e-5, 4e-4, 0.2, 300)
    w, released, ev2 = soft_abcdp_weights(rho, soft, np.random.default_rng(2))
    assert w.shape == (300,) and w.sum() == pytest.approx(1.0) and np.all(w >= 0)
    assert released.shape == (300,) and ev2.eps == pytest.approx(2.0, rel=1e-6) and ev2.delta == 1e-5
    with pytest.raises(ValueError, match="exceed"):
        rejection_abcdp_gaussian(np.zeros(301), cfg, rng)


def test_abcdp_events_plug_into_the_party_ledger() -> None:
    """An SVT run's event enters the same ledger as the samplers' events and composes with them."""
    import math

    from mechanisms.abcdp.events import SVT_LAPLACE, AbcdpPrivacyEvent
    from mechanisms.privacy import EpsDeltaBudget, GaussianEvent, PrivacyLedger, composed_eps

    run = AbcdpPrivacyEvent(SVT_LAPLACE, eps=1.0, delta=0.0, params={"c": 10})
    ledger = PrivacyLedger(EpsDeltaBudget(eps_max=5.0, delta=1e-6), ())
    ledger = ledger.commit([run.to_ledger_event()])
    ledger = ledger.commit([GaussianEvent(0.5, count=1, label="sampler step")])
    spent = composed_eps(list(ledger.events), 1e-6)
    assert 1.0 < spent < 1.0 + composed_eps([GaussianEvent(0.5, count=1, label="x")], 1e-6) + 1e-9
    assert ledger.would_exceed([AbcdpPrivacyEvent(SVT_LAPLACE, eps=2.5, delta=0.0).to_ledger_event()])
    with pytest.raises(ValueError, match="non-private run"):
        AbcdpPrivacyEvent(SVT_LAPLACE, eps=math.inf, delta=0.0).to_ledger_event()
